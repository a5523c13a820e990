//! The semaphore attacked through the public API against real servers, separate lockers
//! standing for separate processes: mixed permit counts, metadata, minimum holds, fences,
//! cancellations and crashes under load; a key evicted by hand, a server emptied; keys
//! outliving their holders; places in line left behind. Each test says what it attacks;
//! most check what Redis holds with a script of their own, never the library's: every key
//! with a TTL, `#used` what the holders count, never above the limit.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{self, blamed, ms, multiplexed, own_locker, Raw};
use redis::aio::MultiplexedConnection;
use redmutex::state::LockKind;
use redmutex::{error::Argument, retry, Locker, Semaphore};
use testkit::{RedisServer, Rng};
use tokio::time::Instant;

/// What a semaphore's keys hold, read atomically by a script of the test's own: the
/// holders (every member, live or not), the permits they count by the layout
/// `semaphore.lua` describes (an entry's number, a reservation's place's, otherwise 1),
/// `#used`, `#limit`, and each key's PTTL.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    members: i64,
    counted: i64,
    used: Option<i64>,
    limit: Option<i64>,
    pttl_holders: i64,
    pttl_details: i64,
    pttl_line: i64,
    details_fields: i64,
}

const SAMPLE_LUA: &str = r#"
local h, d, l = KEYS[1], KEYS[2], KEYS[3]
local members = redis.call('zrange', h, 0, -1)
local sum = 0
for _, m in ipairs(members) do
  local e = redis.call('hget', d, m)
  if e then
    sum = sum + tonumber(string.match(e, '^(%d+)'))
  elseif string.sub(m, 1, 1) == '>' then
    sum = sum + tonumber(string.match(m, '^>(%d+)%.'))
  else
    sum = sum + 1
  end
end
local used = redis.call('hget', d, '#used')
local limit = redis.call('hget', d, '#limit')
return { #members, sum, used or '', limit or '', redis.call('pttl', h), redis.call('pttl', d),
  redis.call('pttl', l), redis.call('hlen', d) }
"#;

async fn sample(raw: &mut Raw, name: &str) -> Sample {
    let (members, counted, used, limit, ph, pd, pl, fields): (
        i64,
        i64,
        String,
        String,
        i64,
        i64,
        i64,
        i64,
    ) = raw
        .run(
            redis::cmd("EVAL")
                .arg(SAMPLE_LUA)
                .arg(3)
                .arg(name)
                .arg(format!("{{{name}}}:permits"))
                .arg(format!("{{{name}}}:line")),
        )
        .await;
    Sample {
        members,
        counted,
        used: used.parse().ok(),
        limit: limit.parse().ok(),
        pttl_holders: ph,
        pttl_details: pd,
        pttl_line: pl,
        details_fields: fields,
    }
}

/// The invariants every sample must keep: no key without a TTL; `#used` is what the
/// holders count (every member until it is reclaimed), and never above `limit`.
fn check_sample(s: &Sample, limit: i64) -> Result<(), String> {
    if s.pttl_holders == -1 || s.pttl_details == -1 || s.pttl_line == -1 {
        return Err(format!("a key without a TTL: {s:?}"));
    }
    if s.members > 0 {
        if s.used != Some(s.counted) {
            return Err(format!("#used drifted from the holders' permits: {s:?}"));
        }
        if s.counted > limit {
            return Err(format!("more than the limit counted: {s:?}"));
        }
        if s.limit.is_none() {
            return Err(format!("holders without a limit (looks foreign): {s:?}"));
        }
    } else if s.used.unwrap_or(0) != 0 {
        return Err(format!("permits counted with nobody holding: {s:?}"));
    }
    Ok(())
}

/// One holder's time holding permits as its process saw it: from when its acquire
/// returned to when it let go (or its validity ended, whichever came first). Such
/// intervals are inside the server's, so their overlap can never exceed the limit.
type Intervals = Arc<Mutex<Vec<(Instant, Instant, u32)>>>;

fn most_held_at_once(intervals: &[(Instant, Instant, u32)]) -> (u32, usize) {
    let mut events: Vec<(Instant, i64)> = Vec::new();
    for &(start, end, n) in intervals {
        if end > start {
            events.push((start, n as i64));
            events.push((end, -(n as i64)));
        }
    }
    // Ends before starts at the same instant.
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most, mut at) = (0i64, 0i64, 0usize);
    for (i, (_, delta)) in events.iter().enumerate() {
        now += delta;
        if now > most {
            most = now;
            at = i;
        }
    }
    (most as u32, at)
}

/// A sampler of the semaphore's keys until `stop`; collects every violated invariant.
fn spawn_sampler(
    server: &RedisServer,
    name: &'static str,
    limit: i64,
    stop: Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    let url = server.url();
    tokio::spawn(async move {
        let client = redis::Client::open(url).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut raw = RawConn(conn);
        let mut problems = Vec::new();
        let mut samples = 0;
        loop {
            let s = raw.sample(name).await;
            samples += 1;
            if let Err(p) = check_sample(&s, limit)
                && problems.len() < 10
            {
                problems.push(p);
            }
            tokio::select! {
                _ = stop.notified() => break,
                _ = tokio::time::sleep(ms(3)) => {}
            }
        }
        (samples, problems)
    })
}

struct RawConn(MultiplexedConnection);

impl RawConn {
    async fn sample(&mut self, name: &str) -> Sample {
        let reply: (i64, i64, String, String, i64, i64, i64, i64) = redis::cmd("EVAL")
            .arg(SAMPLE_LUA)
            .arg(3)
            .arg(name)
            .arg(format!("{{{name}}}:permits"))
            .arg(format!("{{{name}}}:line"))
            .query_async(&mut self.0)
            .await
            .unwrap();
        Sample {
            members: reply.0,
            counted: reply.1,
            used: reply.2.parse().ok(),
            limit: reply.3.parse().ok(),
            pttl_holders: reply.4,
            pttl_details: reply.5,
            pttl_line: reply.6,
            details_fields: reply.7,
        }
    }
}

/// Waits until nothing but fence counters is left, for at most `within`.
async fn until_empty(raw: &mut Raw, within: Duration) -> bool {
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        if raw.dbsize().await == 0 {
            return true;
        }
        tokio::time::sleep(ms(25)).await;
    }
    raw.dbsize().await == 0
}

// ---------------------------------------------------------------------------------------
// 1. Many processes, mixed everything: never more than the limit within validity; `#used`
//    always what the holders count; no key without a TTL; nothing left at the end.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_herd_never_over_admits_and_used_never_drifts() {
    const NAME: &str = "adv-herd";
    const LIMIT: u32 = 4;
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let intervals: Intervals = Arc::new(Mutex::new(Vec::new()));
    let obtained = Arc::new(AtomicU64::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(tokio::sync::Notify::new());
    let sampler = spawn_sampler(&server, NAME, LIMIT as i64, stop.clone());
    let run_until = Instant::now() + ms(4_000);
    let mut tasks = Vec::new();
    for process in 0..6u64 {
        // Processes 0..3 line up (push wake-up); the others poll.
        let locker = own_locker(&server, process < 3).await;
        // Two tasks per process: waiters of one locker, for the same or other counts.
        for task in 0..2u64 {
            let s = locker.semaphore(NAME, LIMIT).unwrap();
            let (intervals, obtained, unexpected) =
                (intervals.clone(), obtained.clone(), unexpected.clone());
            tasks.push(tokio::spawn(async move {
                // A fixed draw per process and task (the run does not depend on its
                // environment).
                let mut rng = Rng::new(process * 1000 + task * 7 + 1);
                while Instant::now() < run_until {
                    let permits = 1 + rng.below(3) as u32;
                    let short = rng.below(3) == 0;
                    let ttl = if short { ms(250) } else { ms(1_500) };
                    let mut acquire = s
                        .acquire(permits, ttl)
                        .retry(retry::constant(ms(5 + rng.below(20))))
                        .deadline(ms(1_500));
                    if rng.below(3) == 0 {
                        acquire = acquire.metadata(format!("p{process}t{task}"));
                    }
                    let min_hold = rng.below(4) == 0;
                    if min_hold {
                        acquire = acquire.min_hold(ms(40));
                    }
                    if rng.below(4) == 0 {
                        acquire = acquire.with_fence();
                    }
                    // Some acquires are cancelled mid-wait.
                    let cancel_after = match rng.below(4) {
                        0 => Some(ms(1 + rng.below(60))),
                        _ => None,
                    };
                    let result = match cancel_after {
                        Some(after) => {
                            match tokio::time::timeout(after, acquire.into_future()).await {
                                Ok(r) => r,
                                Err(_) => continue,
                            }
                        }
                        None => acquire.await,
                    };
                    let permit = match result {
                        Ok(p) => p,
                        Err(e) if e.is_not_obtained() => continue,
                        Err(e) => {
                            unexpected.lock().unwrap().push(format!("acquire: {e}"));
                            continue;
                        }
                    };
                    let start = Instant::now();
                    obtained.fetch_add(1, Ordering::Relaxed);
                    let hold = ms(2 + rng.below(30));
                    match rng.below(6) {
                        // A crash: nobody releases; counted until its validity ends.
                        0 if short => {
                            let end = permit.valid_until();
                            permit.detach();
                            intervals.lock().unwrap().push((start, end, permits));
                        }
                        // Kept alive past its TTL, then released.
                        1 if short => {
                            let lease = permit.keep_alive().unwrap();
                            tokio::time::sleep(ms(350)).await;
                            let end = Instant::now().min(lease.valid_until());
                            let lost = lease.is_lost();
                            let released = lease.release().await;
                            intervals.lock().unwrap().push((start, end, permits));
                            if lost {
                                unexpected
                                    .lock()
                                    .unwrap()
                                    .push("a kept-alive lease was lost".into());
                            } else if let Err(e) = released {
                                unexpected
                                    .lock()
                                    .unwrap()
                                    .push(format!("lease release: {e}"));
                            }
                        }
                        // Released on drop (in the background).
                        2 => {
                            tokio::time::sleep(hold).await;
                            let end = Instant::now().min(permit.valid_until());
                            drop(permit);
                            intervals.lock().unwrap().push((start, end, permits));
                        }
                        _ => {
                            tokio::time::sleep(hold).await;
                            let end = Instant::now().min(permit.valid_until());
                            let released = permit.release().await;
                            intervals.lock().unwrap().push((start, end, permits));
                            match released {
                                Ok(()) => {}
                                Err(e) if e.is_not_held() => {}
                                Err(e) => unexpected
                                    .lock()
                                    .unwrap()
                                    .push(format!("release (min_hold {min_hold}): {e}")),
                            }
                        }
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    stop.notify_one();
    let (samples, problems) = sampler.await.unwrap();
    let intervals = intervals.lock().unwrap().clone();
    let (most, _) = most_held_at_once(&intervals);
    let obtained = obtained.load(Ordering::Relaxed);
    let unexpected = unexpected.lock().unwrap().clone();
    eprintln!(
        "herd: {obtained} acquisitions, {} intervals, at most {most} held, {samples} samples",
        intervals.len()
    );
    // No wedge: the full limit can be taken once everyone is gone (crashed holders'
    // permits come back within their TTL).
    let s = own_locker(&server, true)
        .await
        .semaphore(NAME, LIMIT)
        .unwrap();
    let all = s
        .acquire(LIMIT, ms(2_000))
        .retry(retry::constant(ms(20)))
        .deadline(ms(3_000))
        .await;
    let at_rest = sample(&mut raw, NAME).await;
    let all_ok = all.is_ok();
    if let Ok(all) = all {
        all.release().await.unwrap();
    }
    let emptied = until_empty(&mut raw, ms(5_000)).await;
    assert!(
        most <= LIMIT,
        "{most} permits held at once within their validity (limit {LIMIT})"
    );
    assert!(
        problems.is_empty(),
        "{} samples, invariants broken: {problems:#?}",
        samples
    );
    assert!(unexpected.is_empty(), "{unexpected:#?}");
    assert!(
        obtained >= 30,
        "too little progress: {obtained} acquisitions"
    );
    assert!(
        all_ok,
        "the full limit could not be taken at rest: {at_rest:?}"
    );
    check_sample(&at_rest, LIMIT as i64).unwrap();
    assert!(emptied, "left behind: {:?}", raw.lock_keys().await);
}

// ---------------------------------------------------------------------------------------
// 2. Crashed holders: permits come back within the TTL, waiters in line get them, every
//    key has a TTL at every sample, nothing is left.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holders_permits_reach_lined_up_waiters() {
    const NAME: &str = "adv-crash";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let sampler = spawn_sampler(&server, NAME, 3, stop.clone());
    // Three processes hold 1 + 2 permits of 3 (one with metadata), then die.
    let a = own_locker(&server, true).await.semaphore(NAME, 3).unwrap();
    let b = own_locker(&server, true).await.semaphore(NAME, 3).unwrap();
    a.acquire(1, ms(400)).await.unwrap().detach();
    b.acquire(2, ms(600)).metadata("b").await.unwrap().detach();
    let crashed_at = Instant::now();
    // Waiters in three other processes, polling only every 20 s: what gets them their
    // permits is the reclaim of the dead ones' (each try says when the first expires).
    let mut waiters = Vec::new();
    for (i, want) in [2u32, 1, 3].into_iter().enumerate() {
        let s = own_locker(&server, true).await.semaphore(NAME, 3).unwrap();
        waiters.push(tokio::spawn(async move {
            tokio::time::sleep(ms(20 * i as u64)).await;
            let permit = s
                .acquire(want, ms(10_000))
                .retry(retry::constant(Duration::from_secs(20)))
                .deadline(Duration::from_secs(6))
                .await?;
            let got = crashed_at.elapsed();
            tokio::time::sleep(ms(50)).await;
            permit.release().await?;
            Ok::<_, redmutex::Error>(got)
        }));
    }
    let mut got = Vec::new();
    for waiter in waiters {
        got.push(waiter.await.unwrap());
    }
    stop.notify_one();
    let (_, problems) = sampler.await.unwrap();
    for (i, g) in got.iter().enumerate() {
        let g = g.as_ref().unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        // The 3-permit waiter needs both dead holders gone (600 ms); the line's heartbeat
        // (1 s a try) and hand-offs may add a little.
        assert!(*g < ms(3_000), "waiter {i} got its permits after {g:?}");
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        until_empty(&mut raw, ms(5_000)).await,
        "{:?}",
        raw.lock_keys().await
    );
}

// ---------------------------------------------------------------------------------------
// 5a. One of the two keys evicted (DEL by hand): the details. Live holders must not be
//     wiped by someone else's release, and nobody may be admitted past the limit.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn details_evicted_then_a_release_never_admits_past_the_limit() {
    const NAME: &str = "adv-evict-d";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let a = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    let b = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    let pa = a.acquire(1, ms(20_000)).await.unwrap();
    let pb = b.acquire(1, ms(20_000)).await.unwrap();
    // The details key alone is evicted (both have a TTL: volatile-* may take either).
    raw.run::<i64>(redis::cmd("DEL").arg(format!("{{{NAME}}}:permits")))
        .await;
    // A lets go; B still holds its permit, well within its validity.
    let released = pa.release().await;
    let after_release = sample(&mut raw, NAME).await;
    let mut admitted = 0;
    let mut kept = Vec::new();
    for _ in 0..2 {
        let s = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
        if let Ok(p) = s.acquire(1, ms(20_000)).await {
            admitted += 1;
            kept.push(p);
        }
    }
    let now = sample(&mut raw, NAME).await;
    let b_valid = pb.remaining_validity() > ms(10_000);
    assert!(b_valid);
    assert!(
        admitted <= 1,
        "B holds 1 of 2 within its validity, yet {admitted} more were admitted (A's \
         release {released:?} left {after_release:?}; now {now:?})"
    );
}

// ---------------------------------------------------------------------------------------
// 5b. The details evicted under a kept-alive holder: the semaphore must not stay wedged
//     (every acquire refused as "not a semaphore") for as long as the lease is renewed.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn details_evicted_under_a_lease_does_not_wedge_forever() {
    const NAME: &str = "adv-evict-lease";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let a = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    let lease = a.acquire(1, ms(300)).await.unwrap().keep_alive().unwrap();
    raw.run::<i64>(redis::cmd("DEL").arg(format!("{{{NAME}}}:permits")))
        .await;
    let b = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    // Ten TTLs: either B gets the free permit, or A's lease is found lost and the keys
    // go; refused all along as foreign is a wedge that lasts as long as A renews.
    let until = Instant::now() + ms(3_000);
    let mut last = None;
    let mut got = None;
    while Instant::now() < until {
        match b.acquire(1, ms(5_000)).await {
            Ok(p) => {
                got = Some(p);
                break;
            }
            Err(e) => last = Some(e.to_string()),
        }
        tokio::time::sleep(ms(50)).await;
    }
    let seen = sample(&mut raw, NAME).await;
    let lost = lease.is_lost();
    assert!(
        got.is_some() || lost,
        "for 3 s (10 TTLs) B was refused ({last:?}) while A's lease renewed on: {seen:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 5c. The holders key evicted alone: the old holders lose their permits (they are told),
//     their late releases must not give back anyone else's, and no key loses its TTL.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn holders_evicted_old_releases_do_not_free_new_permits() {
    const NAME: &str = "adv-evict-h";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let a = own_locker(&server, false).await.semaphore(NAME, 3).unwrap();
    let pa = a.acquire(1, ms(20_000)).await.unwrap();
    let mut pb = a.acquire(2, ms(20_000)).metadata("b").await.unwrap();
    raw.run::<i64>(redis::cmd("DEL").arg(NAME)).await;
    let c = own_locker(&server, false).await.semaphore(NAME, 3).unwrap();
    let pc = c.acquire(3, ms(20_000)).await.unwrap();
    check_sample(&sample(&mut raw, NAME).await, 3).unwrap();
    // The old holders find out, and their releases leave C's permits counted.
    assert!(pb.refresh(ms(20_000)).await.unwrap_err().is_not_held());
    assert!(pa.release().await.unwrap_err().is_not_held());
    assert!(pb.release().await.unwrap_err().is_not_held());
    let s = sample(&mut raw, NAME).await;
    check_sample(&s, 3).unwrap();
    assert_eq!(s.used, Some(3), "{s:?}");
    assert!(c.acquire(1, ms(1_000)).await.unwrap_err().is_not_obtained());
    pc.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

// ---------------------------------------------------------------------------------------
// 5d. The server restarted empty (FLUSHALL) under holders and lined-up waiters: leases
//     are lost, waiters get in, nothing is wedged, no key is left without a TTL.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_under_waiters_recovers() {
    const NAME: &str = "adv-flush";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let holder = own_locker(&server, true).await.semaphore(NAME, 2).unwrap();
    let lease = holder
        .acquire(2, ms(600))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    let mut waiters = Vec::new();
    for want in [1u32, 2] {
        let s = own_locker(&server, true).await.semaphore(NAME, 2).unwrap();
        waiters.push(tokio::spawn(async move {
            let p = s
                .acquire(want, ms(5_000))
                .retry(retry::constant(Duration::from_secs(20)))
                .deadline(Duration::from_secs(6))
                .await?;
            tokio::time::sleep(ms(30)).await;
            p.release().await?;
            Ok::<_, redmutex::Error>(())
        }));
    }
    let line = format!("{{{NAME}}}:line");
    let until = Instant::now() + ms(5_000);
    while crate::common::places_in_line(&server, &line) < 2 {
        assert!(Instant::now() < until, "never lined up");
        tokio::time::sleep(ms(20)).await;
    }
    raw.run::<()>(&mut redis::cmd("FLUSHALL")).await;
    let reason = tokio::time::timeout(ms(3_000), lease.lost()).await;
    assert!(reason.is_ok(), "the lease was never found lost");
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    check_sample(&sample(&mut raw, NAME).await, 2).unwrap();
    assert!(
        until_empty(&mut raw, ms(5_000)).await,
        "{:?}",
        raw.lock_keys().await
    );
}

// ---------------------------------------------------------------------------------------
// 6. Keys that outlive every holder (the last one crashed): inspect and list show nobody,
//    force_release finds nothing, and a new limit is taken once they expired.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn keys_outliving_crashed_holders_show_nobody() {
    const NAME: &str = "adv-outlive";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = own_locker(&server, false).await;
    let s3 = locker.semaphore(NAME, 3).unwrap();
    // A long holder pushes both keys' expiry far out; it leaves, and a short one, left
    // last, dies.
    let long = s3.acquire(1, ms(3_000)).await.unwrap();
    let short = s3.acquire(2, ms(200)).metadata("dead").await.unwrap();
    long.release().await.unwrap();
    short.detach();
    tokio::time::sleep(ms(350)).await;
    let left = sample(&mut raw, NAME).await;
    assert!(left.members > 0, "the keys outlive the holder: {left:?}");
    check_sample(&left, 3).unwrap();
    let info = s3.inspect().await.unwrap();
    assert!(info.is_none(), "someone is said to hold it: {info:?}");
    let listed = locker.list("*").unwrap().collect().await.unwrap();
    assert!(
        listed
            .iter()
            .all(|l| l.holder_count == 0 && l.permits.is_none()),
        "{listed:?}"
    );
    let described = locker.describe(NAME).await.unwrap();
    assert!(
        described.is_none(),
        "someone is said to hold it: {described:?}"
    );
    assert!(locker.force_release(NAME).await.unwrap().is_none());
    // Another limit is free to agree on.
    let s5 = own_locker(&server, false).await.semaphore(NAME, 5).unwrap();
    let five = s5.acquire(5, ms(2_000)).await.unwrap();
    let info = s5.inspect().await.unwrap().expect("held");
    assert_eq!((info.permits, info.holders.len()), (Some((5, 5)), 1));
    check_sample(&sample(&mut raw, NAME).await, 5).unwrap();
    five.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

// ---------------------------------------------------------------------------------------
// 7a. Empty metadata with a minimum hold: the release's keep path moves the holder's
//     details entry by what the client says, and this holder has none.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn empty_metadata_and_min_hold_release_cleanly() {
    const NAME: &str = "adv-empty-meta";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let s = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    let p = s
        .acquire(1, ms(5_000))
        .metadata("")
        .min_hold(ms(300))
        .await
        .unwrap();
    let released = p.release().await;
    let after = sample(&mut raw, NAME).await;
    check_sample(&after, 2).unwrap();
    assert!(
        released.is_ok(),
        "releasing a 1-permit holder with empty metadata inside its minimum hold: \
         {released:?} (keys now: {after:?})"
    );
    // Kept (counted) until the minimum hold ends, then reclaimed.
    assert_eq!(s.inspect().await.unwrap().unwrap().permits, Some((1, 2)));
    tokio::time::sleep(ms(400)).await;
    let two = s.acquire(2, ms(5_000)).await.unwrap();
    two.release().await.unwrap();
    assert!(
        until_empty(&mut raw, ms(2_000)).await,
        "{:?}",
        raw.lock_keys().await
    );
}

// ---------------------------------------------------------------------------------------
// 4. Other primitives of the same name, names like the companions, disagreeing limits:
//    a typed error, and nothing written into the other's keys.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_read_lock_of_the_same_name_never_mixes_with_the_holders() {
    const NAME: &str = "adv-rw";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = own_locker(&server, false).await;
    let other = own_locker(&server, false).await;
    let s = locker.semaphore(NAME, 2).unwrap();
    let p = s.acquire(1, ms(10_000)).await.unwrap();
    let before = sample(&mut raw, NAME).await;
    // A reader must not join the holders' sorted set: it would count as one permit.
    let rw = other.rw_lock(NAME).unwrap();
    let read = rw.read(ms(10_000)).await;
    let write = rw.write(ms(10_000)).await;
    let after = sample(&mut raw, NAME).await;
    assert!(read.is_err(), "a reader got in beside a semaphore holder");
    assert!(write.is_err(), "a writer got in beside a semaphore holder");
    let counts = |s: &Sample| {
        (
            s.members,
            s.counted,
            s.used,
            s.limit,
            s.details_fields,
            s.pttl_line,
        )
    };
    assert_eq!(
        counts(&before),
        counts(&after),
        "the other primitive wrote into the semaphore's keys: {before:?} -> {after:?}"
    );
    check_sample(&after, 2).unwrap();
    p.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
    // The other way round: readers hold the name; a semaphore is refused, nothing written.
    let r = rw.read(ms(10_000)).await.unwrap();
    let keys = raw.lock_keys().await;
    let error = s.acquire(1, ms(10_000)).await.unwrap_err();
    assert_eq!(blamed(&error), Some(Argument::Key), "{error}");
    assert_eq!(raw.lock_keys().await, keys);
    assert_eq!(s.inspect().await.unwrap().unwrap().kind, LockKind::Readers);
    r.release().await.unwrap();
    // A lock's line of the same name is the semaphore's line key: a lock waiter in it
    // must not block the semaphore's hand-offs forever.
    assert!(locker.semaphore("{adv-rw}:line", 2).is_err());
    assert!(locker.semaphore("{adv-rw}:permits", 2).is_err());
}

/// The holders (with scores), the details, and every key: a semaphore's whole state.
async fn dump(
    raw: &mut Raw,
    name: &str,
) -> (Vec<(String, f64)>, Vec<(String, String)>, Vec<Vec<u8>>) {
    let z: Vec<(String, f64)> = raw
        .run(
            redis::cmd("ZRANGE")
                .arg(name)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES"),
        )
        .await;
    let mut h: Vec<(String, String)> = raw
        .run(redis::cmd("HGETALL").arg(format!("{{{name}}}:permits")))
        .await;
    h.sort();
    (z, h, raw.lock_keys().await)
}

#[tokio::test]
async fn a_disagreeing_limit_writes_nothing() {
    const NAME: &str = "adv-limits";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let three = own_locker(&server, true).await.semaphore(NAME, 3).unwrap();
    let held = three.acquire(2, ms(10_000)).metadata("m").await.unwrap();
    let before = dump(&mut raw, NAME).await;
    // Waiting (line, wake-up), polling, fenced: each refused with the limit, nothing written.
    let five = own_locker(&server, true).await.semaphore(NAME, 5).unwrap();
    for e in [
        five.acquire(1, ms(10_000)).await.unwrap_err(),
        five.acquire(5, ms(10_000))
            .retry(retry::constant(ms(10)))
            .deadline(ms(500))
            .await
            .unwrap_err(),
        five.acquire(2, ms(10_000)).with_fence().await.unwrap_err(),
    ] {
        assert_eq!(blamed(&e), Some(Argument::Limit), "{e}");
    }
    let after = dump(&mut raw, NAME).await;
    assert_eq!(before, after);
    held.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

// ---------------------------------------------------------------------------------------
// 3. `#used` drift at quiescence after a targeted mix: hand-offs to lined-up waiters of
//    one locker wanting different counts, cancellations of served waiters, releases of
//    expired tokens, min holds.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoffs_to_one_locker_wanting_different_counts() {
    const NAME: &str = "adv-mixed-locker";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let sampler = spawn_sampler(&server, NAME, 3, stop.clone());
    let holder = own_locker(&server, true).await.semaphore(NAME, 3).unwrap();
    let held = holder.acquire(3, ms(10_000)).await.unwrap();
    // One process, three waiters: 1, 3 and 1 permits; the second gives up mid-wait.
    let l = own_locker(&server, true).await;
    let got = Arc::new(AtomicU32::new(0));
    let mut waiters = Vec::new();
    for (i, want) in [1u32, 3, 1].into_iter().enumerate() {
        let s = l.semaphore(NAME, 3).unwrap();
        let got = got.clone();
        waiters.push(tokio::spawn(async move {
            tokio::time::sleep(ms(30 * i as u64)).await;
            let acquire = s
                .acquire(want, ms(10_000))
                .retry(retry::constant(Duration::from_secs(20)))
                .deadline(Duration::from_secs(8));
            let result = match i {
                1 => match tokio::time::timeout(ms(400), acquire.into_future()).await {
                    Ok(r) => r,
                    Err(_) => return Ok(None),
                },
                _ => acquire.await,
            };
            let p = result?;
            got.fetch_add(want, Ordering::SeqCst);
            let at = Instant::now();
            tokio::time::sleep(ms(20)).await;
            p.release().await?;
            Ok::<_, redmutex::Error>(Some(at))
        }));
    }
    // Another process waits too, behind them.
    let m = own_locker(&server, true).await.semaphore(NAME, 3).unwrap();
    let other = tokio::spawn(async move {
        tokio::time::sleep(ms(120)).await;
        let p = m
            .acquire(2, ms(10_000))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(Duration::from_secs(8))
            .await?;
        let at = Instant::now();
        p.release().await?;
        Ok::<_, redmutex::Error>(at)
    });
    tokio::time::sleep(ms(600)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let mut late = Vec::new();
    for (i, w) in waiters.into_iter().enumerate() {
        if let Some(at) = w.await.unwrap().unwrap() {
            late.push((i, at - released));
        }
    }
    let at = other.await.unwrap().unwrap();
    late.push((3, at - released));
    stop.notify_one();
    let (_, problems) = sampler.await.unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
    for (i, waited) in &late {
        // Woken by hand-offs and releases; a poll would be 20 s away, the line's heartbeat
        // try 1 s: generous.
        assert!(*waited < ms(2_500), "waiter {i} waited {waited:?}");
    }
    assert!(
        until_empty(&mut raw, ms(5_000)).await,
        "{:?}",
        raw.lock_keys().await
    );
}

/// A semaphore handle on `server` in a process of its own.
#[allow(dead_code)]
async fn handle(server: &RedisServer, name: &str, limit: u32) -> Semaphore<MultiplexedConnection> {
    Locker::new(multiplexed(server).await)
        .semaphore(name, limit)
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// 6b. A crashed holder next to a live one: `list` (and `describe`) count the permits held
//     as `inspect` does — the live holders' — not what the dead one still has counted
//     until some try reclaims it.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn list_and_inspect_agree_on_permits_held_after_a_crash() {
    const NAME: &str = "adv-list";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = own_locker(&server, false).await;
    let s = locker.semaphore(NAME, 3).unwrap();
    let live = s.acquire(1, ms(10_000)).await.unwrap();
    own_locker(&server, false)
        .await
        .semaphore(NAME, 3)
        .unwrap()
        .acquire(2, ms(200))
        .await
        .unwrap()
        .detach();
    tokio::time::sleep(ms(350)).await;
    let info = s.inspect().await.unwrap().expect("held");
    assert_eq!(
        (info.permits, info.holder_count, info.holders.len()),
        (Some((1, 3)), 1, 1),
        "a dead holder's permits are counted: {info:?}"
    );
    live.release().await.unwrap();
    assert!(
        until_empty(&mut raw, ms(2_000)).await,
        "{:?}",
        raw.lock_keys().await
    );
}

// ---------------------------------------------------------------------------------------
// 7b. A place in line that outlived its waiter (a waiter dropped while its first try —
//     the one that lines its locker up — was in flight leaves it). A release reserved
//     permits for it, and its locker's next waiter, alone and on its first try, does not
//     look for a reservation: it puts the place back in line. The next release reaches
//     the same place: its one reservation stays counted once, and the permit in hand goes
//     on (here: back, for anyone). The state is set by hand, so that no timing decides.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_place_reserved_twice_is_counted_once() {
    const NAME: &str = "adv-twice";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let line = format!("{{{NAME}}}:line");
    let details = format!("{{{NAME}}}:permits");
    let y = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    let hy = y.acquire(1, ms(20_000)).await.unwrap();
    // A leftover place, first in line, and a reservation for it (long, so that it is
    // surely there when the release comes), counted.
    let place = "1.AAAAAAAAAAAAAAAAAAAAAA";
    let now = raw.server_micros().await;
    let beat = -((now / 1000 + 3_000) as i64);
    raw.run::<i64>(
        redis::cmd("ZADD")
            .arg(&line)
            .arg(now)
            .arg(place)
            .arg(beat)
            .arg(common::beat_of(place)),
    )
    .await;
    raw.run::<i64>(redis::cmd("PEXPIRE").arg(&line).arg(3_001))
        .await;
    raw.run::<i64>(
        redis::cmd("ZADD")
            .arg(NAME)
            .arg(now / 1000 + 5_000)
            .arg(format!(">{place}")),
    )
    .await;
    raw.run::<i64>(redis::cmd("HINCRBY").arg(&details).arg("#used").arg(1))
        .await;
    // Y lets go: the place is first in line, already reserved for.
    hy.release().await.unwrap();
    let after = sample(&mut raw, NAME).await;
    check_sample(&after, 2).unwrap_or_else(|e| panic!("right after the release: {e}"));
    assert_eq!((after.members, after.used), (1, Some(1)), "{after:?}");
    // One of two permits is reserved: another process gets the other.
    let z = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    let zs = z.acquire(1, ms(5_000)).await;
    let holding = sample(&mut raw, NAME).await;
    check_sample(&holding, 2).unwrap_or_else(|e| panic!("while z holds: {e}"));
    assert!(
        zs.is_ok(),
        "one of two permits reserved, yet another process is refused: {holding:?}"
    );
    zs.unwrap().release().await.unwrap();
    raw.run::<i64>(redis::cmd("DEL").arg(NAME).arg(&details).arg(&line))
        .await;
}

// ---------------------------------------------------------------------------------------
// 7c. How a place outlives its waiter without any drop: a waiter served while another
//     waiter of its locker waits for ANOTHER count puts its locker back in line for its
//     own count (ARGV[9] is "others wait", not "others want as many"), and nobody of the
//     locker wants that count any more. The place stays first in line for its heartbeat,
//     and the releases that reach it reserve permits for nobody.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_waiter_leaves_no_place_for_nobody() {
    const NAME: &str = "adv-stale";
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let line = format!("{{{NAME}}}:line");
    let x = own_locker(&server, false).await.semaphore(NAME, 2).unwrap();
    let hx = x.acquire(2, ms(20_000)).await.unwrap();
    let l = own_locker(&server, true).await;
    let mut waiters = Vec::new();
    for (i, want) in [1u32, 2].into_iter().enumerate() {
        let s = l.semaphore(NAME, 2).unwrap();
        waiters.push(tokio::spawn(
            s.acquire(want, ms(20_000))
                .retry(retry::constant(Duration::from_secs(20)))
                .deadline(Duration::from_secs(10))
                .into_future(),
        ));
        let until = Instant::now() + ms(5_000);
        while crate::common::places_in_line(&server, &line) < i as u64 + 1 {
            assert!(Instant::now() < until, "never lined up");
            tokio::time::sleep(ms(5)).await;
        }
    }
    hx.release().await.unwrap();
    // The one-permit waiter is served (by the hand-off, or its heartbeat try).
    let mut waiters = waiters.into_iter();
    let one = waiters.next().unwrap().await.unwrap().unwrap();
    let two = waiters.next().unwrap();
    let places: Vec<String> = raw
        .run(redis::cmd("ZRANGEBYSCORE").arg(&line).arg(0).arg("+inf"))
        .await;
    let ones = places.iter().filter(|p| p.starts_with("1.")).count();
    one.release().await.unwrap();
    let two = two.await.unwrap().unwrap();
    two.release().await.unwrap();
    assert_eq!(
        ones, 0,
        "the served 1-permit waiter's locker is back in line for 1 permit though none of \
         its waiters wants 1: {places:?}"
    );
    assert!(
        until_empty(&mut raw, ms(6_000)).await,
        "{:?}",
        raw.lock_keys().await
    );
}
