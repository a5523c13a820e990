//! `redmutex demo`: redmutex at work, live, against a private redis-server.
//!
//! First what `redmutex doctor` says of the server; then five scenes: workers contending
//! for one lock (and never overlapping), a kept-alive lease outliving its TTL many times
//! over, a lock lost mid-work — detected, and the work cancelled —, what `redmutex list`
//! shows and what a waiting `exec`'s waiting line says, and a Redlock lease over five
//! private nodes surviving two node deaths and reporting the loss of its quorum. Then a
//! summary, with the locker's stats. About thirteen seconds.

mod operations;
mod server;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{connection::Connection, Locker, LostReason};
use tokio::time::Instant;

use crate::duration::format;
use crate::exit::{self, Failure};
use crate::output::outln;
use crate::target;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How many workers contend for the lock in the first scene.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=50))]
    workers: u32,
}

pub async fn run(args: DemoArgs, redis_flags: &[String]) -> Result<u8, Failure> {
    // Only an explicit --redis is used; otherwise a private server, never someone's data.
    let (_server, url) = match redis_flags {
        [] => {
            let server = server::PrivateServer::start()
                .await
                .map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
            let url = server.url.clone();
            outln!("redmutex demo: started a private redis-server at {url}")?;
            (Some(server), url)
        }
        [url] => (None, url.clone()),
        urls => {
            return Err(Failure::usage(format!(
                "the demo runs against one Redis server; {} given",
                urls.len()
            )))
        }
    };
    let conn = redmutex::connection::connect(&url)
        .await
        .map_err(|e| Failure::from_lock_error(&e, redis_flags))?;
    let locker = Locker::new(conn.clone()).with_prefix("redmutex-demo:");
    let clock = Clock(Instant::now());

    server_check(&locker, &url).await?;
    let contention = contention(&locker, &clock, args.workers).await?;
    let keepalive = keep_alive(&locker, &clock).await?;
    let lost = lost_lock(&locker, conn, &clock).await?;
    let operations = operations::scene(&locker, |line| clock.say(line)).await?;
    // Redlock needs nodes of its own: only with private servers, never someone's Redis.
    let redlock = match redis_flags {
        [] => Some(redlock(&clock).await?),
        _ => None,
    };

    outln!()?;
    outln!("summary")?;
    outln!(
        "  contention: {} workers, {} acquisitions, {} overlaps, longest wait {}",
        args.workers,
        contention.acquisitions,
        contention.overlaps,
        format(contention.longest_wait)
    )?;
    outln!(
        "  keep-alive: a {} lease held for {} with {} renewals, never lost",
        format(keepalive.ttl),
        format(keepalive.held),
        keepalive.renewals
    )?;
    outln!(
        "  lost lock:  detected {} after the key vanished; work cancelled after {} of {} steps",
        format(lost.detected_after),
        lost.steps_done,
        lost.steps_planned
    )?;
    outln!(
        "  operations: `list` showed {} locks; the waiting line said {} times who held the key, \
         until the lock was taken after {}",
        operations.listed,
        operations.waiting_lines,
        format(operations.waited)
    )?;
    let stats = locker.stats();
    outln!(
        "  stats:      {} acquired ({} after waiting), {} not obtained, {} renewals, {} lost \
         (Locker::stats; the same as metrics with the `metrics` feature)",
        stats.acquired,
        stats.acquired_after_waiting,
        stats.not_obtained,
        stats.renewals,
        stats.lost
    )?;
    if let Some(r) = &redlock {
        outln!(
            "  redlock:    5 nodes; the lease outlived 2 node deaths ({} renewals); a rival was \
             refused; losing the quorum was signalled {} later, before the validity ended",
            r.renewals,
            format(r.detected_after)
        )?;
    }
    outln!("  total time: {}", format(clock.0.elapsed()))?;
    let redlock_ok = redlock
        .as_ref()
        .is_none_or(|r| r.survived && r.rival_refused && r.lost_in_time);
    let listed_all = operations.listed == 3;
    if contention.overlaps > 0
        || !keepalive.never_lost
        || !lost.cancelled
        || !redlock_ok
        || !listed_all
    {
        return Err(Failure::new(
            exit::LOST,
            "the demo saw something it must never see",
        ));
    }
    Ok(0)
}

struct RedlockScene {
    renewals: u64,
    survived: bool,
    rival_refused: bool,
    lost_in_time: bool,
    detected_after: Duration,
}

/// Five private nodes; a kept-alive Redlock lease while they die one by one.
/// What `redmutex doctor` says of the server, before anything is locked there.
async fn server_check<C: Connection>(locker: &Locker<C>, url: &str) -> Result<(), Failure> {
    outln!()?;
    outln!("is the server fit for locks? (what `redmutex doctor` checks)")?;
    let report = locker.check_server().await;
    let urls = [url.to_owned()];
    for finding in &report.findings {
        outln!("  {}", crate::doctor::finding_line(finding, &urls))?;
    }
    outln!(
        "  {}",
        crate::doctor::verdict(&report, report.reached_any())
    )
}

async fn redlock(clock: &Clock) -> Result<RedlockScene, Failure> {
    outln!()?;
    outln!(
        "scene 5: Redlock over 5 private redis-servers; a lease with a 1 s TTL while nodes die"
    )?;
    let unavailable = |e: String| Failure::new(exit::UNAVAILABLE, e);
    let mut nodes = Vec::new();
    for _ in 0..5 {
        nodes.push(Some(
            server::PrivateServer::start().await.map_err(unavailable)?,
        ));
    }
    let urls: Vec<String> = nodes.iter().flatten().map(|n| n.url.clone()).collect();
    // Built as the commands build theirs from several --redis URLs.
    let access = target::Access::default();
    let locker = target::locker(&urls, &access, Duration::ZERO)
        .await?
        .with_prefix("redmutex-demo:");
    let rival = target::locker(&urls, &access, Duration::ZERO)
        .await?
        .with_prefix("redmutex-demo:");
    let fail = |e: redmutex::Error| Failure::from_lock_error(&e, &urls);
    let lock = locker
        .acquire("ledger", Duration::from_secs(1))
        .await
        .map_err(fail)?;
    clock.say(format!(
        "acquired on a quorum of 5 nodes; valid for {} (TTL − time taken − clock drift)",
        format(lock.remaining_validity())
    ));
    let lease = lock.keep_alive().map_err(fail)?;
    for node in [4, 3] {
        tokio::time::sleep(Duration::from_millis(800)).await;
        nodes[node] = None; // stops that redis-server
        clock.say(format!(
            "node {node} killed — {} of 5 left, quorum is 3; renewals so far {}",
            nodes.iter().flatten().count(),
            lease.renewals()
        ));
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let survived = !lease.is_lost();
    let renewals = lease.renewals();
    clock.say(format!(
        "two nodes down for a while: lease {}, {renewals} renewals",
        if survived { "still held" } else { "LOST" }
    ));
    let rival_refused = match rival.acquire("ledger", Duration::from_secs(1)).await {
        Err(redmutex::Error::NotObtained(n)) => {
            if let Some(f) = &n.no_quorum {
                clock.say(format!(
                    "a rival tries: refused — held on {} nodes, {} unreachable, {} needed",
                    f.held(),
                    f.unreachable(),
                    f.needed
                ));
            }
            true
        }
        other => {
            clock.say(format!(
                "a rival tries: {:?} — must never succeed",
                other.map(|_| ())
            ));
            false
        }
    };
    nodes[2] = None;
    let killed = Instant::now();
    clock.say("node 2 killed — 2 of 5 left: no quorum can renew the lease");
    // A lease declared lost ends its validity then and there, so the validity it had is
    // sampled while it lasts: the greatest value seen (a renewal only moves it later).
    let mut validity = lease.valid_until();
    let deadline = Instant::now() + Duration::from_secs(3);
    let reason = loop {
        tokio::select! {
            reason = lease.lost() => break Some(reason),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        validity = validity.max(lease.valid_until());
        if Instant::now() >= deadline {
            break None;
        }
    };
    let signalled = Instant::now();
    let detected_after = signalled - killed;
    let lost_in_time =
        matches!(reason, Some(LostReason::Unreachable { .. })) && signalled < validity;
    match (&reason, lost_in_time) {
        (Some(_), true) => clock.say(format!(
            "LOST: no quorum for the renewal — signalled {} after the kill, {} before the \
             lock's validity ended",
            format(detected_after),
            format(validity - signalled)
        )),
        (Some(reason), false) => clock.say(format!(
            "LOST ({reason}) {} after the kill, {} the lock's validity ended — must never be",
            format(detected_after),
            if signalled < validity {
                "before"
            } else {
                "after"
            }
        )),
        (None, _) => clock.say("the loss was not signalled"),
    }
    drop(lease);
    Ok(RedlockScene {
        renewals,
        survived,
        rival_refused,
        lost_in_time,
        detected_after,
    })
}

/// Seconds since the demo started, for the live log.
struct Clock(Instant);

impl Clock {
    /// A timed line; a broken stdout is ignored here (the scenes go on, and the summary's
    /// write reports it).
    fn say(&self, line: impl AsRef<str>) {
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "[{:>6.2}s] {}",
            self.0.elapsed().as_secs_f64(),
            line.as_ref()
        );
    }
}

struct Contention {
    acquisitions: u32,
    overlaps: u32,
    longest_wait: Duration,
}

async fn contention<C: Connection>(
    locker: &Locker<C>,
    clock: &Clock,
    workers: u32,
) -> Result<Contention, Failure> {
    const ROUNDS: u32 = 3;
    outln!()?;
    outln!(
        "scene 1: {workers} workers take turns on one lock (each holds it 120 ms, {ROUNDS} times)"
    )?;
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU32::new(0));
    let longest_wait = Arc::new(Mutex::new(Duration::ZERO));
    let mut tasks = Vec::new();
    for worker in 1..=workers {
        let (locker, inside, overlaps, longest_wait) = (
            locker.clone(),
            inside.clone(),
            overlaps.clone(),
            longest_wait.clone(),
        );
        let started = clock.0;
        tasks.push(tokio::spawn(async move {
            let clock = Clock(started);
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                let lock = locker
                    .acquire("report", Duration::from_secs(5))
                    .metadata(format!("worker={worker}"))
                    .retry(
                        retry::exponential(Duration::from_millis(5), Duration::from_millis(100))
                            .jitter(Jitter::equal()),
                    )
                    .deadline(Duration::from_secs(20))
                    .await?;
                let waited = asked.elapsed();
                {
                    let mut longest = longest_wait.lock().unwrap_or_else(|p| p.into_inner());
                    *longest = (*longest).max(waited);
                }
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                clock.say(format!(
                    "worker {worker} holds the lock (waited {})",
                    format(waited)
                ));
                tokio::time::sleep(Duration::from_millis(120)).await;
                inside.store(false, Ordering::SeqCst);
                lock.release().await?;
                // Step back a while, as a real worker would between jobs; without push
                // wake-up, the one that just released would otherwise win most races.
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            Ok::<(), redmutex::Error>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| Failure::new(exit::LOST, format!("worker failed: {e}")))?
            .map_err(|e| Failure::from_lock_error(&e, &[]))?;
    }
    let overlaps = overlaps.load(Ordering::SeqCst);
    clock.say(format!(
        "all workers done: {} acquisitions, {overlaps} overlaps",
        workers * ROUNDS
    ));
    let longest_wait = *longest_wait.lock().unwrap_or_else(|p| p.into_inner());
    Ok(Contention {
        acquisitions: workers * ROUNDS,
        overlaps,
        longest_wait,
    })
}

struct KeptAlive {
    ttl: Duration,
    held: Duration,
    renewals: u64,
    never_lost: bool,
}

async fn keep_alive<C: Connection>(
    locker: &Locker<C>,
    clock: &Clock,
) -> Result<KeptAlive, Failure> {
    let ttl = Duration::from_secs(1);
    outln!()?;
    outln!("scene 2: a job that runs 4 s under a lock with a 1 s TTL, kept alive every ~333 ms")?;
    let started = Instant::now();
    let lease = locker
        .acquire("nightly", ttl)
        .metadata("job=nightly")
        .await
        .and_then(|lock| lock.keep_alive())
        .map_err(|e| Failure::from_lock_error(&e, &[]))?;
    for step in 1..=8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let info = locker
            .inspect("nightly")
            .await
            .map_err(|e| Failure::from_lock_error(&e, &[]))?;
        clock.say(format!(
            "job step {step}/8: lock held {}, Redis TTL left {}, renewals so far {}",
            format(started.elapsed()),
            info.ttl.map_or("-".into(), format),
            lease.renewals()
        ));
    }
    let held = started.elapsed();
    let renewals = lease.renewals();
    let never_lost = !lease.is_lost();
    lease
        .release()
        .await
        .map_err(|e| Failure::from_lock_error(&e, &[]))?;
    clock.say(format!(
        "job done after {} (4× the TTL); lock released",
        format(held)
    ));
    Ok(KeptAlive {
        ttl,
        held,
        renewals,
        never_lost,
    })
}

struct Lost {
    detected_after: Duration,
    steps_done: u32,
    steps_planned: u32,
    cancelled: bool,
}

async fn lost_lock<C: Connection>(
    locker: &Locker<C>,
    mut admin: C,
    clock: &Clock,
) -> Result<Lost, Failure> {
    const STEPS: u32 = 20;
    outln!()?;
    outln!("scene 3: a job under a kept-alive lock; 1.2 s in, someone deletes the lock key")?;
    let lease = locker
        .acquire("migration", Duration::from_secs(1))
        .await
        .and_then(|lock| lock.keep_alive())
        .map_err(|e| Failure::from_lock_error(&e, &[]))?;
    let steps_done = Arc::new(AtomicU32::new(0));
    let deleted_at = Arc::new(Mutex::new(None::<Instant>));
    let key = [locker.prefix(), b"migration"].concat();
    {
        let deleted_at = deleted_at.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            *deleted_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            let _: Result<i64, _> = redis::cmd("DEL").arg(&key).query_async(&mut admin).await;
        });
    }
    let done = steps_done.clone();
    let work = async move {
        for step in 1..=STEPS {
            tokio::time::sleep(Duration::from_millis(200)).await;
            done.store(step, Ordering::SeqCst);
            Clock(clock.0).say(format!("migration step {step}/{STEPS} done"));
        }
    };
    let outcome = lease.run(work).await;
    let detected = Instant::now();
    let deleted = deleted_at
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(detected);
    let detected_after = detected.saturating_duration_since(deleted);
    let cancelled = matches!(outcome, Err(LostReason::NotHeld));
    match &outcome {
        Err(reason) => clock.say(format!(
            "LOST: {reason} — detected {} after the delete; the work was cancelled",
            format(detected_after)
        )),
        Ok(()) => clock.say("the work finished: the loss was not detected"),
    }
    Ok(Lost {
        detected_after,
        steps_done: steps_done.load(Ordering::SeqCst),
        steps_planned: STEPS,
        cancelled,
    })
}
