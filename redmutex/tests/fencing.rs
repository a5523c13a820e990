//! Fencing tokens: strictly increasing per key across holders, lockers, expiry and
//! takeover, multi-key, Redlock (including nodes whose counters drifted apart), inspect,
//! turning them off, and a counter that holds garbage.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{ms, multiplexed, Raw};
use redis::aio::MultiplexedConnection;
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{Error, Locker, QuorumSettings};
use testkit::RedisServer;

/// The fences that `tasks` tasks spread over `lockers` get for `per_task` acquisitions each
/// of `key`, in the order the critical sections ran (pushed while holding the lock).
async fn contended_fences(
    lockers: &[Locker<MultiplexedConnection>],
    key: &str,
    tasks: usize,
    per_task: usize,
) -> Vec<u64> {
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut running = Vec::new();
    for t in 0..tasks {
        let locker = lockers[t % lockers.len()].clone();
        let (fences, key) = (fences.clone(), key.to_owned());
        running.push(tokio::spawn(async move {
            for _ in 0..per_task {
                let lock = locker
                    .acquire(&key, Duration::from_secs(10))
                    .retry(retry::constant(ms(1)).jitter(Jitter::full()))
                    .deadline(Duration::from_secs(60))
                    .await
                    .expect("acquired within the deadline");
                fences.lock().unwrap().push(lock.fence().expect("fenced"));
                tokio::task::yield_now().await;
                lock.release().await.unwrap();
            }
        }));
    }
    for task in running {
        task.await.unwrap();
    }
    Arc::try_unwrap(fences).unwrap().into_inner().unwrap()
}

fn assert_strictly_increasing(fences: &[u64]) {
    for pair in fences.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fence {} came after {}",
            pair[1],
            pair[0]
        );
    }
}

/// 2,000 acquisitions by 16 tasks over 4 lockers (separate connections): every fence is
/// greater than the one before, and `inspect` shows the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_strictly_increase_across_thousands_of_contended_acquisitions() {
    let server = RedisServer::spawn();
    let mut lockers = Vec::new();
    for _ in 0..4 {
        lockers.push(Locker::new(multiplexed(&server).await));
    }
    let fences = contended_fences(&lockers, "fenced", 16, 125).await;
    assert_eq!(fences.len(), 2000);
    assert_strictly_increasing(&fences);
    assert_eq!(fences[0], 1, "a new key's first fence is 1");
    assert_eq!(*fences.last().unwrap(), 2000, "one fence per acquisition");
    let info = lockers[0].inspect("fenced").await.unwrap();
    assert!(!info.held);
    assert_eq!(info.fence, Some(2000));
    assert_eq!(
        Raw::new(&server).await.fence_counter("fenced").await,
        Some(2000)
    );
}

/// A holder that outlives its TTL loses the lock to the next one, whose fence is greater:
/// a storage layer refuses the old holder's late writes. Refresh and keep-alive keep the
/// fence.
#[tokio::test]
async fn expiry_and_takeover_hand_out_a_greater_fence() {
    let server = RedisServer::spawn();
    let paused = common::locker(&server).await;
    let next = common::locker(&server).await;

    let mut stale = paused.acquire("report", ms(200)).await.unwrap();
    let stale_fence = stale.fence().unwrap();
    tokio::time::sleep(ms(300)).await; // "paused" past its TTL
    let mut current = next
        .acquire("report", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(current.fence().unwrap() > stale_fence);
    assert!(matches!(
        stale.refresh(Duration::from_secs(10)).await,
        Err(Error::NotHeld)
    ));
    assert!(matches!(stale.release().await, Err(Error::NotHeld)));

    let fence = current.fence();
    current.refresh(Duration::from_secs(20)).await.unwrap();
    assert_eq!(current.fence(), fence, "a refresh keeps the fence");
    let lease = current.keep_alive().unwrap();
    assert_eq!(lease.fence(), fence);
    lease.release().await.unwrap();
    let again = next
        .acquire("report", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(again.fence(), fence.map(|f| f + 1));
    again.release().await.unwrap();
}

/// One fence per multi-key acquisition, greater than every earlier fence of any of its
/// keys; all its keys' counters move to it.
#[tokio::test]
async fn a_multi_key_lock_gets_one_fence_above_all_its_keys() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = Raw::new(&server).await;

    let b = locker.acquire("b", ms(5_000)).await.unwrap(); // b: 1
    b.release().await.unwrap();
    let b = locker.acquire("b", ms(5_000)).await.unwrap(); // b: 2
    b.release().await.unwrap();
    let ab = locker.acquire_all(["a", "b"], ms(5_000)).await.unwrap();
    assert_eq!(ab.fence(), Some(3), "above b's 2, though a had none");
    ab.release().await.unwrap();
    assert_eq!(raw.fence_counter("a").await, Some(3));
    assert_eq!(raw.fence_counter("b").await, Some(3));
    let a = locker.acquire("a", ms(5_000)).await.unwrap();
    assert_eq!(a.fence(), Some(4));
    a.release().await.unwrap();
    let ac = locker.acquire_all(["c", "a"], ms(5_000)).await.unwrap();
    assert_eq!(ac.fence(), Some(5));
    ac.release().await.unwrap();
    assert_eq!(raw.fence_counter("c").await, Some(5));
    assert_eq!(
        raw.fence_counter("b").await,
        Some(3),
        "b was not part of it"
    );
}

/// A held key, or a try that fails, hands out nothing and moves no counter; `inspect`
/// shows the latest fence while the lock is held and after.
#[tokio::test]
async fn failed_tries_move_no_counter_and_inspect_shows_the_latest() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = Raw::new(&server).await;
    assert_eq!(locker.inspect("k").await.unwrap().fence, None);
    let held = locker.acquire("k", ms(5_000)).await.unwrap();
    for _ in 0..5 {
        assert!(matches!(
            locker.acquire_all(["free", "k"], ms(5_000)).await,
            Err(Error::NotObtained(_))
        ));
    }
    assert_eq!(raw.fence_counter("k").await, Some(1));
    assert_eq!(raw.fence_counter("free").await, None);
    let info = locker.inspect("k").await.unwrap();
    assert!(info.held);
    assert_eq!(info.fence, Some(1));
    held.release().await.unwrap();
}

/// Without fences: no fence, no counter written, one plain SET per acquire.
#[tokio::test]
async fn without_fences_nothing_is_counted() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await.without_fences();
    assert!(!locker.fences());
    let mut raw = Raw::new(&server).await;
    let lock = locker.acquire_all(["x", "y"], ms(5_000)).await.unwrap();
    assert_eq!(lock.fence(), None);
    let keys: Vec<Vec<u8>> = raw.run(redis::cmd("KEYS").arg("*")).await;
    assert_eq!(keys.len(), 2, "only the two lock keys");
    lock.release().await.unwrap();
    let keys: Vec<Vec<u8>> = raw.run(redis::cmd("KEYS").arg("*")).await;
    assert!(keys.is_empty());
}

/// Someone else's data at the counter: a typed error, and nothing written.
#[tokio::test]
async fn a_counter_holding_garbage_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = Raw::new(&server).await;
    raw.set("{job}:fence", "not a number").await;
    let error = locker.acquire("job", ms(5_000)).await.unwrap_err();
    assert!(matches!(error, Error::Redis(_)), "{error:?}");
    assert!(!error.is_transient());
    assert!(error.to_string().contains("fence counter"), "{error}");
    assert!(!raw.exists("job").await, "the lock key was not written");
    assert_eq!(raw.get("{job}:fence").await.unwrap(), b"not a number");

    raw.run::<()>(redis::cmd("DEL").arg("{job}:fence")).await;
    raw.run::<()>(redis::cmd("HSET").arg("{job}:fence").arg("f").arg("v"))
        .await;
    let error = locker.acquire("job", ms(5_000)).await.unwrap_err();
    assert!(!error.is_transient(), "{error}");
    assert!(!raw.exists("job").await);
}

/// Keys whose counter needs a chosen tag (no hash tag, but a `}`) and keys with a hash tag
/// are fenced like any other.
#[tokio::test]
async fn keys_with_braces_are_fenced_too() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    for key in ["a}b", "{tagged}:x", "x{}y}"] {
        let first = locker.acquire(key, ms(5_000)).await.unwrap();
        assert_eq!(first.fence(), Some(1), "{key}");
        first.release().await.unwrap();
        let second = locker.acquire(key, ms(5_000)).await.unwrap();
        assert_eq!(second.fence(), Some(2), "{key}");
        assert_eq!(locker.inspect(key).await.unwrap().fence, Some(2));
        second.release().await.unwrap();
    }
}

fn redlock_locker(conns: Vec<MultiplexedConnection>) -> Locker<MultiplexedConnection> {
    Locker::redlock(conns)
        .unwrap()
        .with_quorum_settings(QuorumSettings::new().node_timeout(ms(250)))
}

/// Redlock: 400 contended acquisitions by 8 tasks over 2 lockers: strictly increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fences_strictly_increase_under_contention() {
    let servers = RedisServer::spawn_many(5);
    let mut lockers = Vec::new();
    for _ in 0..2 {
        let mut conns = Vec::new();
        for server in &servers {
            conns.push(multiplexed(server).await);
        }
        lockers.push(redlock_locker(conns));
    }
    let fences = contended_fences(&lockers, "quorum-fenced", 8, 50).await;
    assert_eq!(fences.len(), 400);
    assert_strictly_increasing(&fences);
    assert_eq!(
        lockers[0].inspect("quorum-fenced").await.unwrap().fence,
        fences.last().copied()
    );
}

/// The trap the maximum over the acquiring quorum falls into: failed tries raised the
/// counters of a minority (nodes 0 and 1) far ahead. The next acquisition's fence (one
/// above the maximum) must be stored on a quorum before it is handed out — otherwise, once
/// that minority is gone, a later holder counting on the other nodes alone would get a
/// smaller fence.
#[tokio::test]
async fn redlock_fences_stay_increasing_when_a_raised_minority_is_lost() {
    let mut servers = RedisServer::spawn_many(5);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed(server).await);
    }
    let locker = redlock_locker(conns);
    let first = locker.acquire("job", ms(10_000)).await.unwrap();
    assert_eq!(first.fence(), Some(1));
    first.release().await.unwrap();

    for server in &servers[..2] {
        assert_eq!(server.command(&["SET", "{job}:fence", "50"]), "+OK\r\n");
    }
    let second = locker.acquire("job", ms(10_000)).await.unwrap();
    assert_eq!(second.fence(), Some(51));
    let stored: Vec<String> = servers
        .iter()
        .map(|s| s.command(&["GET", "{job}:fence"]))
        .collect();
    let at_least = stored.iter().filter(|r| r.ends_with("51\r\n")).count();
    assert_eq!(
        at_least, 5,
        "every node that took the keys stores 51: {stored:?}"
    );
    second.release().await.unwrap();

    // Nodes 0 and 1 lose their data (killed; restarted empty).
    for server in &mut servers[..2] {
        server.kill();
        server.restart();
    }
    let third = locker
        .acquire("job", ms(10_000))
        .retry(retry::constant(ms(50)))
        .deadline(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        third.fence(),
        Some(52),
        "above every fence handed out before"
    );
    third.release().await.unwrap();
}
