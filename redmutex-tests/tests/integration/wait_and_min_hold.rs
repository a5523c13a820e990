//! Waiting for a release without taking the key (`Locker::wait_released`), and holding a
//! lock for at least a period however early it is released (`Acquire::min_hold`).

use crate::common;
use std::future::IntoFuture;
use std::time::Duration;

use crate::common::{manager, ms, multiplexed, Raw};
use redis::aio::MultiplexedConnection;
use redmutex::{error::Argument, retry, Error, Locker};
use testkit::RedisServer;
use tokio::time::Instant;

async fn setup() -> (RedisServer, Raw, Locker<MultiplexedConnection>) {
    let server = RedisServer::spawn();
    let raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    (server, raw, locker)
}

#[tokio::test]
async fn a_free_key_is_reported_at_once_and_not_taken() {
    let (_server, mut raw, locker) = setup().await;
    let started = Instant::now();
    assert!(locker.wait_released("free", ms(5_000)).await.unwrap());
    assert!(started.elapsed() < ms(500));
    assert!(!raw.exists("free").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_wait_which_takes_nothing() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let holder = Locker::new(multiplexed(&server).await);
    let watcher = common::own_locker(&server, true).await;
    let lock = holder.acquire("deploy", ms(60_000)).await.unwrap();
    let wait = tokio::spawn(async move {
        let result = watcher.wait_released("deploy", ms(30_000)).await;
        (result, Instant::now())
    });
    // The wait marks the holder as observed ('o' after the token): its release is
    // announced, and nobody is said to wait to take it.
    let until = Instant::now() + ms(5_000);
    let observed = format!("{}o", lock.token().as_str());
    while !raw
        .get("deploy")
        .await
        .unwrap_or_default()
        .starts_with(observed.as_bytes())
    {
        assert!(Instant::now() < until, "never marked");
        tokio::time::sleep(ms(10)).await;
    }
    assert!(
        !holder.inspect("deploy").await.unwrap().awaited,
        "a watcher is no waiter"
    );
    tokio::time::sleep(ms(1_500)).await; // past the first polls: only a wake-up is quick
    let released = Instant::now();
    lock.release().await.unwrap();
    let (result, at) = wait.await.unwrap();
    assert!(result.unwrap());
    assert!(
        at - released < ms(500),
        "woken, not polled: {:?}",
        at - released
    );
    assert!(!raw.exists("deploy").await, "the wait took nothing");
}

#[tokio::test]
async fn the_wait_times_out_and_ends_at_the_holders_expiry() {
    let (_server, mut raw, locker) = setup().await;
    let lock = locker.acquire("long", ms(60_000)).await.unwrap();
    let started = Instant::now();
    assert!(!locker.wait_released("long", ms(300)).await.unwrap());
    let waited = started.elapsed();
    assert!(waited >= ms(290) && waited < ms(1_500), "{waited:?}");
    assert_eq!(raw.get("long").await.unwrap(), common::stored(lock.token()));
    // A holder that dies: its key expires, and the wait ends then, without a release.
    locker.acquire("dies", ms(700)).await.unwrap().detach();
    let started = Instant::now();
    assert!(locker.wait_released("dies", Duration::MAX).await.unwrap());
    let waited = started.elapsed();
    assert!(waited >= ms(600) && waited < ms(1_700), "{waited:?}");
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_bad_key_is_refused_before_any_request() {
    let (_server, _raw, locker) = setup().await;
    for key in ["", "{x}:fence"] {
        let error = locker.wait_released(key, ms(100)).await.unwrap_err();
        assert!(error.is_invalid_argument(), "{error}");
    }
}

#[tokio::test]
async fn the_wait_works_over_redlock() {
    let servers = RedisServer::spawn_many(3);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed(server).await);
    }
    let locker = Locker::redlock(conns).unwrap();
    let lock = locker.acquire("quorum", ms(60_000)).await.unwrap();
    assert!(!locker.wait_released("quorum", ms(200)).await.unwrap());
    let releasing = async {
        tokio::time::sleep(ms(200)).await;
        lock.release().await.unwrap();
    };
    let (freed, ()) = tokio::join!(locker.wait_released("quorum", ms(10_000)), releasing);
    assert!(freed.unwrap());
}

#[tokio::test]
async fn an_early_release_keeps_the_key_until_the_minimum_hold_ends() {
    let (_server, mut raw, locker) = setup().await;
    let lock = locker
        .acquire("hourly", ms(10_000))
        .min_hold(ms(1_000))
        .await
        .unwrap();
    lock.release().await.unwrap();
    let left = raw.pttl("hourly").await;
    // The rest of the period, and the 1 % drift allowance on top (never shorter).
    assert!(
        left > 700 && left <= 1_011,
        "kept for the rest of the period: {left}"
    );
    let error = locker.acquire("hourly", ms(10_000)).await.unwrap_err();
    assert!(error.is_not_obtained(), "at most once per period: {error}");
    // The period over, the next run may go.
    tokio::time::sleep(ms(1_050)).await;
    let next = locker.acquire("hourly", ms(10_000)).await.unwrap();
    // A release after the minimum hold frees at once.
    let late = locker
        .acquire("quick", ms(10_000))
        .min_hold(ms(100))
        .await
        .unwrap();
    tokio::time::sleep(ms(150)).await;
    late.release().await.unwrap();
    assert!(!raw.exists("quick").await);
    next.release().await.unwrap();
    assert!(!raw.exists("hourly").await);
}

#[tokio::test]
async fn the_minimum_hold_outlasts_a_short_ttl_and_holds_for_dropped_guards_and_leases() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(manager(&server).await);
    // A 300 ms lease whose job takes 100 ms: kept for the full 1.5 s period.
    let lease = locker
        .acquire("nightly", ms(300))
        .min_hold(ms(1_500))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    lease.run(tokio::time::sleep(ms(100))).await.unwrap();
    let left = raw.pttl("nightly").await;
    assert!(left > 1_100 && left <= 1_415, "{left}"); // (with the drift allowance)
                                                      // A guard dropped without a release: the background release keeps it too.
    drop(
        locker
            .acquire("dropped", ms(10_000))
            .min_hold(ms(2_000))
            .await
            .unwrap(),
    );
    let until = Instant::now() + ms(1_000);
    loop {
        let left = raw.pttl("dropped").await;
        if left <= 2_000 {
            assert!(left > 1_000, "{left}");
            break;
        }
        assert!(Instant::now() < until, "never released: {left}");
        tokio::time::sleep(ms(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_learns_the_shortened_expiry_from_the_release() {
    let server = RedisServer::spawn();
    let holder = Locker::new(multiplexed(&server).await);
    let waiter = common::own_locker(&server, true).await;
    let lock = holder
        .acquire("period", ms(30_000))
        .min_hold(ms(800))
        .await
        .unwrap();
    let started = Instant::now();
    let acquire = waiter
        .acquire("period", ms(10_000))
        .retry(retry::constant(Duration::from_secs(10)))
        .deadline(Duration::from_secs(20))
        .into_future();
    let waiting = tokio::spawn(acquire);
    tokio::time::sleep(ms(200)).await;
    lock.release().await.unwrap();
    // Woken by the release, the waiter finds the key kept and sleeps until it expires,
    // rather than for its 10 s poll or the 30 s TTL.
    let taken = waiting.await.unwrap().unwrap();
    let waited = started.elapsed();
    assert!(waited >= ms(750) && waited < ms(2_500), "{waited:?}");
    taken.release().await.unwrap();
}

#[tokio::test]
async fn a_bad_minimum_hold_is_refused_before_any_request() {
    let (_server, mut raw, locker) = setup().await;
    for min_hold in [Duration::ZERO, Duration::MAX] {
        let error = locker
            .acquire("k", ms(1_000))
            .min_hold(min_hold)
            .await
            .unwrap_err();
        match &error {
            Error::InvalidArgument(invalid) => {
                assert_eq!(invalid.argument, Argument::Ttl);
                assert!(invalid.reason.contains("min_hold"), "{error}");
            }
            other => panic!("{other}"),
        }
    }
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn a_semaphores_permits_are_kept_for_the_minimum_hold_too() {
    let (_server, _raw, locker) = setup().await;
    let s = locker.semaphore("runs", 1).unwrap();
    let permit = s.acquire(1, ms(10_000)).min_hold(ms(800)).await.unwrap();
    permit.release().await.unwrap();
    assert!(s.acquire(1, ms(1_000)).await.unwrap_err().is_not_obtained());
    let info = s
        .inspect()
        .await
        .unwrap()
        .expect("kept for the minimum hold");
    assert_eq!(info.permits.unwrap().0, 1);
    assert!(info.holders[0].ttl.unwrap() <= ms(809)); // (with the 1 % drift allowance)
    tokio::time::sleep(ms(850)).await;
    s.acquire(1, ms(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_kept_key_is_no_longer_its_owners_to_extend_or_release() {
    let (_server, mut raw, locker) = setup().await;
    let lock = locker
        .acquire("kept", ms(60_000))
        .min_hold(ms(2_000))
        .await
        .unwrap();
    let token = lock.token();
    lock.release().await.unwrap();
    let left = raw.pttl("kept").await;
    // What a renewal in flight at the release would do: it must not extend the key.
    let error = (locker.refresh_with_token(["kept"], &token, ms(60_000)))
        .await
        .unwrap_err();
    assert!(error.is_not_held(), "{error}");
    assert!(raw.pttl("kept").await <= left);
    let error = locker
        .release_with_token(["kept"], &token)
        .await
        .unwrap_err();
    assert!(error.is_not_held(), "{error}");
    assert!(raw.exists("kept").await, "kept until the period ends");
    let info = locker.inspect("kept").await.unwrap();
    assert!(info.held && !info.foreign, "{info:?}");
}
