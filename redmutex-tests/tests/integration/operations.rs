//! Every lock operation against a real redis-server, including the not-held paths.

use crate::common;
use std::time::Duration;

use crate::common::{manager, ms, multiplexed, Raw};
use redmutex::{connection::Connection, Error, Locker};
use testkit::RedisServer;

/// The basic life cycle, run over both connection types.
async fn life_cycle<C: Connection>(locker: Locker<C>, raw: &mut Raw) {
    let mut lock = locker
        .acquire("job", Duration::from_secs(10))
        .await
        .unwrap();
    let stored = raw.get("job").await.expect("key set");
    assert_eq!(
        stored,
        common::stored(lock.token()),
        "value is the token and the not-awaited flag, no metadata"
    );
    let pttl = raw.pttl("job").await;
    assert!((9_000..=10_000).contains(&pttl), "PX ttl set, got {pttl}");
    assert_eq!(lock.lease_ttl(), Duration::from_secs(10));
    assert!(lock.remaining_validity() > Duration::from_secs(9));

    // Held: a second acquire fails at once (default: one try).
    let err = locker
        .acquire("job", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(err.is_not_obtained(), "{err}");
    match &err {
        Error::NotObtained(n) => assert_eq!(n.attempts, 1),
        e => panic!("{e}"),
    }

    let ttl = lock.ttl().await.unwrap();
    assert!(
        ttl <= Duration::from_secs(10) && ttl > Duration::from_secs(9),
        "{ttl:?}"
    );
    lock.refresh(Duration::from_secs(60)).await.unwrap();
    assert!(raw.pttl("job").await > 59_000);
    assert_eq!(lock.lease_ttl(), Duration::from_secs(60));
    lock.release().await.unwrap();
    assert!(!raw.exists("job").await);

    // Free again.
    let again = locker.acquire("job", ms(500)).await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn life_cycle_over_multiplexed_connection() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    life_cycle(Locker::new(multiplexed(&server).await), &mut raw).await;
}

#[tokio::test]
async fn life_cycle_over_connection_manager() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    life_cycle(Locker::new(manager(&server).await), &mut raw).await;
}

#[tokio::test]
async fn tokens_are_fresh_per_acquire() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let a = locker.acquire("a", ms(5000)).await.unwrap();
    let b = locker.acquire("b", ms(5000)).await.unwrap();
    assert_ne!(a.token(), b.token());
    assert_eq!(a.token().as_str().len(), redmutex::limits::TOKEN_LEN);
}

#[tokio::test]
async fn prefix_is_prepended() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await.with_prefix("app:lock:");
    let lock = locker.acquire("x", ms(5000)).await.unwrap();
    assert!(raw.exists("app:lock:x").await);
    assert!(!raw.exists("x").await);
    assert_eq!(lock.keys().collect::<Vec<_>>(), [b"app:lock:x".as_slice()]);
    assert!(locker.inspect("x").await.unwrap().held);
    lock.release().await.unwrap();
    assert!(!raw.exists("app:lock:x").await);
}

#[tokio::test]
async fn metadata_is_stored_and_readable_by_anyone() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let meta = "host=web-3 pid=4121 job=nightly ✓";
    let lock = locker
        .acquire("report", ms(5000))
        .metadata(meta)
        .await
        .unwrap();
    assert_eq!(lock.metadata(), Some(meta));
    let stored = raw.get("report").await.unwrap();
    assert_eq!(stored[redmutex::limits::TOKEN_LEN], b'-', "nobody waits");
    assert_eq!(&stored[redmutex::limits::TOKEN_LEN + 1..], meta.as_bytes());

    // Another locker (another process, in effect) reads it.
    let other = common::locker(&server).await;
    let info = other.inspect("report").await.unwrap();
    assert!(info.held && !info.foreign);
    assert_eq!(info.metadata.as_deref(), Some(meta));
    assert!(info.ttl.unwrap() > ms(4000));
    assert_eq!(info.key_lossy(), "report");

    // Metadata does not get in the way of owner checks.
    lock.release().await.unwrap();
    let info = other.inspect("report").await.unwrap();
    assert!(!info.held && info.ttl.is_none() && info.metadata.is_none());
}

#[tokio::test]
async fn inspect_foreign_values() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    raw.set("plain", "1700000000.123").await;
    raw.run::<()>(redis::cmd("HSET").arg("hash").arg("f").arg("v"))
        .await;
    for key in ["plain", "hash"] {
        let info = locker.inspect(key).await.unwrap();
        assert!(info.held && info.foreign, "{key}: {info:?}");
        assert_eq!(info.ttl, None, "no expiry");
        // Nobody can take it, and nothing of ours overwrites it.
        assert!(locker
            .acquire(key, ms(1000))
            .await
            .unwrap_err()
            .is_not_obtained());
    }
    assert_eq!(raw.get("plain").await.unwrap(), b"1700000000.123");
    assert_eq!(
        raw.run::<String>(redis::cmd("TYPE").arg("hash")).await,
        "hash"
    );
}

#[tokio::test]
async fn multi_key_lock_is_all_or_nothing() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;

    let b = locker.acquire("b", ms(5000)).await.unwrap();
    let mut seen_key = Vec::new();
    let err = locker
        .acquire_all(["a", "b", "c"], ms(5000))
        .on_failed_try(|t| {
            if let redmutex::TryFailure::Held { key } = t.reason {
                seen_key = key.to_vec();
            }
        })
        .await
        .unwrap_err();
    assert!(err.is_not_obtained());
    assert_eq!(seen_key, b"b", "the failed try names the held key");
    assert!(
        !raw.exists("a").await && !raw.exists("c").await,
        "nothing set when one key is held"
    );
    assert_eq!(
        raw.get("b").await.unwrap(),
        common::stored(b.token()),
        "b untouched"
    );
    b.release().await.unwrap();

    let lock = locker.acquire_all(["a", "b", "c"], ms(5000)).await.unwrap();
    for key in ["a", "b", "c"] {
        assert_eq!(raw.get(key).await.unwrap(), common::stored(lock.token()));
    }
    // Any overlap blocks another multi-key lock, and a disjoint one is fine.
    assert!(locker
        .acquire_all(["c", "d"], ms(5000))
        .await
        .unwrap_err()
        .is_not_obtained());
    assert!(!raw.exists("d").await);
    let disjoint = locker.acquire_all(["d", "e"], ms(5000)).await.unwrap();

    // TTL is the minimum over the keys.
    raw.run::<i64>(redis::cmd("PEXPIRE").arg("b").arg(2000))
        .await;
    let ttl = lock.ttl().await.unwrap();
    assert!(ttl <= ms(2000) && ttl > ms(1000), "{ttl:?}");

    lock.release().await.unwrap();
    disjoint.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn not_held_after_expiry() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let mut lock = locker.acquire("short", ms(50)).await.unwrap();
    tokio::time::sleep(ms(120)).await;
    assert!(!raw.exists("short").await);
    assert_eq!(lock.remaining_validity(), Duration::ZERO);
    assert!(lock.ttl().await.unwrap_err().is_not_held());
    assert!(lock.refresh(ms(5000)).await.unwrap_err().is_not_held());
    assert!(
        !raw.exists("short").await,
        "a failed refresh must not recreate the key"
    );
    assert!(lock.release().await.unwrap_err().is_not_held());
}

#[tokio::test]
async fn not_held_after_external_delete() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let mut lock = locker.acquire("k", ms(5000)).await.unwrap();
    raw.run::<i64>(redis::cmd("DEL").arg("k")).await;
    assert!(lock.ttl().await.unwrap_err().is_not_held());
    assert!(lock.refresh(ms(5000)).await.unwrap_err().is_not_held());
    assert!(!raw.exists("k").await);
    assert!(lock.release().await.unwrap_err().is_not_held());
}

#[tokio::test]
async fn not_held_after_takeover_and_nothing_deleted() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let mut lock = locker.acquire("k", ms(50)).await.unwrap();
    tokio::time::sleep(ms(100)).await;
    // Another owner takes the expired lock.
    let other = locker.acquire("k", ms(5000)).await.unwrap();
    assert!(lock.ttl().await.unwrap_err().is_not_held());
    assert!(lock.refresh(ms(60_000)).await.unwrap_err().is_not_held());
    assert!(
        raw.pttl("k").await <= 5000,
        "the other owner's TTL was not extended"
    );
    assert!(lock.release().await.unwrap_err().is_not_held());
    assert_eq!(
        raw.get("k").await.unwrap(),
        common::stored(other.token()),
        "the other owner's key survives"
    );

    // Overwritten by a foreign value: same answers.
    raw.set("k", "someone-elses-value-entirely").await;
    let mut lock2 = other;
    assert!(lock2.refresh(ms(5000)).await.unwrap_err().is_not_held());
    assert!(lock2.release().await.unwrap_err().is_not_held());
    assert_eq!(raw.get("k").await.unwrap(), b"someone-elses-value-entirely");
}

#[tokio::test]
async fn multi_key_partial_loss() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let mut lock = locker.acquire_all(["a", "b"], ms(10_000)).await.unwrap();
    raw.set("b", "taken-over").await;
    let before = raw.pttl("a").await;

    // Refresh changes nothing when any key is lost.
    assert!(lock.refresh(ms(60_000)).await.unwrap_err().is_not_held());
    assert!(raw.pttl("a").await <= before, "a was not extended");
    assert!(lock.ttl().await.unwrap_err().is_not_held());

    // Release reports the loss, deletes the key still ours, never touches the other.
    assert!(lock.release().await.unwrap_err().is_not_held());
    assert!(!raw.exists("a").await);
    assert_eq!(raw.get("b").await.unwrap(), b"taken-over");
}

#[tokio::test]
async fn dropping_a_lock_releases_it_in_the_background() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let lock = locker.acquire("dropped", ms(30_000)).await.unwrap();
    drop(lock);
    assert!(
        raw.wait_until_gone("dropped", ms(1000)).await,
        "dropped lock was not released"
    );

    // detach() keeps it; the token then releases it.
    let lock = locker.acquire("kept", ms(30_000)).await.unwrap();
    let token = lock.detach();
    tokio::time::sleep(ms(100)).await;
    assert_eq!(raw.get("kept").await.unwrap(), common::stored(token));
    locker
        .refresh_with_token(["kept"], &token, ms(60_000))
        .await
        .unwrap();
    assert!(raw.pttl("kept").await > 59_000);
    let wrong = redmutex::Token::generate().unwrap();
    assert!(locker
        .release_with_token(["kept"], &wrong)
        .await
        .unwrap_err()
        .is_not_held());
    assert!(locker
        .refresh_with_token(["kept"], &wrong, ms(1))
        .await
        .unwrap_err()
        .is_not_held());
    assert!(raw.exists("kept").await);
    locker.release_with_token(["kept"], &token).await.unwrap();
    assert!(!raw.exists("kept").await);
    assert!(locker
        .release_with_token(["kept"], &token)
        .await
        .unwrap_err()
        .is_not_held());
}

#[tokio::test]
async fn max_ttl_is_accepted_by_redis() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let mut lock = locker
        .acquire("forever-ish", redmutex::limits::MAX_TTL)
        .await
        .unwrap();
    assert!(raw.pttl("forever-ish").await > (1 << 52));
    lock.refresh(redmutex::limits::MAX_TTL).await.unwrap();
    assert!(lock.ttl().await.unwrap() > Duration::from_secs(1 << 40));
    lock.release().await.unwrap();
}

#[tokio::test]
async fn binary_and_unicode_keys() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let binary: &[u8] = b"\x00\xffkey*?[glob]\r\n";
    let lock = locker.acquire(binary, ms(5000)).await.unwrap();
    assert!(locker.inspect(binary).await.unwrap().held);
    assert!(
        !locker.inspect(b"\x00\xffkey").await.unwrap().held,
        "no glob semantics"
    );
    let unicode = locker.acquire("ключ-🔒", ms(5000)).await.unwrap();
    lock.release().await.unwrap();
    unicode.release().await.unwrap();
}

/// A forced release wakes waiters as a release does: a fair lock's first waiter (on its
/// own channel), readers waiting behind a writer (on theirs). Before, both waited for
/// their next poll — 700 ms and 4.7 s, measured.
#[tokio::test]
async fn a_forced_release_wakes_a_fair_locks_first_waiter_and_waiting_readers() {
    let server = RedisServer::spawn();
    let operator = crate::common::own_locker(&server, false).await;
    let waiter = crate::common::own_locker(&server, true).await;
    let holder = crate::common::own_locker(&server, false).await;
    let fair = |locker: &Locker<redis::aio::MultiplexedConnection>| {
        locker
            .fair_lock("line")
            .unwrap()
            .with_heartbeat(ms(9_000))
            .unwrap()
    };
    let _held = fair(&holder).acquire(ms(60_000)).await.unwrap();
    let waiting = fair(&waiter)
        .acquire(ms(10_000))
        .retry(redmutex::retry::constant(ms(10_000)))
        .deadline(ms(20_000));
    let forcing = async {
        tokio::time::sleep(ms(300)).await;
        operator.force_release_now("line").await.unwrap().unwrap();
        tokio::time::Instant::now()
    };
    let (got, forced) = tokio::join!(waiting, forcing);
    let woken = forced.elapsed();
    assert!(
        woken < ms(1_500),
        "the fair waiter got the key {woken:?} after the forced release"
    );
    got.unwrap().release().await.unwrap();

    let _writer = holder
        .rw_lock("table")
        .unwrap()
        .write(ms(60_000))
        .await
        .unwrap();
    let reading = waiter
        .rw_lock("table")
        .unwrap()
        .read(ms(10_000))
        .retry(redmutex::retry::constant(ms(10_000)))
        .deadline(ms(20_000));
    let forcing = async {
        tokio::time::sleep(ms(300)).await;
        operator.force_release_now("table").await.unwrap().unwrap();
        tokio::time::Instant::now()
    };
    let (read, forced) = tokio::join!(reading, forcing);
    let woken = forced.elapsed();
    assert!(
        woken < ms(1_500),
        "the reader got in {woken:?} after the forced release"
    );
    read.unwrap().release().await.unwrap();
}
