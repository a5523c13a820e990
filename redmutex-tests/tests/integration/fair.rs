//! The fair lock against a real server: waiters from separate lockers (as from separate
//! processes) get the key in arrival order; a waiter that stops trying (a crashed process)
//! drops out of line within its heartbeat; a waiter that gives up or is cancelled leaves;
//! only the first in line may take a free key; a release wakes the next waiter on its own
//! channel; bad input, Redlock and foreign data are refused; every key has a TTL.

use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{blamed, ms, own_locker, Raw};
use redis::aio::MultiplexedConnection;
use redmutex::{error::Argument, limits::MIN_HEARTBEAT, retry, FairLock, Locker};
use testkit::RedisServer;
use tokio::time::Instant;

/// How many wait in `fair`'s line.
async fn in_line<C: redmutex::connection::Connection>(fair: &FairLock<C>) -> usize {
    crate::common::in_line(&fair.inspect().await.unwrap()) as usize
}

/// Waits until `n` waiters are in line.
async fn until_in_line(fair: &FairLock<MultiplexedConnection>, n: usize) {
    let until = Instant::now() + ms(5_000);
    loop {
        let waiters = in_line(fair).await;
        if waiters >= n {
            assert_eq!(waiters, n, "more waiters than started");
            return;
        }
        assert!(Instant::now() < until, "{waiters} of {n} waiters in line");
        tokio::time::sleep(ms(5)).await;
    }
}

/// Starts waiters one after the other, each in a locker of its own and in line before the
/// next starts; each records its number when it gets the lock, holds it `hold`, releases.
async fn waiters_in_line(
    server: &RedisServer,
    key: &str,
    n: usize,
    waking: bool,
    poll: Duration,
    hold: Duration,
) -> (Arc<Mutex<Vec<usize>>>, Vec<tokio::task::JoinHandle<()>>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let watcher = own_locker(server, false).await.fair_lock(key).unwrap();
    let mut tasks = Vec::new();
    for i in 0..n {
        let fair = own_locker(server, waking).await.fair_lock(key).unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = (fair.acquire(ms(10_000)))
                .retry(retry::constant(poll))
                .deadline(ms(20_000))
                .await
                .unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(hold).await;
            guard.release().await.unwrap();
        }));
        until_in_line(&watcher, i + 1).await;
    }
    (order, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_separate_lockers_get_the_key_in_arrival_order() {
    for waking in [true, false] {
        let server = RedisServer::spawn();
        let mut raw = Raw::new(&server).await;
        let holder = own_locker(&server, false)
            .await
            .fair_lock("ordered")
            .unwrap();
        let held = holder.acquire(ms(10_000)).await.unwrap();
        // Polling every 20 ms, waiters would race for the key; the queue decides.
        let (order, tasks) = waiters_in_line(&server, "ordered", 6, waking, ms(20), ms(30)).await;
        // Every key has a TTL while they wait: the queue, with a ticket and a heartbeat
        // per waiter.
        assert!(raw.pttl("{ordered}:queue").await > 0);
        let entries: i64 = raw.run(redis::cmd("ZCARD").arg("{ordered}:queue")).await;
        assert_eq!(entries, 12);
        // A skip list, not the compact encoding whose every lookup walks every entry
        // (helpers.lua's `beat_of`): a hand-off costs the same however many wait.
        let encoding: String =
            (raw.run(redis::cmd("OBJECT").arg("ENCODING").arg("{ordered}:queue"))).await;
        assert_eq!(encoding, "skiplist");
        held.release().await.unwrap();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            [0, 1, 2, 3, 4, 5],
            "waking: {waking}"
        );
        assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
    }
}

#[tokio::test]
async fn a_free_key_is_only_for_the_first_in_line() {
    let server = RedisServer::spawn();
    let fair = own_locker(&server, false).await.fair_lock("first").unwrap();
    let held = fair.acquire(ms(10_000)).await.unwrap();
    // A waiter that polls only every 1.5 s: it is in line, but slow to come back.
    let slow = own_locker(&server, false).await.fair_lock("first").unwrap();
    let slow = tokio::spawn(
        (slow.acquire(ms(10_000)))
            .retry(retry::constant(ms(1_500)))
            .deadline(ms(10_000))
            .into_future(),
    );
    until_in_line(&fair, 1).await;
    held.release().await.unwrap();
    // The key is free, but a newcomer is not first in line: it does not get it, and with
    // one try it does not queue either.
    let newcomer = fair.acquire(ms(10_000)).await.unwrap_err();
    assert!(newcomer.is_not_obtained(), "{newcomer}");
    assert!(
        fair.inspect().await.unwrap().is_none(),
        "free, though one waits in line"
    );
    // A plain acquire of the same key does not queue: it may take a free key ahead of the
    // line (documented), and excludes the fair waiter while it holds it.
    let plain = own_locker(&server, false).await;
    let barged = plain.acquire("first", ms(300)).await.unwrap();
    let slow = slow.await.unwrap().unwrap();
    assert!(
        barged.release().await.is_err(),
        "the plain lock expired first"
    );
    assert_eq!(slow.key(), b"first");
    slow.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_stops_trying_drops_out_of_line_within_its_heartbeat() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let heartbeat = ms(600);
    let fair = (own_locker(&server, false).await.fair_lock("ghost").unwrap())
        .with_heartbeat(heartbeat)
        .unwrap();
    let held = fair.acquire(ms(10_000)).await.unwrap();
    // A process queues, then is killed: its place stays, with nobody renewing it. (The
    // test kit cannot SIGKILL a task; a waiter whose future is leaked never cleans up,
    // exactly like a killed process.)
    let ghost = (own_locker(&server, false).await.fair_lock("ghost").unwrap())
        .with_heartbeat(heartbeat)
        .unwrap();
    let mut ghost = Box::pin(
        ghost
            .acquire(ms(10_000))
            .retry(retry::constant(ms(10_000)))
            .deadline(ms(60_000))
            .into_future(),
    );
    assert!(tokio::time::timeout(ms(100), &mut ghost).await.is_err());
    std::mem::forget(ghost);
    assert_eq!(in_line(&fair).await, 1);
    // A live waiter behind it.
    let live = fair.clone();
    let live = tokio::spawn(async move {
        let guard = (live.acquire(ms(10_000)))
            .retry(retry::constant(ms(50)))
            .deadline(ms(10_000))
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    until_in_line(&fair, 2).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (got, guard) = live.await.unwrap();
    // The ghost held the line until its heartbeat ran out (the server's clock), not longer.
    assert!(got - released < heartbeat + ms(500), "{:?}", got - released);
    assert_eq!(in_line(&fair).await, 0);
    guard.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

#[tokio::test]
async fn a_waiter_that_gives_up_or_is_cancelled_leaves_the_line() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let fair = own_locker(&server, false)
        .await
        .fair_lock("leaving")
        .unwrap();
    let held = fair.acquire(ms(10_000)).await.unwrap();
    // Gives up at its deadline.
    let gave_up = (fair.acquire(ms(10_000)))
        .retry(retry::constant(ms(50)))
        .deadline(ms(200))
        .await
        .unwrap_err();
    assert!(gave_up.is_not_obtained(), "{gave_up}");
    assert_eq!(in_line(&fair).await, 0);
    // Cancelled while waiting.
    let cancelled = tokio::time::timeout(
        ms(200),
        (fair.acquire(ms(10_000)))
            .retry(retry::constant(ms(50)))
            .deadline(ms(10_000))
            .into_future(),
    )
    .await;
    assert!(cancelled.is_err());
    let until = Instant::now() + ms(2_000);
    while in_line(&fair).await > 0 {
        assert!(
            Instant::now() < until,
            "the cancelled waiter stayed in line"
        );
        tokio::time::sleep(ms(10)).await;
    }
    assert_eq!(raw.lock_keys().await, [b"leaving".to_vec()]);
    // The next acquire is not held up by anyone who left.
    held.release().await.unwrap();
    fair.acquire(ms(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_next_waiter_on_its_own_channel() {
    let server = RedisServer::spawn();
    let fair = (own_locker(&server, true).await.fair_lock("woken").unwrap())
        .with_heartbeat(ms(60_000))
        .unwrap();
    let held = fair.acquire(ms(30_000)).await.unwrap();
    // Waiters that poll only every 20 s (a third of the heartbeat caps the 30 s asked):
    // what gets them the key is the release before theirs.
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let waiter = (own_locker(&server, true).await.fair_lock("woken").unwrap())
            .with_heartbeat(ms(60_000))
            .unwrap();
        waiters.push(tokio::spawn(async move {
            let guard = (waiter.acquire(ms(30_000)))
                .retry(retry::constant(ms(30_000)))
                .deadline(ms(60_000))
                .await
                .unwrap();
            let at = Instant::now();
            guard.release().await.unwrap();
            at
        }));
        until_in_line(&fair, waiters.len()).await;
    }
    // Each is subscribed to its own channel (the key, ':~', a hash of its token).
    let until = Instant::now() + ms(5_000);
    while subscribed_turn_channels(&server, "woken") < 3 {
        assert!(Instant::now() < until, "the waiters never subscribed");
        tokio::time::sleep(ms(20)).await;
    }
    tokio::time::sleep(ms(100)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    for waiter in waiters {
        let got = waiter.await.unwrap();
        assert!(
            got - released < ms(3_000),
            "woken, not polled: {:?}",
            got - released
        );
    }
}

/// How many turn channels of `key` the server has subscribers for.
fn subscribed_turn_channels(server: &RedisServer, key: &str) -> usize {
    let reply = server.command(&["PUBSUB", "CHANNELS", &format!("{key}:~*")]);
    reply.lines().filter(|line| line.contains(":~")).count()
}

#[tokio::test]
async fn bad_input_redlock_and_foreign_data_are_refused_with_typed_errors() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let plain = own_locker(&server, false).await;
    for (error, argument) in [
        (plain.fair_lock("").unwrap_err(), Argument::Key),
        (plain.fair_lock("{x}:queue").unwrap_err(), Argument::Key),
        (plain.fair_lock("{x}:queue:y").unwrap_err(), Argument::Key),
        (
            (plain.fair_lock("x").unwrap())
                .with_heartbeat(MIN_HEARTBEAT - ms(1))
                .unwrap_err(),
            Argument::Heartbeat,
        ),
    ] {
        assert_eq!(blamed(&error), Some(argument), "{error}");
    }
    let bad_ttl = plain
        .fair_lock("x")
        .unwrap()
        .acquire(ms(0))
        .await
        .unwrap_err();
    assert_eq!(blamed(&bad_ttl), Some(Argument::Ttl));
    assert_eq!(raw.dbsize().await, 0);
    // Redlock: refused before any request (nothing listens on these ports).
    let nodes = (0..3)
        .map(|_| {
            redmutex::connection::connect_lazy(&format!(
                "redis://127.0.0.1:{}",
                testkit::free_port()
            ))
        })
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let error = Locker::redlock(nodes).unwrap().fair_lock("x").unwrap_err();
    assert_eq!(blamed(&error), Some(Argument::Nodes));
    assert!(error.to_string().contains("queue"), "{error}");
    // A waiter in the queue without a heartbeat (its entry lost): dropped, not a stuck
    // line.
    raw.run::<i64>(
        redis::cmd("ZADD")
            .arg("{lost}:queue")
            .arg(1)
            .arg("ghost-token"),
    )
    .await;
    let lost = plain.fair_lock("lost").unwrap();
    lost.acquire(ms(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
    // A queue key that holds something else: a typed error, nothing overwritten.
    raw.set("{foreign}:queue", "not a queue").await;
    let fair = plain.fair_lock("foreign").unwrap();
    let error = fair.acquire(ms(1_000)).await.unwrap_err();
    assert_eq!(blamed(&error), Some(Argument::Key), "{error}");
    assert!(
        fair.inspect().await.unwrap().is_none(),
        "free: nobody waits in a queue of another kind"
    );
    assert_eq!(raw.get("{foreign}:queue").await.unwrap(), b"not a queue");
    assert!(!raw.exists("foreign").await);
}

#[tokio::test]
async fn a_fair_guard_is_a_lock_fences_keep_alive_and_plain_locks_exclude_it() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let plain = own_locker(&server, false).await;
    let fair = plain.fair_lock("shared-key").unwrap();
    let first = fair.acquire(ms(10_000)).with_fence().await.unwrap();
    let fence = first.fence().await.unwrap();
    assert!(first.ttl().await.unwrap() > ms(9_000));
    // A plain acquire of the same key is excluded, and excludes a fair one in turn.
    assert!(plain
        .acquire("shared-key", ms(1_000))
        .await
        .unwrap_err()
        .is_not_obtained());
    first.release().await.unwrap();
    let plain_guard = plain.acquire("shared-key", ms(10_000)).await.unwrap();
    assert!(fair.acquire(ms(1_000)).await.unwrap_err().is_not_obtained());
    plain_guard.release().await.unwrap();
    // Fences grow; keep-alive holds past the TTL and the lease releases.
    let second = fair.acquire(ms(300)).metadata("host=a").await.unwrap();
    assert!(second.fence().await.unwrap() > fence);
    let info = fair.inspect().await.unwrap().expect("held");
    assert_eq!(info.holders[0].metadata.as_deref(), Some("host=a"));
    let lease = second.keep_alive().unwrap();
    tokio::time::sleep(ms(700)).await;
    assert!(raw.exists("shared-key").await, "kept alive past its TTL");
    lease.release().await.unwrap();
    // Dropped guards release.
    drop(fair.acquire(ms(10_000)).await.unwrap());
    assert!(raw.wait_until_gone("shared-key", ms(2_000)).await);
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

/// Each failed try tells a waiter its place: how many live waiters are ahead of it.
#[tokio::test]
async fn a_waiter_is_told_how_many_wait_ahead_of_it() {
    let server = RedisServer::spawn();
    let holder = own_locker(&server, false).await.fair_lock("ahead").unwrap();
    let held = holder.acquire(ms(10_000)).await.unwrap();
    let mut waiters = Vec::new();
    let mut places = Vec::new();
    for n in 0..3 {
        let fair = own_locker(&server, false).await.fair_lock("ahead").unwrap();
        let place = Arc::new(Mutex::new(None));
        let seen = place.clone();
        waiters.push(tokio::spawn(async move {
            let lock = fair
                .acquire(ms(10_000))
                .retry(retry::constant(ms(30)))
                .deadline(ms(8_000))
                .on_failed_try(move |t| *seen.lock().unwrap() = t.ahead)
                .await
                .unwrap();
            lock.release().await.unwrap();
        }));
        places.push(place);
        until_in_line(&holder, n + 1).await;
    }
    tokio::time::sleep(ms(100)).await;
    let now: Vec<Option<u32>> = places.iter().map(|p| *p.lock().unwrap()).collect();
    assert_eq!(now, [Some(0), Some(1), Some(2)]);
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
}

/// A fair waiter that last tried while the key was free but another's turn learned no TTL:
/// when that other took the key and died, its waiter tried only at its next heartbeat's
/// try (the simulator found a second of idle lock). A waiter that takes the key now tells
/// the next in line, which learns until when it is held and is first to try then.
#[tokio::test]
async fn the_next_in_line_tries_when_a_crashed_holders_key_runs_out() {
    let server = RedisServer::spawn();
    let heartbeat = ms(9_000); // tries every 3 s: far longer than the holder's key lasts
    let fair = |locker: Locker<MultiplexedConnection>| {
        locker
            .fair_lock("line")
            .unwrap()
            .with_heartbeat(heartbeat)
            .unwrap()
    };
    let (first, second) = (
        fair(own_locker(&server, true).await),
        fair(own_locker(&server, true).await),
    );
    let held = fair(own_locker(&server, false).await)
        .acquire(ms(60_000))
        .await
        .unwrap();
    let wait = |fair: FairLock<MultiplexedConnection>| async move {
        fair.acquire(ms(300))
            .retry(retry::constant(ms(10_000)))
            .deadline(ms(20_000))
            .await
    };
    let first_waits = tokio::spawn(wait(first.clone()));
    until_in_line(&first, 1).await;
    let second_waits = tokio::spawn(wait(second));
    until_in_line(&first, 2).await;
    held.release().await.unwrap();
    // The first in line holds for 300 ms and dies: never renewed, never released.
    let crashed = first_waits.await.unwrap().unwrap();
    let taken = Instant::now();
    let _token = crashed.detach();
    let next = second_waits.await.unwrap().unwrap();
    assert!(
        taken.elapsed() < ms(1_500),
        "the next in line got the key {:?} after its holder took it for 300 ms",
        taken.elapsed()
    );
    next.release().await.unwrap();
}
