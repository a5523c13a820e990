//! The counting semaphore against a real server: permits counted on the server's clock,
//! reclaimed from crashed holders, refused on bad input and disagreeing limits, kept alive,
//! fenced, released on drop, and never over-admitted by many contending lockers.

use crate::common;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{blamed, manager, ms, multiplexed, Raw};
use redis::aio::MultiplexedConnection;
use redmutex::state::LockKind;
use redmutex::{error::Argument, limits::MAX_PERMITS, retry, Locker, LostReason, Semaphore};
use testkit::RedisServer;
use tokio::time::Instant;

/// Permits held now and the limit their holders agreed on, as `inspect` reads them: none
/// and no limit when nobody holds any.
async fn usage<C: redmutex::connection::Connection>(s: &Semaphore<C>) -> (u32, Option<u32>) {
    match s.inspect().await.unwrap() {
        Some(seen) => {
            let (used, limit) = seen.permits.expect("a semaphore");
            (used, Some(limit))
        }
        None => (0, None),
    }
}

async fn setup() -> (RedisServer, Raw, Locker<MultiplexedConnection>) {
    let server = RedisServer::spawn();
    let raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    (server, raw, locker)
}

#[tokio::test]
async fn at_most_the_limit_is_held_and_permits_are_taken_all_or_none() {
    let (_server, mut raw, locker) = setup().await;
    let workers = locker.semaphore("workers", 3).unwrap();
    let two = workers.acquire(2, ms(10_000)).await.unwrap();
    assert_eq!(two.permits(), 2);
    // Two more do not fit (one is free): none is taken.
    let refused = workers.acquire(2, ms(10_000)).await.unwrap_err();
    assert!(refused.is_not_obtained(), "{refused}");
    assert_eq!(usage(&workers).await, (2, Some(3)));
    let one = workers.acquire(1, ms(10_000)).await.unwrap();
    assert!(workers
        .acquire(1, ms(10_000))
        .await
        .unwrap_err()
        .is_not_obtained());
    // Every key written has a TTL: the holders and their details.
    assert!(raw.pttl("workers").await > 9_000);
    assert!(raw.pttl("{workers}:permits").await > 9_000);
    two.release().await.unwrap();
    let again = workers.acquire(2, ms(10_000)).await.unwrap();
    again.release().await.unwrap();
    one.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let (server, mut raw, locker) = setup().await;
    let calls_before = common::command_calls(&server);
    let errors = [
        locker.semaphore("s", 0).unwrap_err(),
        locker.semaphore("s", MAX_PERMITS + 1).unwrap_err(),
        locker.semaphore("", 2).unwrap_err(),
        locker.semaphore("{s}:permits", 2).unwrap_err(),
        locker.semaphore("{s}:fence", 2).unwrap_err(),
    ];
    let expected = [
        Argument::Limit,
        Argument::Limit,
        Argument::Key,
        Argument::Key,
        Argument::Key,
    ];
    for (error, argument) in errors.iter().zip(expected) {
        assert_eq!(blamed(error), Some(argument), "{error}");
    }
    let s = locker.semaphore("s", 2).unwrap();
    for permits in [0, 3] {
        let error = s.acquire(permits, ms(1000)).await.unwrap_err();
        assert_eq!(blamed(&error), Some(Argument::Permits), "{error}");
    }
    let error = s.acquire(1, Duration::ZERO).await.unwrap_err();
    assert_eq!(blamed(&error), Some(Argument::Ttl), "{error}");
    let calls = common::command_calls(&server).since(&calls_before);
    assert!(!calls.summary().contains("eval"), "{}", calls.summary());
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn a_redlock_locker_refuses_a_semaphore_and_says_why() {
    // Nothing needs to listen: the refusal comes before any request.
    let nodes = (0..3)
        .map(|_| {
            redmutex::connection::connect_lazy(&format!(
                "redis://127.0.0.1:{}",
                testkit::free_port()
            ))
        })
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let locker = Locker::redlock(nodes).unwrap();
    let error = locker.semaphore("s", 2).unwrap_err();
    assert_eq!(blamed(&error), Some(Argument::Nodes));
    assert!(error.to_string().contains("AB, BC and AC"), "{error}");
}

#[tokio::test]
async fn holders_that_disagree_on_the_limit_get_a_typed_error_not_more_permits() {
    let (_server, mut raw, locker) = setup().await;
    let three = locker.semaphore("pool", 3).unwrap();
    let five = locker.semaphore("pool", 5).unwrap();
    let held = three.acquire(3, ms(10_000)).await.unwrap();
    let error = five.acquire(1, ms(10_000)).await.unwrap_err();
    assert_eq!(blamed(&error), Some(Argument::Limit), "{error}");
    assert!(error.to_string().contains("limit of 3"), "{error}");
    let info = three.inspect().await.unwrap().expect("held");
    assert_eq!((info.permits.unwrap().0, info.holders.len()), (3, 1));
    // Once nobody holds a permit, the limit is whoever comes next's.
    held.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
    let now_five = five.acquire(4, ms(10_000)).await.unwrap();
    assert_eq!(
        blamed(&three.acquire(1, ms(1000)).await.unwrap_err()),
        Some(Argument::Limit)
    );
    now_five.release().await.unwrap();
}

#[tokio::test]
async fn a_crashed_holders_permits_come_back_within_its_ttl_and_a_waiter_wakes_then() {
    let (_server, mut raw, locker) = setup().await;
    let s = locker.semaphore("jobs", 1).unwrap();
    // A holder that dies without releasing: its permit is only a lease.
    s.acquire(1, ms(400)).await.unwrap().detach();
    let started = Instant::now();
    // The strategy would poll every 10 s; the failed try says when the permit expires.
    let permit = s
        .acquire(1, ms(5_000))
        .retry(retry::constant(ms(10_000)))
        .deadline(ms(3_000))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(waited >= ms(350), "permit not expired yet: {waited:?}");
    assert!(waited < ms(1_500), "slept past the expiry: {waited:?}");
    let info = s.inspect().await.unwrap().expect("held");
    assert_eq!(
        (info.permits.unwrap().0, info.holders.len()),
        (1, 1),
        "the dead one is gone"
    );
    permit.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn expiry_is_scored_on_the_servers_clock() {
    let (_server, mut raw, locker) = setup().await;
    let s = locker.semaphore("clock", 2).unwrap();
    let before = raw.server_ms().await as i64;
    let permit = s.acquire(1, ms(60_000)).await.unwrap();
    let after = raw.server_ms().await as i64;
    let score: f64 = raw
        .run(
            redis::cmd("ZSCORE")
                .arg("clock")
                .arg(permit.token().as_str()),
        )
        .await;
    let score = score as i64;
    assert!(
        score >= before + 60_000 && score <= after + 60_000,
        "{before} .. {after} + 60000, scored {score}"
    );
    permit.release().await.unwrap();
}

#[tokio::test]
async fn a_refresh_never_brings_back_reclaimed_permits() {
    let (_server, mut raw, locker) = setup().await;
    let s = locker.semaphore("r", 1).unwrap();
    let mut permit = s.acquire(1, ms(200)).await.unwrap();
    let token = permit.token();
    tokio::time::sleep(ms(300)).await;
    // Someone else takes the reclaimed permit.
    let other = s.acquire(1, ms(10_000)).await.unwrap();
    let error = permit.refresh(ms(10_000)).await.unwrap_err();
    assert!(error.is_not_held(), "{error}");
    let score: Option<f64> = raw
        .run(redis::cmd("ZSCORE").arg("r").arg(token.as_str()))
        .await;
    assert_eq!(score, None, "not re-added");
    assert_eq!(usage(&s).await.0, 1);
    assert!(permit.ttl().await.unwrap_err().is_not_held());
    assert!(permit.release().await.unwrap_err().is_not_held());
    other.release().await.unwrap();
}

#[tokio::test]
async fn keep_alive_holds_permits_past_their_ttl_and_reports_their_loss() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(manager(&server).await);
    let s = locker.semaphore("kept", 2).unwrap();
    let lease = s.acquire(2, ms(600)).await.unwrap().keep_alive().unwrap();
    assert_eq!(lease.permits(), 2);
    tokio::time::sleep(ms(1_500)).await;
    assert!(!lease.is_lost());
    assert!(lease.renewals() >= 3, "{}", lease.renewals());
    assert!(s.acquire(1, ms(1000)).await.unwrap_err().is_not_obtained());
    // An operator (or a bug) removes the holder: the next renewal notices.
    raw.run::<i64>(redis::cmd("ZREM").arg("kept").arg(lease.token().as_str()))
        .await;
    let reason = tokio::time::timeout(ms(1_000), lease.lost()).await.unwrap();
    assert!(matches!(reason, LostReason::NotHeld), "{reason}");
}

#[tokio::test]
async fn a_lease_runs_work_and_releases_its_permits() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(manager(&server).await);
    let s = locker.semaphore("run", 1).unwrap();
    let lease = s.acquire(1, ms(300)).await.unwrap().keep_alive().unwrap();
    let out = lease
        .run(async {
            tokio::time::sleep(ms(700)).await;
            42
        })
        .await
        .unwrap();
    assert_eq!(out, 42);
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn each_permit_gets_a_fence_above_every_earlier_one() {
    let (_server, _raw, locker) = setup().await;
    let s = locker.semaphore("fenced", 3).unwrap();
    let a = s.acquire(1, ms(10_000)).with_fence().await.unwrap();
    let b = s.acquire(1, ms(10_000)).await.unwrap();
    let c = s.acquire(1, ms(10_000)).with_fence().await.unwrap();
    let (fa, fb, fc) = (
        a.fence_if_taken().unwrap(),
        b.fence().await.unwrap(),
        c.fence().await.unwrap(),
    );
    assert!(b.fence_if_taken().is_some());
    assert!(fa < fc && fc < fb, "{fa} < {fc} < {fb}: in the order taken");
    assert_eq!(s.inspect().await.unwrap().unwrap().fence, Some(fb));
    b.release().await.unwrap();
    let d = s.acquire(1, ms(10_000)).with_fence().await.unwrap();
    assert!(d.fence().await.unwrap() > fb);
    for permit in [a, c, d] {
        permit.release().await.unwrap();
    }
    // Permits that expired get no fence.
    let late = s.acquire(1, ms(100)).await.unwrap();
    tokio::time::sleep(ms(200)).await;
    assert!(late.fence().await.unwrap_err().is_not_held());
}

#[tokio::test]
async fn inspect_shows_holders_with_metadata_and_ttls_but_no_tokens() {
    let (_server, _raw, locker) = setup().await;
    let s = locker.semaphore("seen", 4).unwrap();
    assert_eq!(
        s.inspect().await.unwrap(),
        s.inspect().await.unwrap(),
        "stable"
    );
    assert_eq!(usage(&s).await, (0, None));
    let a = s.acquire(3, ms(5_000)).metadata("host=a").await.unwrap();
    let b = s.acquire(1, ms(20_000)).await.unwrap();
    let info = s.inspect().await.unwrap().expect("held");
    assert_eq!(info.permits, Some((4, 4)));
    assert_eq!(info.holders.len(), 2);
    let (first, second) = (&info.holders[0], &info.holders[1]);
    assert_eq!(
        (first.permits, first.metadata.as_deref()),
        (Some(3), Some("host=a"))
    );
    let first_ttl = first.ttl.unwrap();
    assert!(
        first_ttl <= ms(5_000) && first_ttl > ms(4_000),
        "{first_ttl:?}"
    );
    assert_eq!(
        (second.permits, second.metadata.as_deref()),
        (Some(1), None)
    );
    assert!(second.ttl.unwrap() > ms(19_000));
    let debug = format!("{info:?}");
    assert!(!debug.contains(a.token().as_str()));
    a.release().await.unwrap();
    b.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_permit_is_released_and_a_cancelled_acquire_leaves_nothing() {
    let (_server, mut raw, locker) = setup().await;
    let s = locker.semaphore("dropped", 1).unwrap();
    drop(s.acquire(1, ms(60_000)).await.unwrap());
    assert!(raw.wait_until_gone("dropped", ms(2_000)).await);
    assert_eq!(raw.dbsize().await, 0);
    let held = s.acquire(1, ms(60_000)).await.unwrap();
    let waiting = s
        .acquire(1, ms(60_000))
        .retry(retry::constant(ms(20)))
        .deadline(ms(60_000));
    assert!(tokio::time::timeout(ms(300), waiting).await.is_err());
    let info = s.inspect().await.unwrap().expect("held");
    assert_eq!((info.permits.unwrap().0, info.holders.len()), (1, 1));
    held.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn a_lock_and_a_semaphore_of_one_name_refuse_each_other() {
    let (_server, mut raw, locker) = setup().await;
    let lock = locker.acquire("shared-name", ms(10_000)).await.unwrap();
    let s = locker.semaphore("shared-name", 2).unwrap();
    let error = s.acquire(1, ms(10_000)).await.unwrap_err();
    assert_eq!(blamed(&error), Some(Argument::Key), "{error}");
    assert_eq!(s.inspect().await.unwrap().unwrap().kind, LockKind::Lock);
    lock.release().await.unwrap();
    let permit = s.acquire(1, ms(10_000)).await.unwrap();
    let error = locker.acquire("shared-name", ms(1000)).await.unwrap_err();
    assert!(
        error.is_not_obtained(),
        "the lock sees a foreign key: {error}"
    );
    assert!(locker.inspect("shared-name").await.unwrap().foreign);
    permit.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_lockers_never_hold_more_than_the_limit() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    const LIMIT: u32 = 3;
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut workers = Vec::new();
    for worker in 0..12u32 {
        // A locker (and connection) each, as separate processes would have.
        let locker = Locker::new(multiplexed(&server).await);
        let (inside, most) = (inside.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let s = locker.semaphore("fleet", LIMIT).unwrap();
            let mut taken = 0;
            for _ in 0..8 {
                let permits = 1 + worker % 2;
                let permit = s
                    .acquire(permits, ms(5_000))
                    .retry(retry::constant(ms(3)))
                    .deadline(ms(20_000))
                    .await
                    .unwrap();
                let now = inside.fetch_add(permits, Ordering::SeqCst) + permits;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(ms(2)).await;
                inside.fetch_sub(permits, Ordering::SeqCst);
                permit.release().await.unwrap();
                taken += 1;
            }
            taken
        }));
    }
    for worker in workers {
        assert_eq!(worker.await.unwrap(), 8);
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= LIMIT, "{most} permits held at once");
    assert!(most >= 2, "some overlap happened: {most}");
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn a_server_restarted_empty_makes_the_lease_lost() {
    let server = RedisServer::spawn();
    let locker = Locker::new(manager(&server).await);
    let s = locker.semaphore("volatile", 2).unwrap();
    let lease = s.acquire(1, ms(900)).await.unwrap().keep_alive().unwrap();
    server.restart();
    let reason = tokio::time::timeout(ms(3_000), lease.lost()).await.unwrap();
    assert!(
        matches!(reason, LostReason::NotHeld | LostReason::Unreachable { .. }),
        "{reason}"
    );
}

#[tokio::test]
async fn a_frozen_server_makes_the_lease_lost_before_its_validity_ends() {
    let server = RedisServer::spawn();
    let locker = Locker::new(common::multiplexed_with_timeout(&server, ms(200)).await);
    let s = locker.semaphore("frozen", 2).unwrap();
    let lease = s.acquire(1, ms(900)).await.unwrap().keep_alive().unwrap();
    let valid_until = lease.valid_until();
    server.pause();
    let reason = tokio::time::timeout(ms(3_000), lease.lost()).await.unwrap();
    let lost_at = Instant::now();
    server.resume();
    assert!(matches!(reason, LostReason::Unreachable { .. }), "{reason}");
    assert!(lost_at <= lease.valid_until().max(valid_until) + ms(50));
}

/// PUBLISH commands the server has run (inside scripts too).
fn publishes(server: &RedisServer) -> u64 {
    let calls = common::command_calls(server);
    let summary = calls.summary();
    (summary
        .split(' ')
        .find_map(|part| part.strip_prefix("publish=")))
    .map_or(0, |n| n.parse().unwrap())
}

/// Waiters for one permit each, polling only every 10 s: what wakes them early is the
/// release. Each holds its permit until all `n` hold one — so one release must wake all of
/// them: a waiter woken only by another waiter's release would wait for the next poll.
/// Returns when each got its permit.
fn wait_for_one_permit(
    s: &redmutex::Semaphore<MultiplexedConnection>,
    n: usize,
    all_hold: &Arc<tokio::sync::Barrier>,
) -> Vec<tokio::task::JoinHandle<Instant>> {
    (0..n)
        .map(|_| {
            let acquire = s
                .acquire(1, ms(30_000))
                .retry(retry::constant(Duration::from_secs(10)))
                .deadline(Duration::from_secs(20));
            let all_hold = all_hold.clone();
            tokio::spawn(async move {
                let permit = acquire.await.unwrap();
                let at = Instant::now();
                all_hold.wait().await;
                permit.release().await.unwrap();
                at
            })
        })
        .collect()
}

/// Waits until `n` lockers' waiters have taken their places in the semaphore's line (each
/// once its subscription is confirmed), then a little more: the waiters are parked.
async fn until_waiters_wait(
    server: &RedisServer,
    s: &redmutex::Semaphore<MultiplexedConnection>,
    n: u64,
) {
    let line = format!("{{{}}}:line", String::from_utf8(s.key().to_vec()).unwrap());
    let until = Instant::now() + ms(5_000);
    while common::places_in_line(server, &line) < n {
        assert!(Instant::now() < until, "the waiters never lined up");
        tokio::time::sleep(ms(20)).await;
    }
    tokio::time::sleep(ms(100)).await;
}

/// Every waiter got its permit soon after `released`: woken, not polled (they poll every
/// 10 s).
async fn all_woken_soon_after(waiters: Vec<tokio::task::JoinHandle<Instant>>, released: Instant) {
    for waiter in waiters {
        let got = waiter.await.unwrap();
        assert!(
            got - released < ms(1_500),
            "woken, not polled: {:?}",
            got - released
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_three_permits_wakes_three_waiters_of_one_locker() {
    let server = RedisServer::spawn();
    let locker = common::own_locker(&server, true).await;
    let s = locker.semaphore("woken", 3).unwrap();
    let holder = s.acquire(3, ms(30_000)).await.unwrap();
    let waiters = wait_for_one_permit(&s, 3, &Arc::new(tokio::sync::Barrier::new(3)));
    until_waiters_wait(&server, &s, 1).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    all_woken_soon_after(waiters, released).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_separate_lockers_are_woken_and_idle_releases_publish_nothing() {
    let server = RedisServer::spawn();
    // Uncontended: no waiter, so no PUBLISH.
    let quiet = common::own_locker(&server, true)
        .await
        .semaphore("many", 2)
        .unwrap();
    for _ in 0..5 {
        quiet
            .acquire(1, ms(5_000))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(publishes(&server), 0);
    // Two holders; two waiters in lockers of their own (as two processes).
    let holder = common::own_locker(&server, true)
        .await
        .semaphore("many", 2)
        .unwrap();
    let (a, b) = (
        holder.acquire(1, ms(30_000)).await.unwrap(),
        holder.acquire(1, ms(30_000)).await.unwrap(),
    );
    let mut waiters = Vec::new();
    let all_hold = Arc::new(tokio::sync::Barrier::new(2));
    for _ in 0..2 {
        let s = common::own_locker(&server, true)
            .await
            .semaphore("many", 2)
            .unwrap();
        waiters.extend(wait_for_one_permit(&s, 1, &all_hold));
    }
    until_waiters_wait(&server, &holder, 2).await;
    let released = Instant::now();
    a.release().await.unwrap();
    b.release().await.unwrap();
    all_woken_soon_after(waiters, released).await;
    assert!(publishes(&server) >= 1);
}

#[tokio::test]
async fn a_try_cancelled_while_the_server_is_frozen_leaves_no_permit_behind() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(manager(&server).await);
    let s = locker.semaphore("frozen-try", 2).unwrap();
    // Load the script first, so that the frozen server gets the whole request.
    s.acquire(1, ms(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    server.pause();
    // The request is on its way when the acquire is dropped: it may yet be applied.
    let attempt = tokio::time::timeout(ms(200), s.acquire(2, ms(60_000)).into_future()).await;
    assert!(attempt.is_err(), "cancelled mid-request");
    server.resume();
    // The cleanup released in the background whatever the late request set.
    let until = Instant::now() + ms(3_000);
    loop {
        let info = s.inspect().await.unwrap();
        if info.is_none() && raw.dbsize().await == 0 {
            break;
        }
        assert!(Instant::now() < until, "left behind: {info:?}");
        tokio::time::sleep(ms(20)).await;
    }
    // Both permits are free for others.
    s.acquire(2, ms(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn failed_tries_name_the_semaphore_and_the_hold_limit_ends_a_lease() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(manager(&server).await);
    let s = locker.semaphore("bounded", 1).unwrap();
    let lease = s
        .acquire(1, ms(300))
        .await
        .unwrap()
        .keep_alive_with(redmutex::KeepAlive::new().max_hold(ms(700)))
        .unwrap();
    let tries = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = tries.clone();
    let waiter = s
        .acquire(1, ms(5_000))
        .retry(retry::constant(ms(100)))
        .deadline(ms(5_000))
        .on_failed_try(move |failed| {
            let key = match failed.reason {
                redmutex::TryFailure::Held { key } => key.to_vec(),
                ref other => panic!("{other:?}"),
            };
            seen.lock().unwrap().push((failed.attempt, key));
        });
    let started = Instant::now();
    let permit = waiter.await.unwrap();
    let reason = lease.lost().await;
    assert!(matches!(reason, LostReason::HoldLimitReached), "{reason}");
    // Held until the hold limit (700 ms), then free: not renewed past it.
    assert!(started.elapsed() >= ms(600), "{:?}", started.elapsed());
    assert!(started.elapsed() < ms(2_000), "{:?}", started.elapsed());
    let tries = tries.lock().unwrap().clone();
    assert!(tries.len() >= 3, "{tries:?}");
    assert!(tries.iter().all(|(_, key)| key == b"bounded"));
    assert!(tries.windows(2).all(|w| w[1].0 == w[0].0 + 1));
    permit.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn a_foreign_fence_counter_fails_the_acquire_with_nothing_written() {
    let (_server, mut raw, locker) = setup().await;
    raw.set("{counted}:fence", "not a number").await;
    let s = locker.semaphore("counted", 2).unwrap();
    for _ in 0..3 {
        let error = s.acquire(1, ms(10_000)).with_fence().await.unwrap_err();
        assert!(!error.is_transient(), "{error}");
    }
    // Nothing of the failed tries: no permit counted, no details without a TTL.
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
    let a = s.acquire(2, ms(10_000)).await.unwrap();
    assert_eq!(usage(&s).await.0, 2);
    a.release().await.unwrap();
    assert_eq!(raw.get("{counted}:fence").await.unwrap(), b"not a number");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_releases_back_to_back_wake_two_waiters() {
    let server = RedisServer::spawn();
    let locker = common::own_locker(&server, true).await;
    let s = locker.semaphore("twice", 2).unwrap();
    let (h1, h2) = (
        s.acquire(1, ms(30_000)).await.unwrap(),
        s.acquire(1, ms(30_000)).await.unwrap(),
    );
    let waiters = wait_for_one_permit(&s, 2, &Arc::new(tokio::sync::Barrier::new(2)));
    until_waiters_wait(&server, &s, 1).await;
    // The second release lands before the first woken waiter's try: it must still be
    // announced, or the other waiter sleeps until its poll with a permit free.
    let released = Instant::now();
    h1.release().await.unwrap();
    h2.release().await.unwrap();
    all_woken_soon_after(waiters, released).await;
}

/// Waiting processes — lockers with connections and subscribers of their own — get the
/// permit in the order they lined up, and each release wakes exactly one of them: no
/// other tries because of it (a locker in line tries on its own only once per third of
/// its heartbeat, which keeps its place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_process_and_processes_take_turns_in_line() {
    const LOCKERS: usize = 5;
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let one = |locker: Locker<MultiplexedConnection>| locker.semaphore("herd", 1).unwrap();
    let held = one(common::own_locker(&server, true).await)
        .acquire(1, ms(30_000))
        .await
        .unwrap();
    // Per locker, when each of its tries failed; and the order they got the permit in.
    let tries: Arc<Vec<std::sync::Mutex<Vec<std::time::Instant>>>> =
        Arc::new((0..LOCKERS).map(|_| Default::default()).collect());
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..LOCKERS {
        let s = one(common::own_locker(&server, true).await);
        let (record, order) = (tries.clone(), order.clone());
        let acquire = (s.acquire(1, ms(30_000)))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(ms(30_000))
            .on_failed_try(move |_| record[i].lock().unwrap().push(std::time::Instant::now()))
            .into_future();
        waiters.push(tokio::spawn(async move {
            let permit = acquire.await.expect("each process gets its turn");
            order.lock().unwrap().push(i);
            tokio::time::sleep(ms(10)).await;
            permit.release().await.unwrap();
        }));
        // In line before the next one comes: the line's order is known.
        until_waiters_wait(&server, &held_semaphore(&server).await, i as u64 + 1).await;
    }
    let released_at = std::time::Instant::now();
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..LOCKERS).collect::<Vec<_>>());
    common::assert_tries_only_on_heartbeat(&tries, released_at);
    assert_eq!(raw.dbsize().await, 0);
}

/// Two waiters of one process served at once: each try said another of its process waits,
/// so each put the process's place back in line for the other. The last of them to go
/// takes the place out — rather than leave a place nobody waits in, to which every
/// release would hand the permits for a moment while the next process in line waits, until
/// the place's heartbeat ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_process_served_at_once_leave_no_place_in_line() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let held = (Locker::new(multiplexed(&server).await).semaphore("pair", 2))
        .unwrap()
        .acquire(2, ms(30_000))
        .await
        .unwrap();
    // The waiting process's requests go through a proxy; its subscriber does not.
    let proxy = testkit::Proxy::start(server.addr());
    let locker = Locker::new(common::multiplexed_url(&proxy.url(), ms(10_000)).await)
        .with_wake_up([redis::Client::open(server.url()).unwrap()])
        .unwrap();
    let s = locker.semaphore("pair", 2).unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let acquire = (s.acquire(1, ms(30_000)))
                .retry(retry::constant(Duration::from_secs(20)))
                .deadline(ms(30_000));
            tokio::spawn(acquire.into_future())
        })
        .collect();
    until_waiters_wait(&server, &s, 1).await;
    // Slow requests: the second waiter's try goes out before the first one's reply is
    // back, and both say the other waits.
    proxy.set_latency(ms(300));
    held.release().await.unwrap();
    let mut permits = Vec::new();
    for waiter in waiters {
        permits.push(waiter.await.unwrap().expect("both get a permit"));
    }
    proxy.set_latency(Duration::ZERO);
    // The place is withdrawn, not left to run out: gone before its heartbeat ends.
    let line = "{pair}:line";
    let beats: Vec<(String, f64)> = (raw.run(
        redis::cmd("ZRANGEBYSCORE")
            .arg(line)
            .arg("-inf")
            .arg("(0")
            .arg("WITHSCORES"),
    ))
    .await;
    let until = Instant::now() + ms(5_000);
    while common::places_in_line(&server, line) > 0 {
        assert!(Instant::now() < until, "the place stayed in line");
        tokio::time::sleep(ms(20)).await;
    }
    let gone_at_ms = (raw.server_micros().await / 1000) as f64;
    for (beat, score) in beats {
        assert!(
            gone_at_ms < -score,
            "{beat}: the place ran out at its heartbeat's end instead of being withdrawn"
        );
    }
    for permit in permits {
        permit.release().await.unwrap();
    }
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

/// The semaphore "herd" as any process sees it.
async fn held_semaphore(server: &RedisServer) -> redmutex::Semaphore<MultiplexedConnection> {
    Locker::new(multiplexed(server).await)
        .semaphore("herd", 1)
        .unwrap()
}

/// A permit handed to a process that died while first in line (its place made by hand,
/// with a live heartbeat) is held for it for a moment only: the next process in line
/// gets it within the dead one's heartbeat, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_handed_to_a_dead_process_falls_through_within_its_heartbeat() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let s = common::own_locker(&server, true)
        .await
        .semaphore("gone", 1)
        .unwrap();
    let held = s.acquire(1, ms(30_000)).await.unwrap();
    // First in line: a locker that will never try again (its process was killed).
    let now = raw.server_micros().await;
    let ends = now / 1000 + redmutex::limits::DEFAULT_HEARTBEAT.as_millis() as u64;
    raw.run::<i64>(
        redis::cmd("ZADD")
            .arg("{gone}:line")
            .arg(now)
            .arg("1.AAAAAAAAAAAAAAAAAAAAAA")
            .arg(-(ends as i64))
            .arg(common::beat_of("1.AAAAAAAAAAAAAAAAAAAAAA")),
    )
    .await;
    let behind = common::own_locker(&server, true)
        .await
        .semaphore("gone", 1)
        .unwrap();
    let waiter = tokio::spawn(
        behind
            .acquire(1, ms(30_000))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(ms(30_000))
            .into_future(),
    );
    until_waiters_wait(&server, &s, 2).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let permit = waiter
        .await
        .unwrap()
        .expect("the next in line gets the permit");
    let waited = released_at.elapsed();
    assert!(
        waited < redmutex::limits::DEFAULT_HEARTBEAT,
        "the next in line waited {waited:?} for a permit handed to a dead process"
    );
    permit.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

/// The details entries of a semaphore's holders (its hash without the counts).
async fn holder_entries(raw: &mut Raw, details: &str) -> Vec<(String, String)> {
    let all: Vec<(String, String)> = raw.run(redis::cmd("HGETALL").arg(details)).await;
    all.into_iter()
        .filter(|(f, _)| !f.starts_with('#'))
        .collect()
}

/// A holder of one permit without metadata writes no details entry of its own (it counts
/// one); one of more permits, or with metadata, does, and its release — or its minimum
/// hold's end — takes the entry away. Inspection reads both kinds the same.
#[tokio::test]
async fn only_holders_with_more_than_a_count_keep_a_details_entry_and_it_goes_with_them() {
    let (_server, mut raw, locker) = setup().await;
    let pool = locker.semaphore("pool", 5).unwrap();
    let plain = pool.acquire(1, ms(10_000)).await.unwrap();
    assert_eq!(holder_entries(&mut raw, "{pool}:permits").await, vec![]);
    let tagged = (pool.acquire(1, ms(10_000)))
        .metadata("job=a")
        .await
        .unwrap();
    let two = pool.acquire(2, ms(10_000)).await.unwrap();
    let mut entries: Vec<String> = (holder_entries(&mut raw, "{pool}:permits").await)
        .into_iter()
        .map(|(_, entry)| entry)
        .collect();
    entries.sort();
    assert_eq!(entries, ["1:job=a", "2:"]);
    let info = pool.inspect().await.unwrap().expect("held");
    assert_eq!(info.permits, Some((4, 5)));
    let mut seen: Vec<(u32, Option<String>)> = (info.holders.iter())
        .map(|h| (h.permits.unwrap(), h.metadata.clone()))
        .collect();
    seen.sort();
    assert_eq!(seen, [(1, None), (1, Some("job=a".into())), (2, None)]);
    tagged.release().await.unwrap();
    two.release().await.unwrap();
    assert_eq!(holder_entries(&mut raw, "{pool}:permits").await, vec![]);
    // Kept for a minimum hold: the entry moves with the holder, and expires with it.
    let kept = (pool.acquire(1, ms(10_000)))
        .metadata("job=b")
        .min_hold(ms(300))
        .await
        .unwrap();
    kept.release().await.unwrap();
    let entries = holder_entries(&mut raw, "{pool}:permits").await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].0.starts_with('~') && entries[0].1 == "1:job=b");
    assert_eq!(usage(&pool).await.0, 2);
    tokio::time::sleep(ms(400)).await;
    // Reclaimed by the next try, which takes 4: the plain holder's one is still counted.
    assert!(pool.acquire(5, ms(10_000)).await.is_err());
    let four = pool.acquire(4, ms(10_000)).await.unwrap();
    assert_eq!(holder_entries(&mut raw, "{pool}:permits").await.len(), 1);
    four.release().await.unwrap();
    plain.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

/// A permit handed to the next process in line while it is the only one held: the holder
/// takes the reservation, the holders key it lived in goes with it, and the holder's own
/// makes a new one — which must expire as every key redmutex writes does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_handed_on_as_the_last_one_held_keeps_both_keys_expiring() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let s = common::own_locker(&server, true)
        .await
        .semaphore("last", 1)
        .unwrap();
    let held = s.acquire(1, ms(30_000)).await.unwrap();
    let behind = common::own_locker(&server, true)
        .await
        .semaphore("last", 1)
        .unwrap();
    let waiter = tokio::spawn(
        behind
            .acquire(1, ms(30_000))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(ms(30_000))
            .into_future(),
    );
    until_waiters_wait(&server, &s, 1).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let permit = waiter.await.unwrap().expect("handed the permit");
    assert!(released_at.elapsed() < ms(1_500), "woken, not polled");
    assert!(raw.pttl("last").await > 25_000);
    assert!(raw.pttl("{last}:permits").await > 25_000);
    assert_eq!(usage(&s).await, (1, Some(1)));
    permit.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

/// Permits handed on by their token are refreshed and given back by it from another
/// locker (another process): as many as the holder took, with or without a details entry;
/// a token that holds none is `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_refreshed_and_released_by_their_token_from_another_locker() {
    let server = RedisServer::spawn();
    let locker = |_: ()| async { Locker::new(common::multiplexed(&server).await) };
    let exports = locker(()).await.semaphore("exports", 4).unwrap();
    let ttl = Duration::from_secs(30);
    let three = exports.acquire(3, ttl).await.unwrap().detach();
    let one = exports.acquire(1, ttl).await.unwrap().detach();
    let other = locker(()).await.semaphore("exports", 4).unwrap();
    other
        .refresh_with_token(&one, Duration::from_secs(600))
        .await
        .unwrap();
    let info = other.inspect().await.unwrap().expect("held");
    assert_eq!(info.permits.unwrap().0, 4);
    assert!(info
        .holders
        .iter()
        .any(|h| h.permits == Some(1) && h.ttl.unwrap() > Duration::from_secs(500)));
    other.release_with_token(&three).await.unwrap();
    assert_eq!(usage(&other).await.0, 1);
    assert!(other
        .release_with_token(&three)
        .await
        .unwrap_err()
        .is_not_held());
    assert!(other
        .refresh_with_token(&three, ttl)
        .await
        .unwrap_err()
        .is_not_held());
    other.release_with_token(&one).await.unwrap();
    assert_eq!(Raw::new(&server).await.dbsize().await, 0, "nothing left");
}

/// A refresh that shortens the latest holder's expiry brings both keys' expiry back to the
/// latest one left (plus at most 250 ms), instead of keeping the longer one: refreshed to
/// an hour then to a second, the keys do not stay for the hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shortened_refresh_brings_the_keys_expiry_back() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    let pool = locker.semaphore("pool", 3).unwrap();
    let long = pool.acquire(1, ms(60_000)).await.unwrap().detach();
    let short = pool.acquire(1, ms(5_000)).await.unwrap().detach();
    pool.refresh_with_token(&long, ms(3_600_000)).await.unwrap();
    assert!(raw.pttl("pool").await > 3_500_000);
    pool.refresh_with_token(&long, ms(1_000)).await.unwrap();
    for key in ["pool", "{pool}:permits"] {
        let left = raw.pttl(key).await;
        assert!(
            (4_000..=5_300).contains(&left),
            "{key}: {left} ms, the 5 s holder's"
        );
    }
    pool.release_with_token(&short).await.unwrap();
    pool.release_with_token(&long).await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// The latest holder giving its permits back early: the keys follow the latest expiry left
/// (so that, the others crashing, the semaphore is gone when their permits are), rather than
/// outlive every holder by as long as it would have held.
#[tokio::test]
async fn the_latest_holders_release_brings_the_keys_expiry_back() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    let pool = locker.semaphore("pool", 3).unwrap();
    // Its token is never used again: it crashes, as it were, and never releases.
    let _short = pool.acquire(1, ms(2_000)).await.unwrap().detach();
    let long = pool.acquire(1, ms(600_000)).await.unwrap().detach();
    assert!(raw.pttl("pool").await > 590_000);
    pool.release_with_token(&long).await.unwrap();
    for key in ["pool", "{pool}:permits"] {
        let left = raw.pttl(key).await;
        assert!(
            (1_000..=2_300).contains(&left),
            "{key}: {left} ms, the 2 s holder's"
        );
    }
    // The short holder never releases: both keys are gone with its permit.
    assert!(raw.wait_until_gone("pool", ms(3_000)).await);
    assert_eq!(raw.dbsize().await, 0);
}
