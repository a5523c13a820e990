//! What only the in-memory server offers: a clock the test controls, fault injection, a
//! count of requests. (Its semantics are checked against real servers in conformance.rs.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redmutex::memory::MemoryRedis;
use redmutex::{retry, KeepAlive, Locker, LostReason};

const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn a_ttl_runs_out_when_the_paused_clock_is_past_its_last_millisecond() {
    let locker = Locker::in_memory();
    let other = Locker::in_memory_on(locker.connection());
    let lock = locker.acquire("job", MINUTE).await.unwrap();
    tokio::time::advance(MINUTE - Duration::from_millis(1)).await;
    assert!(other
        .acquire("job", MINUTE)
        .await
        .unwrap_err()
        .is_not_obtained());
    assert_eq!(
        locker.connection().ttl("job"),
        Some(Duration::from_millis(1))
    );
    // As Redis keeps a key: through the last millisecond of its expiry.
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(locker.connection().ttl("job"), Some(Duration::ZERO));
    let refused = other.acquire("job", MINUTE).await;
    assert!(refused.unwrap_err().is_not_obtained());
    tokio::time::advance(Duration::from_millis(1)).await;
    let taken = other.acquire("job", MINUTE).await.unwrap();
    assert!(lock.release().await.unwrap_err().is_not_held());
    taken.release().await.unwrap();
    assert!(locker.connection().keys().is_empty());
}

#[tokio::test(start_paused = true)]
async fn keep_alive_renews_on_the_paused_clock() {
    let locker = Locker::in_memory();
    let lease = (locker
        .acquire("job", Duration::from_secs(10))
        .await
        .unwrap())
    .keep_alive()
    .unwrap();
    // An hour of renewals without an hour of waiting.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!lease.is_lost());
    assert!(lease.renewals() >= 360, "{} renewals", lease.renewals());
    let ttl = locker.connection().ttl("job").expect("held");
    assert!(ttl > Duration::from_secs(5), "{ttl:?}");
    lease.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_hears_of_an_injected_expiry() {
    let locker = Locker::in_memory();
    let settings = KeepAlive::new().interval(Duration::from_secs(1));
    let lease = (locker
        .acquire("job", Duration::from_secs(10))
        .await
        .unwrap())
    .keep_alive_with(settings)
    .unwrap();
    assert!(locker.connection().expire_now("job"));
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .unwrap();
    assert!(matches!(reason, LostReason::NotHeld), "{reason:?}");
}

#[tokio::test]
async fn injected_failures_are_transient_and_retried() {
    let locker = Locker::in_memory();
    let redis = locker.connection().clone();
    // Loads the script (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA), so that each try below
    // is one request.
    locker
        .acquire("job", MINUTE)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A locker's first acquire also has the eviction policy looked at, in a task of its
    // own: let it run before counting.
    tokio::time::sleep(Duration::from_millis(50)).await;
    redis.fail_next(1);
    let failed = locker
        .acquire("job", MINUTE)
        .retry(retry::none())
        .await
        .unwrap_err();
    assert!(failed.is_transient(), "{failed}");
    assert!(redis.keys().is_empty(), "a failed request changes nothing");

    redis.fail_next(2);
    let before = redis.requests();
    let lock = (locker.acquire("job", MINUTE))
        .retry(retry::constant(Duration::from_millis(5)))
        .await
        .unwrap();
    // Two failed tries and one that worked; each failed try's fate is unknown to the
    // client, so an owner-checked release follows it in the background.
    let requests = redis.requests() - before;
    assert!((3..=5).contains(&requests), "{requests} requests");
    assert_eq!(redis.keys(), [b"job".to_vec()]);
    // It answers the look at its eviction policy (and the rest of a server check) as a
    // server that never evicts.
    let check = locker.check_server().await;
    assert!(check.is_fit() && check.reached_any(), "{check:?}");
    lock.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_makes_no_request() {
    let locker = Locker::in_memory();
    let before = locker.connection().requests();
    assert!(locker
        .acquire("", MINUTE)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(locker
        .acquire("job", Duration::ZERO)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(locker.semaphore("pool", 0).is_err());
    assert_eq!(locker.connection().requests(), before);
}

#[tokio::test]
async fn a_dropped_lock_is_released() {
    let locker = Locker::in_memory();
    drop(locker.acquire("job", MINUTE).await.unwrap());
    let redis = locker.connection();
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while !redis.keys().is_empty() {
        assert!(tokio::time::Instant::now() < until, "{:?}", redis.keys());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Many tasks in many lockers contend: never two holders at once, and every one gets its
/// turn through wake-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_lockers_exclude_each_other() {
    let redis = MemoryRedis::new();
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let locker = Locker::in_memory_on(&redis);
        for _ in 0..4 {
            let (locker, inside, done) = (locker.clone(), inside.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let lock = (locker.acquire("counter", MINUTE))
                        .retry(retry::constant(Duration::from_secs(1)))
                        .deadline(MINUTE)
                        .await
                        .unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 160);
    assert!(redis
        .keys()
        .iter()
        .all(|key| key.starts_with(b"{counter}:fence")));
}

#[test]
fn scripts_that_redis_refuses_are_refused() {
    // The server answers with Redis's errors, not a panic, for what it cannot run.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut redis = MemoryRedis::new();
        let bad = redis::cmd("EVAL")
            .arg("return (")
            .arg(0)
            .query_async::<redis::Value>(&mut redis)
            .await;
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("Error compiling script"));
        let unknown = redis::cmd("FLUSHALL")
            .query_async::<redis::Value>(&mut redis)
            .await;
        assert!(unknown.unwrap_err().to_string().contains("unknown command"));
        let missing = redis::cmd("EVALSHA")
            .arg("0".repeat(40))
            .arg(0)
            .query_async::<redis::Value>(&mut redis)
            .await;
        assert_eq!(
            missing.unwrap_err().kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        );
        let wrong = redis::cmd("EVAL")
            .arg("redis.call('set', KEYS[1], 'v') return redis.call('hget', KEYS[1], 'f')")
            .arg(1)
            .arg("k")
            .query_async::<redis::Value>(&mut redis)
            .await;
        assert_eq!(wrong.unwrap_err().code(), Some("WRONGTYPE"));
        let table = redis::cmd("EVAL")
            .arg("return {1, 'two', {3}, redis.call('get', 'k'), false, 'after a nil'}")
            .arg(0)
            .query_async::<redis::Value>(&mut redis)
            .await
            .unwrap();
        assert_eq!(
            table,
            redis::Value::Array(vec![
                redis::Value::Int(1),
                redis::Value::BulkString(b"two".to_vec()),
                redis::Value::Array(vec![redis::Value::Int(3)]),
                redis::Value::BulkString(b"v".to_vec()),
                redis::Value::Nil,
                redis::Value::BulkString(b"after a nil".to_vec()),
            ])
        );
    });
}

/// A server restarted empty drops the waiters' subscriber connection; push wake-up
/// connects again and has a waiter re-check, which finds the key gone: no waiter is left
/// to its (here, one-minute) poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_not_stranded_by_a_restart() {
    let redis = MemoryRedis::new();
    let (a, b) = (Locker::in_memory_on(&redis), Locker::in_memory_on(&redis));
    let lock = a.acquire("job", MINUTE).await.unwrap();
    let waiter = tokio::spawn(async move {
        (b.acquire("job", MINUTE))
            .retry(retry::constant(MINUTE))
            .deadline(Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart_empty();
    let taken = waiter
        .await
        .unwrap()
        .expect("re-checked once subscribed again");
    assert!(lock.release().await.unwrap_err().is_not_held());
    taken.release().await.unwrap();
}
