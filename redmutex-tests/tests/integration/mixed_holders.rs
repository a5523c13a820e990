//! A read-write lock's readers and writers and plain locks of the same name, across
//! processes (lockers with push wake-up), through the public API, against real servers:
//! mutual exclusion under a mix of writers, readers, plain locks, minimum holds,
//! downgrades and cancellations; liveness when a waiter is cancelled, frozen or crashes,
//! and for readers behind a plain lock; writers and plain locks under a stream of
//! readers; cleanup; reserved names.

use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redmutex::{error::Argument, retry, Locker};
use testkit::{RedisServer, Rng};
use tokio::time::Instant;

use crate::common::{self, blamed, ms, own_locker, Raw};

/// A locker with push wake-up on `url`, as another process would build it.
async fn locker_at(url: &str) -> Locker<MultiplexedConnection> {
    let conn = common::multiplexed_url(url, ms(2_000)).await;
    Locker::new(conn)
        .with_wake_up([redis::Client::open(url).unwrap()])
        .unwrap()
}

/// Keys (of any kind) that have no TTL, read in one script.
async fn keys_without_ttl(raw: &mut Raw) -> Vec<String> {
    let script = "local out = {} for _, k in ipairs(redis.call('keys', '*')) do \
                  if redis.call('pttl', k) == -1 then out[#out + 1] = k end end return out";
    raw.run(redis::cmd("EVAL").arg(script).arg(0)).await
}

/// Polls until no lock key is left (fence counters aside), for at most `within`.
async fn until_empty(raw: &mut Raw, within: Duration) -> Vec<String> {
    let until = Instant::now() + within;
    loop {
        let keys: Vec<String> = (raw.lock_keys().await.into_iter())
            .map(|k| String::from_utf8_lossy(&k).into_owned())
            .collect();
        if keys.is_empty() || Instant::now() >= until {
            return keys;
        }
        tokio::time::sleep(ms(20)).await;
    }
}

/// Waits (at most 5 s) until `line` holds `n` places.
async fn until_in_line(server: &RedisServer, line: &str, n: u64) {
    let until = Instant::now() + ms(5_000);
    while common::places_in_line(server, line) < n {
        assert!(Instant::now() < until, "{line} never reached {n} places");
        tokio::time::sleep(ms(10)).await;
    }
}

/// The lockers in `line`, first first.
async fn line_members(raw: &mut Raw, line: &str) -> Vec<String> {
    raw.run(redis::cmd("ZRANGEBYSCORE").arg(line).arg(0).arg("+inf"))
        .await
}

// ---------------------------------------------------------------------------------------
// 1. Mutual exclusion (and liveness, TTLs, cleanup) under a mix of everything.

#[derive(Default)]
struct Holders {
    readers: i64,
    writers: i64,
    /// No writer or plain lock may get in before this (a minimum hold of a reader or
    /// writer); no reader either, for `all_not_before`.
    excl_not_before: Option<std::time::Instant>,
    all_not_before: Option<std::time::Instant>,
    violations: Vec<String>,
}

impl Holders {
    fn enter(&mut self, who: &str, exclusive: bool) {
        let now = std::time::Instant::now();
        if exclusive {
            if self.readers != 0 || self.writers != 0 {
                let msg = format!(
                    "{who} got in with readers={} writers={}",
                    self.readers, self.writers
                );
                self.violations.push(msg);
            }
            if let Some(t) = self.excl_not_before.filter(|t| now < *t) {
                let msg = format!("{who} got in {:?} before a minimum hold ended", t - now);
                self.violations.push(msg);
            }
            self.writers += 1;
        } else {
            if self.writers != 0 {
                let msg = format!("{who} (reader) got in with writers={}", self.writers);
                self.violations.push(msg);
            }
            self.readers += 1;
        }
        if let Some(t) = self.all_not_before.filter(|t| now < *t) {
            let msg = format!(
                "{who} got in {:?} before a writer's minimum hold ended",
                t - now
            );
            self.violations.push(msg);
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Role {
    Writer { min_hold: bool },
    Downgrader,
    Reader { min_hold: bool },
    Plain { min_hold: bool },
}

const MIN_HOLD: Duration = Duration::from_millis(60);
/// Slack for the minimum-hold check: the hold counts from the try's send time, the check
/// from the reply (one round trip later at most, on a loaded machine).
const HOLD_SLACK: Duration = Duration::from_millis(25);

#[derive(Default, Debug)]
struct Tally {
    got: u32,
    cancelled: u32,
    gave_up: Vec<String>,
    errors: Vec<String>,
    longest_wait: Duration,
}

async fn churn(
    locker: Locker<MultiplexedConnection>,
    role: Role,
    seed: u64,
    end: Instant,
    holders: Arc<Mutex<Holders>>,
) -> Tally {
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    let rw = locker.rw_lock("mix").unwrap();
    let who = format!("{role:?}#{seed}");
    let mut n = 0u32;
    while Instant::now() < end {
        n += 1;
        // One acquire in five is cancelled after a moment (dropped mid-wait or mid-try).
        let cancel_after = n.is_multiple_of(5).then(|| ms(1 + rng.below(80)));
        let started = Instant::now();
        let strategy = retry::constant(ms(250));
        macro_rules! acquire {
            ($acq:expr) => {{
                let acq = $acq.retry(strategy).deadline(ms(3_000));
                match cancel_after {
                    Some(after) => match tokio::time::timeout(after, acq.into_future()).await {
                        Err(_) => {
                            tally.cancelled += 1;
                            continue;
                        }
                        Ok(r) => r,
                    },
                    None => acq.await,
                }
            }};
        }
        macro_rules! check {
            ($r:expr) => {
                match $r {
                    Ok(g) => {
                        tally.got += 1;
                        tally.longest_wait = tally.longest_wait.max(started.elapsed());
                        g
                    }
                    Err(e) if e.is_not_obtained() => {
                        tally
                            .gave_up
                            .push(format!("{who}: {:?}: {e}", started.elapsed()));
                        continue;
                    }
                    Err(e) => {
                        tally.errors.push(format!("{who}: {e}"));
                        continue;
                    }
                }
            };
        }
        let hold = ms(1 + rng.below(5));
        match role {
            Role::Writer { min_hold } => {
                let mut acq = rw.write(ms(5_000));
                if min_hold && n.is_multiple_of(2) {
                    acq = acq.min_hold(MIN_HOLD);
                }
                let kept = min_hold && n.is_multiple_of(2);
                let g = check!(acquire!(acq));
                let at = std::time::Instant::now();
                holders.lock().unwrap().enter(&who, true);
                tokio::time::sleep(hold).await;
                {
                    let mut h = holders.lock().unwrap();
                    h.writers -= 1;
                    if kept {
                        h.all_not_before = Some(at + MIN_HOLD - HOLD_SLACK);
                        h.excl_not_before = Some(at + MIN_HOLD - HOLD_SLACK);
                    }
                }
                if let Err(e) = g.release().await {
                    tally.errors.push(format!("{who} release: {e}"));
                }
            }
            Role::Downgrader => {
                let g = check!(acquire!(rw.write(ms(5_000))));
                holders.lock().unwrap().enter(&who, true);
                tokio::time::sleep(hold).await;
                {
                    // Writer to reader before the downgrade: conservative (nobody can get
                    // in between anyway).
                    let mut h = holders.lock().unwrap();
                    h.writers -= 1;
                    h.readers += 1;
                }
                match g.downgrade().await {
                    Ok(reader) => {
                        tokio::time::sleep(hold).await;
                        holders.lock().unwrap().readers -= 1;
                        if let Err(e) = reader.release().await {
                            tally.errors.push(format!("{who} release read: {e}"));
                        }
                    }
                    Err(e) => {
                        holders.lock().unwrap().readers -= 1;
                        tally.errors.push(format!("{who} downgrade: {e}"));
                    }
                }
            }
            Role::Reader { min_hold } => {
                let mut acq = rw.read(ms(5_000));
                let kept = min_hold && n.is_multiple_of(2);
                if kept {
                    acq = acq.min_hold(MIN_HOLD);
                }
                let g = check!(acquire!(acq));
                let at = std::time::Instant::now();
                holders.lock().unwrap().enter(&who, false);
                tokio::time::sleep(hold).await;
                {
                    let mut h = holders.lock().unwrap();
                    h.readers -= 1;
                    if kept {
                        let t = at + MIN_HOLD - HOLD_SLACK;
                        h.excl_not_before = Some(h.excl_not_before.map_or(t, |o| o.max(t)));
                    }
                }
                if let Err(e) = g.release().await {
                    tally.errors.push(format!("{who} release: {e}"));
                }
            }
            Role::Plain { min_hold } => {
                let mut acq = locker.acquire("mix", ms(5_000));
                let kept = min_hold && n.is_multiple_of(2);
                if kept {
                    acq = acq.min_hold(MIN_HOLD);
                }
                let g = check!(acquire!(acq));
                let at = std::time::Instant::now();
                holders.lock().unwrap().enter(&who, true);
                tokio::time::sleep(hold).await;
                {
                    let mut h = holders.lock().unwrap();
                    h.writers -= 1;
                    if kept {
                        h.all_not_before = Some(at + MIN_HOLD - HOLD_SLACK);
                        h.excl_not_before = Some(at + MIN_HOLD - HOLD_SLACK);
                    }
                }
                if let Err(e) = g.release().await {
                    tally.errors.push(format!("{who} release: {e}"));
                }
            }
        }
        // Exclusive roles pause a little so that readers get gaps (writers first would
        // otherwise keep them out, by design).
        let pause = match role {
            Role::Reader { .. } => rng.below(10),
            _ => 10 + rng.below(40),
        };
        tokio::time::sleep(ms(pause)).await;
    }
    tally
}

/// Each process (locker) runs the roles in one of `groups`, each role in a task of its own.
async fn mix(groups: &[&[Role]], readers_may_starve: bool) {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let mut roles = Vec::new();
    let mut lockers = Vec::new();
    for group in groups {
        let locker = own_locker(&server, true).await;
        for role in group.iter() {
            roles.push(*role);
            lockers.push(locker.clone());
        }
    }
    let holders = Arc::new(Mutex::new(Holders::default()));
    let end = Instant::now() + ms(3_000);
    let mut tasks = Vec::new();
    for (i, (role, locker)) in roles.iter().copied().zip(lockers).enumerate() {
        let holders = holders.clone();
        tasks.push(tokio::spawn(churn(
            locker,
            role,
            0x9E37 + i as u64 * 7919,
            end,
            holders,
        )));
    }
    // Every key redmutex writes has a TTL while present.
    let mut untimed = Vec::new();
    while Instant::now() < end {
        for key in keys_without_ttl(&mut raw).await {
            untimed.push(key);
        }
        tokio::time::sleep(ms(15)).await;
    }
    let mut tallies = Vec::new();
    for (role, task) in roles.iter().zip(tasks) {
        tallies.push((role, task.await.unwrap()));
    }
    let left = until_empty(&mut raw, ms(1_000)).await;
    let left_later = until_empty(&mut raw, ms(4_000)).await;
    for (role, t) in &tallies {
        eprintln!(
            "{role:?}: got {} cancelled {} gave up {} errors {} longest wait {:?}",
            t.got,
            t.cancelled,
            t.gave_up.len(),
            t.errors.len(),
            t.longest_wait
        );
    }
    let violations = std::mem::take(&mut holders.lock().unwrap().violations);
    assert!(
        violations.is_empty(),
        "{} overlaps, first: {:?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    assert!(untimed.is_empty(), "keys without TTL: {untimed:?}");
    for (role, t) in &tallies {
        assert!(t.errors.is_empty(), "{role:?}: errors {:?}", t.errors);
        let reader = matches!(role, Role::Reader { .. });
        assert!(
            t.gave_up.is_empty() || (reader && readers_may_starve),
            "{role:?}: waited past 3 s: {:?}",
            t.gave_up
        );
        assert!(
            t.got >= 1 || (reader && readers_may_starve),
            "{role:?} never got the lock"
        );
    }
    assert!(
        left.is_empty(),
        "left 1 s after the end: {left:?} (after 5 s: {left_later:?})"
    );
}

/// One process per role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_holders_never_overlap() {
    mix(
        &[
            &[Role::Writer { min_hold: false }],
            &[Role::Writer { min_hold: true }],
            &[Role::Downgrader],
            &[Role::Reader { min_hold: false }],
            &[Role::Reader { min_hold: true }],
            &[Role::Plain { min_hold: false }],
            &[Role::Plain { min_hold: true }],
        ],
        false,
    )
    .await;
}

/// Three processes, each waiting with several roles at once (a key handed to a process
/// may be taken by any of its waiters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_holders_sharing_processes_never_overlap() {
    let group: &[Role] = &[
        Role::Writer { min_hold: false },
        Role::Plain { min_hold: true },
        Role::Reader { min_hold: false },
        Role::Downgrader,
    ];
    // Six writer tasks cycling: writers first may keep readers out past 3 s (by design);
    // exclusion, cleanup and the exclusive roles' liveness are still checked.
    mix(&[group, group, group], true).await;
}

// ---------------------------------------------------------------------------------------
// 2. Liveness when a waiting writer is cancelled.

/// A writer waiting in line (retry far apart: only a hand-off or the heartbeat wakes it),
/// reporting when it got the lock; it releases after `hold`.
fn waiting_writer(
    locker: &Locker<MultiplexedConnection>,
    key: &str,
    hold: Duration,
) -> tokio::task::JoinHandle<Result<Instant, redmutex::Error>> {
    let write = (locker.rw_lock(key).unwrap().write(ms(30_000)))
        .retry(retry::constant(Duration::from_secs(20)))
        .deadline(ms(15_000))
        .into_future();
    tokio::spawn(async move {
        let g = write.await?;
        let at = Instant::now();
        tokio::time::sleep(hold).await;
        g.release().await?;
        Ok(at)
    })
}

/// The first in line is cancelled (its task aborted) just before the holder releases: the
/// next one gets the lock at once (the cancelled one's withdrawal passes on whatever was
/// handed to it), and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_first_in_line_does_not_stall_the_next() {
    for wait_for_withdrawal in [true, false] {
        let server = RedisServer::spawn();
        let mut raw = Raw::new(&server).await;
        let a = own_locker(&server, true).await;
        let held = a.rw_lock("c").unwrap().write(ms(30_000)).await.unwrap();
        let (b, c, d) = (
            own_locker(&server, true).await,
            own_locker(&server, true).await,
            own_locker(&server, true).await,
        );
        let wb = waiting_writer(&b, "c", ms(10));
        until_in_line(&server, "{c}:line", 1).await;
        let wc = waiting_writer(&c, "c", ms(10));
        until_in_line(&server, "{c}:line", 2).await;
        let wd = waiting_writer(&d, "c", ms(10));
        until_in_line(&server, "{c}:line", 3).await;
        tokio::time::sleep(ms(100)).await;
        wb.abort();
        if wait_for_withdrawal {
            let until = Instant::now() + ms(2_000);
            while common::places_in_line(&server, "{c}:line") > 2 {
                assert!(
                    Instant::now() < until,
                    "the cancelled writer never left the line"
                );
                tokio::time::sleep(ms(5)).await;
            }
        }
        let released = Instant::now();
        held.release().await.unwrap();
        let got_c = wc.await.unwrap().expect("C gets the lock") - released;
        let got_d = wd.await.unwrap().expect("D gets the lock") - released;
        assert!(wb.await.unwrap_err().is_cancelled());
        eprintln!("withdrawal awaited={wait_for_withdrawal}: C after {got_c:?}, D after {got_d:?}");
        assert!(
            got_c < ms(400),
            "withdrawal awaited={wait_for_withdrawal}: C got the lock {got_c:?} after the release"
        );
        assert!(
            got_d < ms(800),
            "D got the lock {got_d:?} after the release"
        );
        let left = until_empty(&mut raw, ms(1_000)).await;
        assert!(left.is_empty(), "left: {left:?}");
    }
}

/// Another "process": a thread with a runtime of its own, which can be frozen (its only
/// thread blocked) as a process stopped by the OS or a long GC pause would be.
struct Process {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Process {
    fn start() -> Process {
        let (htx, hrx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            htx.send(rt.handle().clone()).unwrap();
            rt.block_on(async {
                let _ = stopped.await;
            });
        });
        Process {
            handle: hrx.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Freezes the process for `d`; returns once frozen.
    async fn freeze(&self, d: Duration) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.handle.spawn(async move {
            let _ = tx.send(());
            std::thread::sleep(d);
        });
        rx.await.unwrap();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The lock is handed to B's locker while B's process is frozen; B is cancelled as it
/// thaws, before it tries: its withdrawal must pass the key on to C at once (within the
/// 50 ms hand-off), rather than leave C to find it at its next heartbeat try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_cancelled_while_handed_the_lock_passes_it_on() {
    let server = RedisServer::spawn();
    let url = server.url();
    let mut raw = Raw::new(&server).await;
    let a = own_locker(&server, true).await;
    let held = a.rw_lock("h").unwrap().write(ms(30_000)).await.unwrap();
    let pb = Process::start();
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let b_task = pb.handle.spawn(async move {
        let b = locker_at(&url).await;
        let write = (b.rw_lock("h").unwrap().write(ms(30_000)))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(ms(15_000))
            .into_future();
        tokio::select! {
            biased;
            _ = cancelled => "cancelled",
            r = write => match r { Ok(_) => "obtained", Err(_) => "failed" },
        }
    });
    until_in_line(&server, "{h}:line", 1).await;
    let b_id = line_members(&mut raw, "{h}:line").await.remove(0);
    let c = own_locker(&server, true).await;
    let wc = waiting_writer(&c, "h", ms(10));
    until_in_line(&server, "{h}:line", 2).await;
    tokio::time::sleep(ms(150)).await;
    pb.freeze(ms(25)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let value = raw
        .get("h")
        .await
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    let _ = cancel.send(());
    assert_eq!(
        value,
        Some(format!("{b_id}r")),
        "the lock was not handed to B"
    );
    let got_c = wc.await.unwrap().expect("C gets the lock") - released;
    let b_outcome = b_task.await.unwrap();
    eprintln!("B: {b_outcome}; C got the lock {got_c:?} after the release");
    assert_eq!(b_outcome, "cancelled");
    assert!(
        got_c < ms(300),
        "C got the lock {got_c:?} after the release (B was cancelled while handed it)"
    );
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
    drop(pb);
}

// ---------------------------------------------------------------------------------------
// 3. Frozen and crashed lockers.

/// B's process freezes while first in line (for longer than a hand-off, less than its
/// heartbeat): the lock handed to it falls through, and C (next in line) gets it within
/// its heartbeat try (a second), not later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_first_in_line_costs_at_most_a_second() {
    let server = RedisServer::spawn();
    let url = server.url();
    let mut raw = Raw::new(&server).await;
    let a = own_locker(&server, true).await;
    let held = a.rw_lock("f").unwrap().write(ms(30_000)).await.unwrap();
    let pb = Process::start();
    let b_task = pb.handle.spawn(async move {
        let b = locker_at(&url).await;
        let g = (b.rw_lock("f").unwrap().write(ms(30_000)))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(ms(15_000))
            .await;
        match g {
            Ok(g) => {
                let at = Instant::now();
                g.release().await.unwrap();
                Ok(at)
            }
            Err(e) => Err(e.to_string()),
        }
    });
    until_in_line(&server, "{f}:line", 1).await;
    let c = own_locker(&server, true).await;
    let wc = waiting_writer(&c, "f", ms(10));
    until_in_line(&server, "{f}:line", 2).await;
    tokio::time::sleep(ms(150)).await;
    pb.freeze(ms(2_000)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let got_c = wc.await.unwrap().expect("C gets the lock") - released;
    let got_b = b_task
        .await
        .unwrap()
        .expect("B gets the lock after it thaws")
        - released;
    eprintln!("C after {got_c:?}, B after {got_b:?}");
    assert!(
        got_c < ms(1_200),
        "C got the lock {got_c:?} after the release"
    );
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
    drop(pb);
}

/// A writer holding the lock crashes (guard forgotten, locker and connection dropped):
/// a writer waiting in line, a plain lock waiting, and a reader waiting each get in,
/// the first within the crashed holder's TTL plus a second; nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_writer_holder_lets_everyone_in_after_its_ttl() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let ttl = ms(1_500);
    let crashed = own_locker(&server, true).await;
    let g = crashed.rw_lock("x").unwrap().write(ttl).await.unwrap();
    let taken = Instant::now();
    std::mem::forget(g);
    drop(crashed);
    let (w, p, r) = (
        own_locker(&server, true).await,
        own_locker(&server, true).await,
        own_locker(&server, true).await,
    );
    let ww = waiting_writer(&w, "x", ms(20));
    let plain = p
        .acquire("x", ms(30_000))
        .retry(retry::constant(Duration::from_secs(20)))
        .deadline(ms(15_000))
        .into_future();
    let pw = tokio::spawn(async move {
        let g = plain.await?;
        let at = Instant::now();
        tokio::time::sleep(ms(20)).await;
        g.release().await?;
        Ok::<_, redmutex::Error>(at)
    });
    let read = (r.rw_lock("x").unwrap().read(ms(30_000)))
        .retry(retry::constant(Duration::from_secs(20)))
        .deadline(ms(15_000))
        .into_future();
    let rw_ = tokio::spawn(async move {
        let g = read.await?;
        let at = Instant::now();
        g.release().await?;
        Ok::<_, redmutex::Error>(at)
    });
    let got_w = ww.await.unwrap().expect("the writer gets in") - taken;
    let got_p = pw.await.unwrap().expect("the plain lock gets in") - taken;
    let got_r = rw_.await.unwrap().expect("the reader gets in") - taken;
    eprintln!(
        "writer {got_w:?}, plain {got_p:?}, reader {got_r:?} after the crashed holder took it"
    );
    let first = got_w.min(got_p);
    assert!(
        first < ttl + ms(1_000),
        "first one in {first:?} after a crash with TTL {ttl:?}"
    );
    assert!(
        got_w.max(got_p) < ttl + ms(2_000),
        "second exclusive one in {:?}",
        got_w.max(got_p)
    );
    assert!(got_r < ttl + ms(2_500), "the reader got in {got_r:?}");
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
}

/// The holder's connection is killed (CLIENT KILL) while writers of other processes wait
/// in line: they get in within its TTL plus a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_with_killed_connection_lets_waiters_in() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let ttl = ms(1_500);
    let crashed = Locker::new(common::multiplexed(&server).await.clone());
    let name: String = {
        let mut conn = crashed.connection().clone();
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("doomed")
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
        "doomed".into()
    };
    let g = crashed.rw_lock("kk").unwrap().write(ttl).await.unwrap();
    let taken = Instant::now();
    let (w1, w2) = (
        own_locker(&server, true).await,
        own_locker(&server, true).await,
    );
    let a = waiting_writer(&w1, "kk", ms(20));
    until_in_line(&server, "{kk}:line", 1).await;
    let b = waiting_writer(&w2, "kk", ms(20));
    until_in_line(&server, "{kk}:line", 2).await;
    let list: String = raw.run(redis::cmd("CLIENT").arg("LIST")).await;
    let id = list
        .lines()
        .find(|l| l.contains(&format!("name={name}")))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .unwrap()
        .to_owned();
    let killed: i64 = raw
        .run(
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .arg("SKIPME")
                .arg("yes"),
        )
        .await;
    assert_eq!(killed, 1);
    // The guard's drop would try to release over the dead connection: keep it from
    // succeeding silently by forgetting it (the process is gone).
    std::mem::forget(g);
    let got_a = a.await.unwrap().expect("A gets in") - taken;
    let got_b = b.await.unwrap().expect("B gets in") - taken;
    eprintln!("A {got_a:?}, B {got_b:?} after the killed holder took it");
    assert!(got_a < ttl + ms(1_000), "A got in {got_a:?}");
    assert!(
        got_b < got_a + ms(300),
        "B got in {got_b:?}, A {got_a:?}: no hand-off"
    );
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
}

// ---------------------------------------------------------------------------------------
// 4. Readers streaming, writers (and a plain lock) waiting.

/// Three processes read in overlapping turns, so that the lock is never free of readers;
/// two writers of other processes still get in, each within 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_get_in_under_streaming_readers() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let end = Instant::now() + ms(4_000);
    let mut readers = Vec::new();
    for i in 0..3u64 {
        let locker = own_locker(&server, true).await;
        readers.push(tokio::spawn(async move {
            let rw = locker.rw_lock("s").unwrap();
            let mut rng = Rng::new(77 + i);
            let mut got = 0;
            while Instant::now() < end {
                let r = rw
                    .read(ms(5_000))
                    .retry(retry::constant(ms(100)))
                    .deadline(ms(4_000))
                    .await;
                if let Ok(g) = r {
                    got += 1;
                    tokio::time::sleep(ms(30 + rng.below(40))).await;
                    g.release().await.unwrap();
                }
            }
            got
        }));
        tokio::time::sleep(ms(20)).await;
    }
    tokio::time::sleep(ms(300)).await;
    let (w1, w2) = (
        own_locker(&server, true).await,
        own_locker(&server, true).await,
    );
    let started = Instant::now();
    let a = waiting_writer(&w1, "s", ms(20));
    let b = waiting_writer(&w2, "s", ms(20));
    let got_a = a.await.unwrap().expect("writer 1 gets in") - started;
    let got_b = b.await.unwrap().expect("writer 2 gets in") - started;
    eprintln!("writers in after {got_a:?} and {got_b:?}");
    assert!(
        got_a < ms(3_000) && got_b < ms(3_000),
        "writers starved: {got_a:?} {got_b:?}"
    );
    for r in readers {
        assert!(r.await.unwrap() > 0);
    }
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
}

/// The same for a plain lock of the same name (it excludes readers; does it get in?).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_lock_gets_in_under_streaming_readers() {
    let server = RedisServer::spawn();
    let end = Instant::now() + ms(4_500);
    let mut readers = Vec::new();
    for i in 0..3u64 {
        let locker = own_locker(&server, true).await;
        readers.push(tokio::spawn(async move {
            let rw = locker.rw_lock("sp").unwrap();
            let mut rng = Rng::new(91 + i);
            while Instant::now() < end {
                let r = rw
                    .read(ms(5_000))
                    .retry(retry::constant(ms(100)))
                    .deadline(ms(4_000))
                    .await;
                if let Ok(g) = r {
                    tokio::time::sleep(ms(30 + rng.below(40))).await;
                    let _ = g.release().await;
                }
            }
        }));
        tokio::time::sleep(ms(20)).await;
    }
    tokio::time::sleep(ms(300)).await;
    let p = own_locker(&server, true).await;
    let started = Instant::now();
    let r = p
        .acquire("sp", ms(5_000))
        .retry(retry::constant(ms(200)))
        .deadline(ms(3_000))
        .await;
    let waited = started.elapsed();
    for r in readers {
        r.await.unwrap();
    }
    assert!(
        r.is_ok(),
        "a plain lock waited {waited:?} under streaming readers: {:?}",
        r.err()
    );
}

/// A reader waiting (push wake-up, tries far apart) for a plain lock of the same name is
/// let in soon after the plain lock's release — not only at the plain lock's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_waiting_for_a_plain_lock_is_woken_by_its_release() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let p = own_locker(&server, true).await;
    let plain = p.acquire("pr", ms(6_000)).await.unwrap();
    let r = own_locker(&server, true).await;
    let read = (r.rw_lock("pr").unwrap().read(ms(5_000)))
        .retry(retry::constant(Duration::from_secs(20)))
        .deadline(ms(10_000))
        .into_future();
    let reader = tokio::spawn(async move {
        let g = read.await?;
        let at = Instant::now();
        g.release().await?;
        Ok::<_, redmutex::Error>(at)
    });
    tokio::time::sleep(ms(300)).await;
    // What the reader's wait relies on: the plain lock's flag, and who listens where.
    let value = raw.get("pr").await.unwrap();
    let numsub: Vec<redis::Value> = raw
        .run(redis::cmd("PUBSUB").arg("NUMSUB").arg("pr").arg("pr:~r"))
        .await;
    eprintln!(
        "plain lock's flag byte: {:?}; subscribers (pr, pr:~r): {numsub:?}",
        value.get(redmutex::limits::TOKEN_LEN).map(|b| *b as char)
    );
    let released = Instant::now();
    plain.release().await.unwrap();
    let got = reader.await.unwrap().expect("the reader gets in") - released;
    eprintln!("reader in {got:?} after the plain lock's release");
    assert!(
        got < ms(1_000),
        "the reader got in {got:?} after the plain lock's release"
    );
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
}

/// A reader waiting for a writer (no other writer waits) whose release hands the key to
/// a plain lock waiting in line: the reader gets in soon after that plain lock's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_behind_writer_then_plain_lock_is_not_stalled() {
    let server = RedisServer::spawn();
    let p = own_locker(&server, true).await;
    let w = own_locker(&server, true).await;
    let writer = w.rw_lock("wp").unwrap().write(ms(30_000)).await.unwrap();
    let plain = p
        .acquire("wp", ms(6_000))
        .retry(retry::constant(Duration::from_secs(20)))
        .deadline(ms(10_000))
        .into_future();
    let pt = tokio::spawn(async move {
        let g = plain.await?;
        tokio::time::sleep(ms(50)).await;
        let at = Instant::now();
        g.release().await?;
        Ok::<_, redmutex::Error>(at)
    });
    until_in_line(&server, "{wp}:line", 1).await;
    let r = own_locker(&server, true).await;
    let read = (r.rw_lock("wp").unwrap().read(ms(5_000)))
        .retry(retry::constant(Duration::from_secs(20)))
        .deadline(ms(10_000))
        .into_future();
    let reader = tokio::spawn(async move {
        let g = read.await?;
        let at = Instant::now();
        g.release().await?;
        Ok::<_, redmutex::Error>(at)
    });
    tokio::time::sleep(ms(300)).await;
    writer.release().await.unwrap();
    let plain_released = pt.await.unwrap().expect("the plain lock gets in");
    let got = reader.await.unwrap().expect("the reader gets in") - plain_released;
    eprintln!("reader in {got:?} after the plain lock's release");
    assert!(
        got < ms(1_000),
        "the reader got in {got:?} after the plain lock's release"
    );
}

// ---------------------------------------------------------------------------------------
// 5. Hand-off after a downgrade and a minimum hold.

/// A writer with others in line downgrades: new readers stay out (a writer waits), and
/// the downgraded reader's release hands the lock to the writer in line at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgraded_writer_hands_on_at_its_release() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let a = own_locker(&server, true).await;
    let writer = a.rw_lock("d").unwrap().write(ms(30_000)).await.unwrap();
    let b = own_locker(&server, true).await;
    let wb = waiting_writer(&b, "d", ms(10));
    until_in_line(&server, "{d}:line", 1).await;
    tokio::time::sleep(ms(100)).await;
    let reader = writer.downgrade().await.unwrap();
    let c = own_locker(&server, true).await;
    let newcomer = c.rw_lock("d").unwrap().read(ms(5_000)).await;
    assert!(
        newcomer.unwrap_err().is_not_obtained(),
        "a reader got in while a writer waits"
    );
    tokio::time::sleep(ms(1_200)).await; // B has renewed its place meanwhile
    let released = Instant::now();
    reader.release().await.unwrap();
    let got = wb.await.unwrap().expect("B gets in") - released;
    eprintln!("B in {got:?} after the downgraded reader's release");
    assert!(
        got < ms(300),
        "B got in {got:?} after the downgraded reader left"
    );
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
}

/// A writer released early into its minimum hold: the writer in line gets in when the
/// hold ends (not before, and not a heartbeat later); a reader waiting too comes after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_hold_release_lets_the_line_in_when_the_hold_ends() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let a = own_locker(&server, true).await;
    let acquired = Instant::now();
    let writer = (a.rw_lock("m").unwrap().write(ms(30_000)))
        .min_hold(ms(700))
        .await
        .unwrap();
    let b = own_locker(&server, true).await;
    let wb = waiting_writer(&b, "m", ms(10));
    until_in_line(&server, "{m}:line", 1).await;
    writer.release().await.unwrap();
    let got = wb.await.unwrap().expect("B gets in") - acquired;
    eprintln!("B in {got:?} after A took the lock with a 700 ms hold");
    assert!(got >= ms(690), "B got in {got:?}, inside A's minimum hold");
    assert!(
        got < ms(1_000),
        "B got in {got:?}: the hold ended at 700 ms"
    );
    let left = until_empty(&mut raw, ms(1_000)).await;
    assert!(left.is_empty(), "left: {left:?}");
}

/// The same with a reader released early into its minimum hold (and a plain lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_and_plain_min_hold_let_the_line_in_when_the_hold_ends() {
    for plain in [false, true] {
        let server = RedisServer::spawn();
        let mut raw = Raw::new(&server).await;
        let a = own_locker(&server, true).await;
        let acquired = Instant::now();
        let held: Box<dyn std::any::Any + Send> = match plain {
            false => {
                let reader = (a.rw_lock("n").unwrap().read(ms(30_000)))
                    .min_hold(ms(700))
                    .await
                    .unwrap();
                Box::new(reader)
            }
            true => {
                let lock = a.acquire("n", ms(30_000)).min_hold(ms(700)).await.unwrap();
                Box::new(lock)
            }
        };
        let b = own_locker(&server, true).await;
        let wb = waiting_writer(&b, "n", ms(10));
        until_in_line(&server, "{n}:line", 1).await;
        match plain {
            false => held
                .downcast::<redmutex::ReadGuard<MultiplexedConnection>>()
                .unwrap()
                .release()
                .await
                .unwrap(),
            true => held
                .downcast::<redmutex::Lock<MultiplexedConnection>>()
                .unwrap()
                .release()
                .await
                .unwrap(),
        }
        let got = wb.await.unwrap().expect("B gets in") - acquired;
        eprintln!("plain={plain}: B in {got:?} after A took the lock with a 700 ms hold");
        assert!(
            got >= ms(690),
            "plain={plain}: B got in {got:?}, inside A's minimum hold"
        );
        assert!(
            got < ms(1_000),
            "plain={plain}: B got in {got:?}: the hold ended at 700 ms"
        );
        let left = until_empty(&mut raw, ms(1_000)).await;
        assert!(left.is_empty(), "left: {left:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 6. Reserved names.

#[tokio::test]
async fn internal_names_are_refused_before_any_request() {
    let server = RedisServer::spawn();
    let locker = own_locker(&server, true).await;
    // Both lockers connected before counting (a connection's handshake sends commands of
    // its own, e.g. CLIENT SETINFO on servers that have it).
    let prefixed = own_locker(&server, true).await.with_prefix("{k}");
    let before = common::command_calls(&server);
    for name in [
        "{k}:line",
        "{k}:line:x",
        "{k}:intents",
        "{k}:readers",
        "{k}:readers:k",
        "{k}:fence",
        "{k}:queue",
        "{k}:permits",
    ] {
        let e = locker.rw_lock(name).unwrap_err();
        assert_eq!(blamed(&e), Some(Argument::Key), "rw_lock({name}): {e}");
        let e = locker.acquire(name, ms(1_000)).await.unwrap_err();
        assert_eq!(blamed(&e), Some(Argument::Key), "acquire({name}): {e}");
    }
    // With the prefix making the reserved form.
    let e = prefixed.rw_lock(":line").unwrap_err();
    assert_eq!(blamed(&e), Some(Argument::Key), "prefixed rw_lock: {e}");
    let e = prefixed.rw_lock(":intents").unwrap_err();
    assert_eq!(blamed(&e), Some(Argument::Key), "prefixed rw_lock: {e}");
    let e = (prefixed.acquire(":line", ms(1_000)))
        .retry(retry::constant(ms(10)))
        .deadline(ms(100))
        .await
        .unwrap_err();
    assert_eq!(blamed(&e), Some(Argument::Key), "prefixed acquire: {e}");
    let since = common::command_calls(&server).since(&before);
    assert_eq!(since.summary(), "", "requests were sent for refused names");
}
