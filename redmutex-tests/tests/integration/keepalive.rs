//! Keep-alive: leases renewed in the background, and the lost signal.

use crate::common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{manager, ms, multiplexed_with_timeout, Raw};
use redis::aio::ConnectionManager;
use redmutex::{
    connection::Connection, error::Argument, Error, KeepAlive, Lease, Locker, LostReason,
};
use testkit::RedisServer;
use tokio::time::Instant;

/// A server, a raw view of it, and a locker over a connection manager.
async fn setup() -> (RedisServer, Raw, Locker<ConnectionManager>) {
    let server = RedisServer::spawn();
    let raw = Raw::new(&server).await;
    let locker = Locker::new(manager(&server).await);
    (server, raw, locker)
}

/// A kept-alive lease on `key` with default settings.
async fn kept<C: Connection>(locker: &Locker<C>, key: &str, ttl: Duration) -> Lease<C> {
    locker
        .acquire(key, ttl)
        .await
        .unwrap()
        .keep_alive()
        .unwrap()
}

/// How many EVALSHA calls the server has run (keep-alive renewals are script calls).
async fn evalsha_calls(raw: &mut Raw) -> u64 {
    let info: String = raw.run(redis::cmd("INFO").arg("commandstats")).await;
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn keeps_a_one_second_lock_for_five_seconds() {
    let (_server, mut raw, locker) = setup().await;
    let lease = kept(&locker, "long-job", ms(1000)).await;
    tokio::time::sleep(ms(5200)).await;
    assert!(!lease.is_lost());
    assert_eq!(
        raw.get("long-job").await.unwrap(),
        common::stored(lease.token())
    );
    assert!(raw.pttl("long-job").await > 300, "recently renewed");
    assert!(
        lease.renewals() >= 12,
        "renewed every ~333 ms: {}",
        lease.renewals()
    );
    assert!(lease.valid_until() > Instant::now());
    lease.release().await.unwrap();
    assert!(!raw.exists("long-job").await);
}

#[tokio::test]
async fn external_delete_is_detected_within_an_interval() {
    let (_server, mut raw, locker) = setup().await;
    let lease = kept(&locker, "k", ms(1500)).await;
    tokio::time::sleep(ms(200)).await;
    raw.run::<i64>(redis::cmd("DEL").arg("k")).await;
    let deleted_at = Instant::now();
    let reason = tokio::time::timeout(ms(3000), lease.lost())
        .await
        .expect("lost signal");
    let took = deleted_at.elapsed();
    assert!(matches!(reason, LostReason::NotHeld), "{reason}");
    assert!(
        took <= ms(500 + 150),
        "detected after {took:?}, interval is 500 ms"
    );
    assert!(lease.is_lost());
    assert!(lease.release().await.unwrap_err().is_not_held());
}

#[tokio::test]
async fn takeover_is_detected_and_the_new_owner_left_alone() {
    let (_server, mut raw, locker) = setup().await;
    let lease = kept(&locker, "k", ms(900)).await;
    let signal = lease.signal();
    let token = lease.cancellation_token();
    raw.set("k", "another-owner-token-value").await;
    let reason = tokio::time::timeout(ms(2000), signal.lost()).await.unwrap();
    assert!(matches!(reason, LostReason::NotHeld));
    assert!(signal.is_lost() && token.is_cancelled());
    tokio::time::sleep(ms(100)).await;
    assert_eq!(raw.get("k").await.unwrap(), b"another-owner-token-value");
    drop(lease);
}

/// Redis frozen past the TTL: the client must say "lost" before the TTL, counted from the
/// last successful renewal, has passed — while the renewal requests are still hanging.
#[tokio::test]
async fn frozen_redis_is_declared_lost_before_the_lease_runs_out() {
    let server = RedisServer::spawn();
    // No response timeout shorter than the TTL: requests simply hang.
    let locker = Locker::new(multiplexed_with_timeout(&server, Duration::from_secs(30)).await);
    let lease = kept(&locker, "k", ms(1000)).await;
    tokio::time::sleep(ms(500)).await;
    server.pause();
    // Let any reply that beat the pause be taken in, then read the validity.
    tokio::time::sleep(ms(50)).await;
    let valid_until = lease.valid_until();
    let reason = tokio::time::timeout(ms(3000), lease.lost())
        .await
        .expect("declared lost");
    server.resume();
    assert!(matches!(reason, LostReason::Unreachable { .. }), "{reason}");
    // When redmutex decided the loss, not when this task woke up to it (which a loaded
    // machine can delay past any margin).
    let declared_at = lease.signal().ended_at().expect("the lease ended");
    assert_eq!(lease.valid_until(), declared_at, "validity cut to the loss");
    assert!(
        declared_at <= valid_until,
        "declared {:?} after the lease ran out",
        declared_at - valid_until
    );
    assert!(
        valid_until - declared_at < ms(100),
        "not declared needlessly early"
    );
}

#[tokio::test]
async fn killed_redis_is_declared_lost() {
    let server = RedisServer::spawn();
    let locker = Locker::new(manager(&server).await);
    let lease = kept(&locker, "k", ms(800)).await;
    server.kill();
    let reason = tokio::time::timeout(ms(3000), lease.lost())
        .await
        .expect("declared lost");
    match reason {
        LostReason::Unreachable { last_error } => {
            assert!(last_error.is_some(), "connection errors are reported")
        }
        r => panic!("{r}"),
    }
}

#[tokio::test]
async fn release_stops_renewal() {
    let (_server, mut raw, locker) = setup().await;
    let lease = kept(&locker, "k", ms(300)).await;
    let signal = lease.signal();
    tokio::time::sleep(ms(350)).await;
    assert!(lease.renewals() >= 2);
    lease.release().await.unwrap();
    assert!(!raw.exists("k").await);
    assert!(matches!(signal.reason(), Some(LostReason::Released)));
    let calls = evalsha_calls(&mut raw).await;
    tokio::time::sleep(ms(500)).await;
    assert_eq!(
        evalsha_calls(&mut raw).await,
        calls,
        "no renewal after release"
    );
}

#[tokio::test]
async fn stop_keeps_the_lock_until_its_ttl() {
    let (_server, mut raw, locker) = setup().await;
    let lease = kept(&locker, "k", ms(600)).await;
    let signal = lease.signal();
    tokio::time::sleep(ms(700)).await;
    let lock = lease.stop();
    assert!(matches!(signal.reason(), Some(LostReason::Stopped)));
    assert!(
        lock.remaining_validity() > ms(100),
        "validity carried over from renewals"
    );
    assert!(raw.exists("k").await);
    let calls = evalsha_calls(&mut raw).await;
    tokio::time::sleep(ms(800)).await;
    assert!(
        !raw.exists("k").await,
        "expired by its TTL once renewal stopped"
    );
    assert_eq!(evalsha_calls(&mut raw).await, calls);
    assert!(lock.release().await.unwrap_err().is_not_held());
}

#[tokio::test]
async fn dropping_a_lease_releases_it() {
    let (_server, mut raw, locker) = setup().await;
    let lease = kept(&locker, "k", Duration::from_secs(30)).await;
    let signal = lease.signal();
    drop(lease);
    assert!(matches!(signal.reason(), Some(LostReason::Released)));
    assert!(raw.wait_until_gone("k", ms(1000)).await);
}

#[tokio::test]
async fn max_hold_bounds_the_total_hold_time() {
    let (_server, mut raw, locker) = setup().await;
    let started = Instant::now();
    let lease = locker
        .acquire("k", ms(1000))
        .await
        .unwrap()
        .keep_alive_with(KeepAlive::new().max_hold(ms(1600)))
        .unwrap();
    let reason = tokio::time::timeout(ms(4000), lease.lost()).await.unwrap();
    let ended = started.elapsed();
    assert!(matches!(reason, LostReason::HoldLimitReached), "{reason}");
    assert!(
        ended >= ms(1400) && ended <= ms(1700),
        "ended after {ended:?}"
    );
    assert!(
        raw.wait_until_gone("k", ms(300)).await,
        "the lock ends at the limit"
    );
    assert!(lease.renewals() >= 2);
}

#[tokio::test]
async fn run_cancels_work_when_the_lock_is_lost() {
    let (server, mut raw, locker) = setup().await;

    // Work that finishes: its output comes back and the lock is released.
    let lease = kept(&locker, "job", ms(1000)).await;
    let out = lease
        .run(async {
            tokio::time::sleep(ms(1500)).await; // longer than the TTL: renewal carries it
            42
        })
        .await
        .unwrap();
    assert_eq!(out, 42);
    assert!(!raw.exists("job").await);

    // Work that would outlive its lock: it is cancelled when the key disappears.
    let lease = kept(&locker, "job", ms(900)).await;
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    let mut raw2 = Raw::new(&server).await;
    tokio::spawn(async move {
        tokio::time::sleep(ms(200)).await;
        raw2.run::<i64>(redis::cmd("DEL").arg("job")).await;
    });
    let err = lease
        .run(async move {
            tokio::time::sleep(ms(5000)).await;
            done.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert!(matches!(err, LostReason::NotHeld));
    tokio::time::sleep(ms(100)).await;
    assert!(!finished.load(Ordering::SeqCst), "the work was dropped");
}

#[tokio::test]
async fn many_leases_share_few_renewal_calls_and_one_loss_stays_one() {
    const LEASES: usize = 500;
    let (_server, mut raw, locker) = setup().await;
    let mut leases = Vec::new();
    for i in 0..LEASES {
        let lock = locker.acquire(format!("lease:{i}"), ms(900)).await.unwrap();
        leases.push(lock.keep_alive().unwrap());
    }
    let before = evalsha_calls(&mut raw).await;
    tokio::time::sleep(ms(1500)).await;
    let calls = evalsha_calls(&mut raw).await - before;
    assert!(leases.iter().all(|l| !l.is_lost()), "no lease lost");
    assert!(leases.iter().all(|l| l.renewals() >= 3));
    // 500 leases renewed ~every 300 ms for 1.5 s: one at a time would be ~2500 calls.
    assert!(
        calls <= 40,
        "{calls} renewal calls for {LEASES} leases over 1.5 s"
    );

    // One lease lost inside a batch is reported; the others are not.
    raw.run::<i64>(redis::cmd("DEL").arg("lease:7")).await;
    tokio::time::timeout(ms(2000), leases[7].lost())
        .await
        .unwrap();
    tokio::time::sleep(ms(600)).await;
    for (i, lease) in leases.iter().enumerate() {
        assert_eq!(lease.is_lost(), i == 7, "lease {i}");
    }
    for lease in leases {
        let _ = lease.release().await;
    }
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn multi_key_lease_and_bad_interval() {
    let (_server, mut raw, locker) = setup().await;
    let lease = locker
        .acquire_all(["a", "b"], ms(600))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    tokio::time::sleep(ms(900)).await;
    assert!(raw.exists("a").await && raw.exists("b").await);
    raw.set("b", "taken").await;
    assert!(matches!(
        tokio::time::timeout(ms(1000), lease.lost()).await.unwrap(),
        LostReason::NotHeld
    ));
    assert!(
        raw.wait_until_gone("a", ms(500)).await,
        "the key still ours is freed"
    );
    assert_eq!(raw.get("b").await.unwrap(), b"taken");

    for interval in [Duration::ZERO, ms(600), ms(700)] {
        let lock = locker.acquire("c", ms(600)).await.unwrap();
        match lock.keep_alive_with(KeepAlive::new().interval(interval)) {
            Err(Error::InvalidArgument(a)) => assert_eq!(a.argument, Argument::Interval),
            other => panic!("{interval:?}: {other:?}"),
        }
        assert!(
            raw.wait_until_gone("c", ms(500)).await,
            "the rejected lock is released"
        );
    }
}

#[tokio::test]
async fn hold_limit_shorter_than_the_ttl_ends_the_lock_early() {
    let (_server, mut raw, locker) = setup().await;
    let started = Instant::now();
    let lease = locker
        .acquire("k", Duration::from_secs(30))
        .await
        .unwrap()
        .keep_alive_with(KeepAlive::new().max_hold(ms(500)))
        .unwrap();
    tokio::time::sleep(ms(100)).await;
    assert!(
        lease.valid_until() <= started + ms(600),
        "validity must not claim the full 30 s TTL"
    );
    assert!(raw.pttl("k").await <= 500, "the key itself was shortened");
    let reason = tokio::time::timeout(ms(2000), lease.lost()).await.unwrap();
    assert!(matches!(reason, LostReason::HoldLimitReached), "{reason}");
    assert!(started.elapsed() < ms(700));
    assert!(raw.wait_until_gone("k", ms(300)).await);
}

#[tokio::test]
async fn stopping_a_lost_lease_gives_a_lock_with_no_validity() {
    let (_server, mut raw, locker) = setup().await;
    let lease = kept(&locker, "k", ms(600)).await;
    raw.run::<i64>(redis::cmd("DEL").arg("k")).await;
    tokio::time::timeout(ms(1000), lease.lost()).await.unwrap();
    let lock = lease.stop();
    assert_eq!(lock.remaining_validity(), Duration::ZERO);
}

#[tokio::test]
async fn shortening_refresh_lowers_validity_at_once() {
    let server = RedisServer::spawn();
    let locker = Locker::new(common::multiplexed_with_timeout(&server, ms(100)).await);
    let mut lock = locker.acquire("k", Duration::from_secs(60)).await.unwrap();
    server.pause();
    // The reply never comes, but the shorter TTL may have been applied.
    assert!(lock.refresh(ms(1000)).await.is_err());
    server.resume();
    assert!(lock.remaining_validity() <= ms(1000));
}

/// The renewer runs on the runtime of the first lease. If that runtime goes away, its
/// leases can no longer be renewed: they must be reported lost, not silently dropped.
#[test]
fn leases_are_lost_when_the_renewer_runtime_shuts_down() {
    let server = RedisServer::spawn();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let signal = runtime.block_on(async {
        let locker = Locker::new(manager(&server).await);
        let lease = kept(&locker, "k", Duration::from_secs(30)).await;
        let signal = lease.signal();
        // Leak the lease so that only the runtime's end can stop it.
        std::mem::forget(lease);
        signal
    });
    assert!(!signal.is_lost());
    drop(runtime);
    assert!(
        matches!(signal.reason(), Some(LostReason::Unreachable { .. })),
        "{:?}",
        signal.reason()
    );
}
