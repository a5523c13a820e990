//! Fencing tokens: taken only when asked for (or with the keys), strictly increasing per
//! key across holders, lockers, expiry and takeover, multi-key, Redlock (including nodes
//! whose counters drifted apart), inspect, counters that expire after their retention
//! period, reserved names, turning them off, and a counter that holds garbage.

use crate::common;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{ms, multiplexed, Raw};
use redis::aio::MultiplexedConnection;
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{error::Argument, Error, Locker, QuorumSettings};
use testkit::RedisServer;

/// The fences that `tasks` tasks spread over `lockers` get for `per_task` acquisitions each
/// of `key`, in the order the critical sections ran (pushed while holding the lock). Every
/// other acquisition takes its fence with the keys, the others ask for it after.
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
            for i in 0..per_task {
                let acquire = locker
                    .acquire(&key, Duration::from_secs(10))
                    .retry(retry::constant(ms(1)).jitter(Jitter::full()))
                    .deadline(Duration::from_secs(60));
                let acquire = match (t + i) % 2 {
                    0 => acquire.with_fence(),
                    _ => acquire,
                };
                let lock = acquire.await.expect("acquired within the deadline");
                let fence = lock.fence().await.expect("fenced");
                fences.lock().unwrap().push(fence);
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

/// Takes `key` with its fence, releases it, and returns the fence.
async fn fenced_turn(locker: &Locker<MultiplexedConnection>, key: &str) -> u64 {
    let lock = locker.acquire(key, ms(5_000)).with_fence().await.unwrap();
    let fence = lock.fence_if_taken().unwrap();
    lock.release().await.unwrap();
    fence
}

/// 2,000 acquisitions by 16 tasks over 4 lockers (separate connections): every fence is
/// greater than the one before, the first from the server's clock, none far above it;
/// `inspect` shows the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_strictly_increase_across_thousands_of_contended_acquisitions() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let mut lockers = Vec::new();
    for _ in 0..4 {
        lockers.push(Locker::new(multiplexed(&server).await));
    }
    let before = raw.server_micros().await;
    let fences = contended_fences(&lockers, "fenced", 16, 125).await;
    assert_eq!(fences.len(), 2000);
    assert_strictly_increasing(&fences);
    assert!(
        fences[0] >= before && fences[0] <= raw.server_micros().await,
        "a new key's first fence is the server's clock in µs: {} vs {before}",
        fences[0]
    );
    assert!(
        fences[1999] <= raw.server_micros().await + 1999,
        "then the clock, or one more than the last where the clock is behind"
    );
    let info = lockers[0].inspect("fenced").await.unwrap();
    assert!(!info.held);
    assert_eq!(info.fence, Some(fences[1999]));
    assert_eq!(raw.fence_counter("fenced").await, Some(fences[1999]));
}

/// A holder that outlives its TTL loses the lock to the next one, whose fence is greater;
/// the stale holder can no longer take a fence at all. Refresh and keep-alive keep the
/// fence; a second call answers the same fence without a round trip.
#[tokio::test]
async fn expiry_and_takeover_hand_out_a_greater_fence() {
    let server = RedisServer::spawn();
    let paused = common::locker(&server).await;
    let next = common::locker(&server).await;

    let mut stale = paused.acquire("report", ms(200)).await.unwrap();
    let stale_fence = stale.fence().await.unwrap();
    let late = paused.acquire("late", ms(200)).await.unwrap();
    tokio::time::sleep(ms(300)).await; // "paused" past its TTL
    let mut current = next
        .acquire("report", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(current.fence().await.unwrap() > stale_fence);
    assert_eq!(
        stale.fence().await.unwrap(),
        stale_fence,
        "kept, not taken again"
    );
    assert!(matches!(
        stale.refresh(Duration::from_secs(10)).await,
        Err(Error::NotHeld)
    ));
    assert!(matches!(stale.release().await, Err(Error::NotHeld)));
    // Expired before it asked: no fence, no counter.
    assert!(matches!(late.fence().await, Err(Error::NotHeld)));
    assert_eq!(Raw::new(&server).await.fence_counter("late").await, None);

    let fence = current.fence().await.unwrap();
    current.refresh(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        current.fence_if_taken(),
        Some(fence),
        "a refresh keeps the fence"
    );
    let lease = current.keep_alive().unwrap();
    assert_eq!(lease.fence().await.unwrap(), fence);
    lease.release().await.unwrap();
    let again = next
        .acquire("report", Duration::from_secs(10))
        .with_fence()
        .await
        .unwrap();
    assert!(again.fence_if_taken().unwrap() > fence);
    again.release().await.unwrap();
}

/// Concurrent calls on one lock share one round trip and one fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_get_the_same_fence() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let lock = Arc::new(locker.acquire("shared", ms(10_000)).await.unwrap());
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.fence().await.unwrap() })
        })
        .collect();
    let mut fences = Vec::new();
    for call in calls {
        fences.push(call.await.unwrap());
    }
    assert!(fences.iter().all(|f| *f == fences[0]), "{fences:?}");
    assert_eq!(
        locker.inspect("shared").await.unwrap().fence,
        Some(fences[0])
    );
}

/// One fence per multi-key acquisition, greater than every earlier fence of any of its
/// keys; all its keys' counters move to it. Taken lazily or with the keys alike.
#[tokio::test]
async fn a_multi_key_lock_gets_one_fence_above_all_its_keys() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = Raw::new(&server).await;

    let b = locker.acquire("b", ms(5_000)).await.unwrap();
    let b1 = b.fence().await.unwrap();
    b.release().await.unwrap();
    let b = locker.acquire("b", ms(5_000)).with_fence().await.unwrap();
    let b2 = b.fence().await.unwrap();
    assert!(b2 > b1);
    b.release().await.unwrap();
    // b's counter a day ahead of the clock: the fence must come from it, not from a's
    // missing counter (the clock).
    let ahead = b2 + 86_400_000_000;
    raw.set("{b}:fence", &ahead.to_string()).await;
    let ab = locker.acquire_all(["a", "b"], ms(5_000)).await.unwrap();
    let fence_ab = ab.fence().await.unwrap();
    assert_eq!(fence_ab, ahead + 1, "above b's counter, though a had none");
    ab.release().await.unwrap();
    assert_eq!(raw.fence_counter("a").await, Some(fence_ab));
    assert_eq!(raw.fence_counter("b").await, Some(fence_ab));
    let a = locker.acquire("a", ms(5_000)).with_fence().await.unwrap();
    let fence_a = a.fence_if_taken().unwrap();
    assert!(fence_a > fence_ab);
    a.release().await.unwrap();
    let ac = locker
        .acquire_all(["c", "a"], ms(5_000))
        .with_fence()
        .await
        .unwrap();
    let fence_ac = ac.fence_if_taken().unwrap();
    assert!(fence_ac > fence_a, "above a's counter, though c had none");
    ac.release().await.unwrap();
    assert_eq!(raw.fence_counter("c").await, Some(fence_ac));
    assert_eq!(raw.fence_counter("a").await, Some(fence_ac));
    assert_eq!(
        raw.fence_counter("b").await,
        Some(fence_ab),
        "b was not part of it"
    );
}

/// Locks whose fence nobody asks for write no counter: the acquire is one plain `SET`, the
/// release one script, and nothing is left behind. A held key, or a try that fails, moves
/// no counter either; `inspect` shows the latest fence while the lock is held and after.
#[tokio::test]
async fn unread_fences_cost_nothing_and_failed_tries_move_no_counter() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = Raw::new(&server).await;
    // The first release loads its script (NOSCRIPT, SCRIPT LOAD): not counted.
    let warm_up = locker.acquire("warm-up", ms(5_000)).await.unwrap();
    warm_up.release().await.unwrap();
    let calls_before = common::command_calls(&server);
    let lock = locker.acquire_all(["x"], ms(5_000)).await.unwrap();
    lock.release().await.unwrap();
    let calls = common::command_calls(&server).since(&calls_before);
    assert_eq!(
        calls.summary(),
        "del=1 evalsha=1 get=1 set=1",
        "the baseline's four commands"
    );
    let keys: Vec<Vec<u8>> = raw.run(redis::cmd("KEYS").arg("*")).await;
    assert!(keys.is_empty(), "{keys:?}");

    assert_eq!(locker.inspect("k").await.unwrap().fence, None);
    let held = locker.acquire("k", ms(5_000)).with_fence().await.unwrap();
    let fence = held.fence_if_taken().unwrap();
    for _ in 0..5 {
        assert!(matches!(
            locker
                .acquire_all(["free", "k"], ms(5_000))
                .with_fence()
                .await,
            Err(Error::NotObtained(_))
        ));
    }
    assert_eq!(raw.fence_counter("k").await, Some(fence));
    assert_eq!(raw.fence_counter("free").await, None);
    let info = locker.inspect("k").await.unwrap();
    assert!(info.held);
    assert_eq!(info.fence, Some(fence));
    held.release().await.unwrap();
    assert_eq!(locker.inspect("k").await.unwrap().fence, Some(fence));
}

/// Counters expire after the retention period; the next fence counts on from the server's
/// clock, above every fence handed out before.
#[tokio::test]
async fn counters_expire_after_their_retention_and_fences_still_increase() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let default = common::locker(&server).await;
    assert_eq!(
        default.fence_retention(),
        redmutex::limits::DEFAULT_FENCE_RETENTION
    );
    for bad in [ms(999), redmutex::limits::MAX_TTL + ms(1)] {
        let error = default.clone().with_fence_retention(bad).unwrap_err();
        assert!(
            matches!(&error, Error::InvalidArgument(a) if a.argument == Argument::Fences),
            "{error}"
        );
    }
    let locker = default.with_fence_retention(ms(1_000)).unwrap();
    let mut fences = Vec::new();
    for _ in 0..3 {
        let lock = locker.acquire("brief", ms(5_000)).await.unwrap();
        fences.push(lock.fence().await.unwrap());
        lock.release().await.unwrap();
    }
    let ttl = raw.pttl("{brief}:fence").await;
    assert!(
        ttl > 0 && ttl <= 1_000,
        "kept for the retention period: {ttl}"
    );
    assert!(raw.wait_until_gone("{brief}:fence", ms(3_000)).await);
    fences.push(fenced_turn(&locker, "brief").await);
    assert_strictly_increasing(&fences);
    assert!(fences[3] > fences[2] + 1_000_000, "counted from the clock");
}

/// A failover to a replica that had not received the last increments leaves the counter
/// at an older value, not missing: the next fence still passes every one handed out,
/// because no fence is below the server's clock.
#[tokio::test]
async fn a_counter_set_back_as_a_lagging_replica_has_it_is_passed_by_the_clock() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = Raw::new(&server).await;
    let mut fences = Vec::new();
    for _ in 0..3 {
        fences.push(fenced_turn(&locker, "ledger").await);
    }
    // What the promoted replica holds: the counter as it was before the last two fences.
    raw.set("{ledger}:fence", &fences[0].to_string()).await;
    fences.push(fenced_turn(&locker, "ledger").await);
    assert_strictly_increasing(&fences);
    assert!(
        fences[3] >= raw.server_micros().await - 1_000_000,
        "from the clock"
    );
}

/// Keys named like fence counters are refused before anything is sent, so a lock key and
/// a counter can never collide, whichever is locked first.
#[tokio::test]
async fn keys_named_like_counters_are_refused_before_any_request() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let job = locker.acquire("job", ms(5_000)).await.unwrap();
    job.fence().await.unwrap();
    let calls_before = common::command_calls(&server);
    for key in ["{job}:fence", "{task}:fence", "{order-7}:fence:x"] {
        let error = locker.acquire(key, ms(5_000)).await.unwrap_err();
        assert!(
            matches!(&error, Error::InvalidArgument(a) if a.argument == Argument::Key),
            "{key}: {error}"
        );
        assert!(error.to_string().contains("reserved"), "{error}");
        assert!(locker.inspect(key).await.unwrap_err().is_invalid_argument());
    }
    assert_eq!(
        common::command_calls(&server)
            .since(&calls_before)
            .summary(),
        "",
        "nothing was sent"
    );
    job.release().await.unwrap();
    // The key whose counter name was refused works as any other.
    let task = locker
        .acquire("task", ms(5_000))
        .with_fence()
        .await
        .unwrap();
    assert!(task.fence_if_taken().is_some());
    task.release().await.unwrap();
    // Under a prefix, such names are ordinary lock keys.
    let prefixed = locker.clone().with_prefix("app:");
    let lock = prefixed.acquire("{job}:fence", ms(5_000)).await.unwrap();
    lock.release().await.unwrap();
}

/// Without fences: asking for one (or acquiring with one) is an invalid argument, and no
/// counter is ever written.
#[tokio::test]
async fn without_fences_nothing_is_counted() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await.without_fences();
    assert!(!locker.fences());
    let mut raw = Raw::new(&server).await;
    let lock = locker.acquire_all(["x", "y"], ms(5_000)).await.unwrap();
    let error = lock.fence().await.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidArgument(a) if a.argument == Argument::Fences),
        "{error}"
    );
    let error = locker
        .acquire("z", ms(5_000))
        .with_fence()
        .await
        .unwrap_err();
    assert!(error.is_invalid_argument(), "{error}");
    let keys: Vec<Vec<u8>> = raw.run(redis::cmd("KEYS").arg("*")).await;
    assert_eq!(keys.len(), 2, "only the two lock keys");
    lock.release().await.unwrap();
    let keys: Vec<Vec<u8>> = raw.run(redis::cmd("KEYS").arg("*")).await;
    assert!(keys.is_empty());
}

/// Someone else's data at the counter: a typed error, and nothing written — neither with
/// the keys (the lock key is not taken) nor after (the lock stays held, the counter as
/// it was).
#[tokio::test]
async fn a_counter_holding_garbage_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = Raw::new(&server).await;
    raw.set("{job}:fence", "not a number").await;
    let error = locker
        .acquire("job", ms(5_000))
        .with_fence()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Redis(_)), "{error:?}");
    assert!(!error.is_transient());
    assert!(error.to_string().contains("fence counter"), "{error}");
    assert!(!raw.exists("job").await, "the lock key was not written");
    assert_eq!(raw.get("{job}:fence").await.unwrap(), b"not a number");

    let lock = locker.acquire("job", ms(5_000)).await.unwrap();
    let error = lock.fence().await.unwrap_err();
    assert!(error.to_string().contains("fence counter"), "{error}");
    assert!(!error.is_transient() && !error.is_not_held(), "{error}");
    assert_eq!(raw.get("{job}:fence").await.unwrap(), b"not a number");
    lock.release().await.unwrap();

    raw.run::<()>(redis::cmd("DEL").arg("{job}:fence")).await;
    raw.run::<()>(redis::cmd("HSET").arg("{job}:fence").arg("f").arg("v"))
        .await;
    let error = locker
        .acquire("job", ms(5_000))
        .with_fence()
        .await
        .unwrap_err();
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
        let fence = first.fence().await.unwrap();
        first.release().await.unwrap();
        let second = locker.acquire(key, ms(5_000)).with_fence().await.unwrap();
        let next = second.fence_if_taken().unwrap();
        assert!(next > fence, "{key}");
        assert_eq!(locker.inspect(key).await.unwrap().fence, Some(next));
        second.release().await.unwrap();
    }
}

fn redlock_locker(conns: Vec<MultiplexedConnection>) -> Locker<MultiplexedConnection> {
    Locker::redlock(conns)
        .unwrap()
        .with_quorum_settings(QuorumSettings::new().node_timeout(ms(250)))
}

/// Redlock: 400 contended acquisitions by 8 tasks over 2 lockers, half taking the fence
/// with the keys, half after: strictly increasing.
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

/// Redlock, a fence asked for after the acquire: taken on a quorum, stored on every node
/// that holds the keys; none once the lock is gone.
#[tokio::test]
async fn redlock_fences_taken_after_the_acquire() {
    let servers = RedisServer::spawn_many(5);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed(server).await);
    }
    let locker = redlock_locker(conns);
    let lock = locker.acquire("later", ms(10_000)).await.unwrap();
    // Handed out once a quorum took it: wait for the others, so that every node stores it.
    common::every_node_holds(&servers, "later", &lock.token()).await;
    let fence = lock.fence().await.unwrap();
    for server in &servers {
        let counter = server.command(&["GET", "{later}:fence"]);
        assert!(counter.ends_with(&format!("{fence}\r\n")), "{counter}");
    }
    lock.release().await.unwrap();
    let lost = locker.acquire("later", ms(300)).await.unwrap();
    tokio::time::sleep(ms(400)).await;
    assert!(matches!(lost.fence().await, Err(Error::NotHeld)));
    let next = locker.acquire("later", ms(10_000)).await.unwrap();
    assert!(next.fence().await.unwrap() > fence);
    next.release().await.unwrap();
}

/// The trap the maximum over the acquiring quorum falls into: failed tries raised the
/// counters of a minority (nodes 0 and 1) far ahead — further than the clock would carry a
/// counter that starts again. The next acquisition's fence (one above the maximum) must be
/// stored on a quorum before it is handed out — otherwise, once that minority is gone, a
/// later holder counting on the other nodes alone would get a smaller fence.
#[tokio::test]
async fn redlock_fences_stay_increasing_when_a_raised_minority_is_lost() {
    let mut servers = RedisServer::spawn_many(5);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed(server).await);
    }
    let locker = redlock_locker(conns);
    let first = locker
        .acquire("job", ms(10_000))
        .with_fence()
        .await
        .unwrap();
    let fence = first.fence_if_taken().unwrap();
    first.release().await.unwrap();

    // A day of microseconds ahead of every node's clock.
    let ahead = fence + 86_400_000_000;
    for server in &servers[..2] {
        let reply = server.command(&["SET", "{job}:fence", &ahead.to_string()]);
        assert_eq!(reply, "+OK\r\n");
    }
    let second = locker
        .acquire("job", ms(10_000))
        .with_fence()
        .await
        .unwrap();
    assert_eq!(second.fence_if_taken(), Some(ahead + 1));
    let stored: Vec<String> = servers
        .iter()
        .map(|s| s.command(&["GET", "{job}:fence"]))
        .collect();
    let at_least = stored
        .iter()
        .filter(|r| r.ends_with(&format!("{}\r\n", ahead + 1)))
        .count();
    assert!(
        at_least >= 3,
        "a quorum stores it before it is handed out: {stored:?}"
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
        third.fence().await.unwrap(),
        ahead + 2,
        "above every fence handed out before"
    );
    third.release().await.unwrap();
}

/// A fence asked for while the server cannot be reached: a transient error, no fence (and
/// the next call, once the server answers, takes one). Redlock with too few nodes left: a
/// transient NoQuorum.
#[tokio::test]
async fn a_fence_asked_for_while_unreachable_is_a_transient_error() {
    let server = RedisServer::spawn();
    let locker = Locker::new(common::manager(&server).await);
    let lock = locker.acquire("cut-off", ms(10_000)).await.unwrap();
    server.pause();
    let error = lock.fence().await.unwrap_err();
    assert!(error.is_transient() && !error.is_not_held(), "{error}");
    assert_eq!(lock.fence_if_taken(), None);
    server.resume();
    let fence = lock.fence().await.unwrap();
    assert_eq!(lock.fence_if_taken(), Some(fence));
    lock.release().await.unwrap();

    let servers = RedisServer::spawn_many(5);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed(server).await);
    }
    let locker = redlock_locker(conns);
    let lock = locker.acquire("cut-off", ms(10_000)).await.unwrap();
    for server in &servers[..3] {
        server.kill();
    }
    match lock.fence().await {
        Err(Error::NoQuorum(failure)) => {
            assert!(failure.agreed < failure.needed, "{failure}");
            assert!(Error::NoQuorum(failure).is_transient());
        }
        other => panic!("{other:?}"),
    }
}
