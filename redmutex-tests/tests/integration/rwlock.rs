//! The read-write lock against real servers: readers share, a writer excludes everyone; a
//! waiting writer keeps new readers out (and stops doing so when it gives up, is
//! cancelled or crashes); a crashed reader is dropped at its own expiry while live readers
//! renew; a plain lock of the same name excludes both; downgrade; fences; wake-up of every
//! reader at once; Redlock; foreign data; bad input; every key has a TTL and none is left.

use crate::common;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{blamed, ms, multiplexed, own_locker, Raw};
use redmutex::state::{ListedLock, LockKind};
use redmutex::{error::Argument, limits::MIN_HEARTBEAT, retry, Locker, LostReason};
use testkit::RedisServer;
use tokio::time::Instant;

/// How many writers wait for `rw`, held by a reader (it must be held: a free key has nobody
/// to wait for).
async fn writers_waiting<C: redmutex::connection::Connection>(rw: &redmutex::RwLock<C>) -> u32 {
    let seen = rw.inspect().await.unwrap().expect("held");
    seen.waiters.expect("counted")
}

/// A writer holds `seen`'s lock (a lock's key: with no other writer waiting it reads as a
/// lock's).
fn written(seen: &Option<ListedLock>) -> bool {
    (seen.as_ref()).is_some_and(|held| matches!(held.kind, LockKind::Writer | LockKind::Lock))
}

/// Waits (at most 3 s) until writers wait for `rw` (`waiting`), or until none does.
async fn until_writers_wait<C: redmutex::connection::Connection>(
    rw: &redmutex::RwLock<C>,
    waiting: bool,
) {
    let until = Instant::now() + ms(3_000);
    while (writers_waiting(rw).await > 0) != waiting {
        let what = if waiting {
            "no intent"
        } else {
            "an intent stayed"
        };
        assert!(Instant::now() < until, "{what}");
        tokio::time::sleep(ms(5)).await;
    }
}

/// A Redlock locker over `servers`.
async fn redlock(servers: &[RedisServer]) -> Locker<redis::aio::MultiplexedConnection> {
    let mut conns = Vec::new();
    for server in servers {
        conns.push(multiplexed(server).await);
    }
    Locker::redlock(conns).unwrap()
}

/// Every key but fence counters has a TTL.
async fn every_key_expires(raw: &mut Raw) {
    for key in raw.lock_keys().await {
        let key = String::from_utf8(key).unwrap();
        assert!(raw.pttl(&key).await > 0, "{key} has no TTL");
    }
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_everyone() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let (a, b) = (
        own_locker(&server, false).await,
        own_locker(&server, false).await,
    );
    let (rw_a, rw_b) = (a.rw_lock("doc").unwrap(), b.rw_lock("doc").unwrap());
    let first = rw_a.read(ms(10_000)).metadata("reader=a").await.unwrap();
    let second = rw_b.read(ms(20_000)).await.unwrap();
    every_key_expires(&mut raw).await;
    let info = rw_a.inspect().await.unwrap();
    assert!(
        !written(&info) && crate::common::readers(&info) == 2,
        "{info:?}"
    );
    let holders = info.unwrap().holders;
    assert_eq!(holders[0].metadata.as_deref(), Some("reader=a"));
    assert!(holders[1].ttl.unwrap() > ms(10_000), "{holders:?}");
    // Readers keep writers and plain locks out.
    assert!(rw_b.write(ms(5_000)).await.unwrap_err().is_not_obtained());
    assert!(b
        .acquire("doc", ms(5_000))
        .await
        .unwrap_err()
        .is_not_obtained());
    first.release().await.unwrap();
    assert!(rw_b.write(ms(5_000)).await.unwrap_err().is_not_obtained());
    second.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "the last reader leaves nothing");
    // A writer keeps readers, writers and plain locks out.
    let writer = rw_a.write(ms(10_000)).metadata("writer=a").await.unwrap();
    every_key_expires(&mut raw).await;
    assert!(rw_b.read(ms(5_000)).await.unwrap_err().is_not_obtained());
    assert!(rw_b.write(ms(5_000)).await.unwrap_err().is_not_obtained());
    assert!(b
        .acquire("doc", ms(5_000))
        .await
        .unwrap_err()
        .is_not_obtained());
    let info = rw_b.inspect().await.unwrap();
    assert!(
        written(&info) && crate::common::readers(&info) == 0,
        "{info:?}"
    );
    assert_eq!(
        info.unwrap().holders[0].metadata.as_deref(),
        Some("writer=a")
    );
    writer.release().await.unwrap();
    // A plain lock of the same name keeps readers and writers out.
    let plain = b.acquire("doc", ms(10_000)).await.unwrap();
    assert!(rw_a.read(ms(5_000)).await.unwrap_err().is_not_obtained());
    assert!(rw_a.write(ms(5_000)).await.unwrap_err().is_not_obtained());
    plain.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// A waiting writer keeps new readers out, and gets the lock when the readers before it
/// leave, even while new readers keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_readers_out_and_is_not_starved() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let readers = own_locker(&server, false).await;
    let writers = own_locker(&server, false).await;
    let rw = readers.rw_lock("feed").unwrap();
    let early = rw.read(ms(30_000)).await.unwrap();
    let writer = tokio::spawn(
        (writers.rw_lock("feed").unwrap().write(ms(10_000)))
            .retry(retry::constant(ms(20)))
            .deadline(ms(10_000))
            .into_future(),
    );
    until_writers_wait(&rw, true).await;
    // New readers are refused while the writer waits; the early one stays.
    let late = rw.read(ms(5_000)).await.unwrap_err();
    assert!(late.is_not_obtained(), "{late}");
    early.release().await.unwrap();
    let writer = writer.await.unwrap().unwrap();
    let info = rw.inspect().await.unwrap();
    assert!(
        written(&info) && crate::common::in_line(&info) == 0,
        "{info:?}"
    );
    writer.release().await.unwrap();
    rw.read(ms(5_000)).await.unwrap().release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// A writer that gives up, is cancelled, or stops trying (a crashed process) stops keeping
/// readers out: at once, or within its heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_leaves_lets_readers_in_again() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let holder = own_locker(&server, false).await;
    let other = own_locker(&server, false).await;
    let rw = holder.rw_lock("gate").unwrap();
    let reader = rw.read(ms(30_000)).await.unwrap();
    let writers = other
        .rw_lock("gate")
        .unwrap()
        .with_heartbeat(ms(300))
        .unwrap();
    // Gives up at its deadline: its intent goes with it.
    let gave_up = (writers.write(ms(5_000)))
        .retry(retry::constant(ms(20)))
        .deadline(ms(200))
        .await
        .unwrap_err();
    assert!(gave_up.is_not_obtained());
    assert_eq!(writers_waiting(&rw).await, 0);
    rw.read(ms(5_000)).await.unwrap().release().await.unwrap();
    // Cancelled: its intent goes in the background.
    let waiting = tokio::spawn(
        (writers.write(ms(5_000)))
            .retry(retry::constant(ms(20)))
            .deadline(ms(30_000))
            .into_future(),
    );
    until_writers_wait(&rw, true).await;
    waiting.abort();
    let _ = waiting.await;
    until_writers_wait(&rw, false).await;
    // Waiting with a strategy that pauses far longer than the heartbeat: the engine still
    // renews the intent at least every heartbeat / 3, so it stays while the writer lives.
    let patient = tokio::spawn(
        (writers.write(ms(5_000)))
            .retry(retry::constant(ms(60_000)))
            .deadline(ms(60_000))
            .into_future(),
    );
    until_writers_wait(&rw, true).await;
    tokio::time::sleep(ms(700)).await;
    assert_eq!(writers_waiting(&rw).await, 1);
    assert!(rw.read(ms(5_000)).await.unwrap_err().is_not_obtained());
    patient.abort();
    let _ = patient.await;
    // Crashed: an intent as a waiting writer's try leaves it, whose process then died
    // (nothing renews it, nothing ends it): readers are kept out for its heartbeat only.
    let mut conn = multiplexed(&server).await;
    let heartbeat_end = Raw::new(&server).await.server_ms().await + 300;
    let _: () = redis::cmd("ZADD")
        .arg("{gate}:intents")
        .arg(heartbeat_end)
        .arg("AAAAAAAAAAAAAAAAAAAAAA")
        .query_async(&mut conn)
        .await
        .unwrap();
    let refused = rw.read(ms(5_000)).await.unwrap_err();
    assert!(refused.is_not_obtained(), "{refused}");
    let started = Instant::now();
    let late = (rw.read(ms(5_000)))
        .retry(retry::constant(ms(20)))
        .deadline(ms(3_000))
        .await
        .unwrap();
    assert!(started.elapsed() < ms(1_000), "{:?}", started.elapsed());
    late.release().await.unwrap();
    reader.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// A reader that stops renewing (its process crashed) is dropped at its own expiry, while
/// another reader keeps renewing: a waiting writer gets the lock then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_reader_is_dropped_at_its_own_expiry_while_others_renew() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let rw = own_locker(&server, false).await.rw_lock("table").unwrap();
    let crashed = rw.read(ms(400)).await.unwrap();
    let _token = crashed.detach();
    let live = rw.read(ms(400)).await.unwrap().keep_alive().unwrap();
    let started = Instant::now();
    let writer = (rw.write(ms(5_000)))
        .retry(retry::constant(ms(50)))
        .deadline(ms(1_000))
        .await;
    // Not yet: the live reader renews; the writer waits for it.
    assert!(writer.is_err(), "the writer got in beside a live reader");
    assert!(!live.is_lost());
    let info = rw.inspect().await.unwrap();
    assert_eq!(
        crate::common::readers(&info),
        1,
        "the crashed reader stayed: {info:?}"
    );
    assert!(started.elapsed() >= ms(400));
    live.release().await.unwrap();
    let writer = rw.write(ms(5_000)).await.unwrap();
    writer.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// A writer downgrades to a reader atomically: other readers join, writers stay out.
#[tokio::test]
async fn a_writer_downgrades_to_a_reader_with_its_fence() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let rw = own_locker(&server, false).await.rw_lock("report").unwrap();
    let writer = rw
        .write(ms(10_000))
        .with_fence()
        .metadata("w")
        .await
        .unwrap();
    let fence = writer.fence().await.unwrap();
    let token = writer.token();
    let reader = writer.downgrade().await.unwrap();
    assert_eq!(reader.token(), token);
    assert_eq!(reader.fence_if_taken(), Some(fence));
    let info = rw.inspect().await.unwrap();
    assert!(
        !written(&info) && crate::common::readers(&info) == 1,
        "{info:?}"
    );
    assert_eq!(info.unwrap().holders[0].metadata.as_deref(), Some("w"));
    let other = rw.read(ms(5_000)).with_fence().await.unwrap();
    assert_eq!(
        other.fence().await.unwrap(),
        fence,
        "readers see the current fence"
    );
    assert!(rw.write(ms(5_000)).await.unwrap_err().is_not_obtained());
    let mut reader = reader;
    reader.refresh(ms(20_000)).await.unwrap();
    assert!(reader.ttl().await.unwrap() > ms(10_000));
    reader.release().await.unwrap();
    other.release().await.unwrap();
    let next = rw.write(ms(5_000)).with_fence().await.unwrap();
    assert!(next.fence().await.unwrap() > fence);
    next.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// A downgrade refused because the writer lost the key changes nothing.
#[tokio::test]
async fn a_lost_writer_cannot_downgrade() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let rw = own_locker(&server, false).await.rw_lock("lost").unwrap();
    let writer = rw.write(ms(10_000)).await.unwrap();
    let _: () = raw.run(redis::cmd("DEL").arg("lost")).await;
    let taken = rw.write(ms(10_000)).await.unwrap();
    let refused = writer.downgrade().await.unwrap_err();
    assert!(refused.is_not_held(), "{refused}");
    let info = rw.inspect().await.unwrap();
    assert!(
        written(&info) && crate::common::readers(&info) == 0,
        "{info:?}"
    );
    taken.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// With wake-up, a writer's release lets every waiting reader in at once, and the last
/// reader's release wakes a waiting writer — none of them polling (their poll is 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_every_waiting_reader_and_the_last_reader_wakes_a_writer() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let holder = own_locker(&server, true).await;
    let rw = holder.rw_lock("wake").unwrap();
    let writer = rw.write(ms(30_000)).await.unwrap();
    let inside = Arc::new(AtomicI64::new(0));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let rw = own_locker(&server, true).await.rw_lock("wake").unwrap();
        let inside = inside.clone();
        readers.push(tokio::spawn(async move {
            let reader = (rw.read(ms(30_000)))
                .retry(retry::constant(ms(20_000)))
                .deadline(ms(25_000))
                .await
                .unwrap();
            inside.fetch_add(1, Ordering::SeqCst);
            (reader, Instant::now())
        }));
    }
    // Every reader tried once, and subscribed.
    tokio::time::sleep(ms(500)).await;
    let released_at = Instant::now();
    writer.release().await.unwrap();
    let mut held = Vec::new();
    for reader in readers {
        let (reader, at) = reader.await.unwrap();
        assert!(at - released_at < ms(3_000), "a reader was not woken");
        held.push(reader);
    }
    assert_eq!(crate::common::readers(&rw.inspect().await.unwrap()), 3);
    // A writer waits for the readers; the last one's release wakes it.
    let waiting = tokio::spawn(
        (own_locker(&server, true).await.rw_lock("wake").unwrap())
            .with_heartbeat(ms(60_000))
            .unwrap()
            .write(ms(30_000))
            .retry(retry::constant(ms(20_000)))
            .deadline(ms(25_000))
            .into_future(),
    );
    tokio::time::sleep(ms(500)).await;
    let last = held.pop().unwrap();
    for reader in held {
        reader.release().await.unwrap();
    }
    let released_at = Instant::now();
    last.release().await.unwrap();
    let writer = waiting.await.unwrap().unwrap();
    // Its pauses are 20 s (a third of its heartbeat): woken, not polling.
    assert!(
        released_at.elapsed() < ms(3_000),
        "{:?}",
        released_at.elapsed()
    );
    writer.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// A reader held for a minimum hold leaves early: it stays until its hold ends, and a
/// waiting writer (which last saw it reading for 10 s) hears of its leaving, learns the
/// earlier end and gets the lock then — not at its poll, nor at the TTL it saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_leaving_before_its_minimum_hold_tells_a_waiting_writer_when_it_ends() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let rw = own_locker(&server, true).await.rw_lock("kept").unwrap();
    let asked = Instant::now();
    let reader = rw.read(ms(10_000)).min_hold(ms(800)).await.unwrap();
    let other = (own_locker(&server, true).await.rw_lock("kept").unwrap())
        .read(ms(10_000))
        .await
        .unwrap();
    let waiting = tokio::spawn(
        (own_locker(&server, true).await.rw_lock("kept").unwrap())
            .with_heartbeat(ms(60_000))
            .unwrap()
            .write(ms(30_000))
            .retry(retry::constant(ms(20_000)))
            .deadline(ms(8_000))
            .into_future(),
    );
    until_writers_wait(&rw, true).await;
    tokio::time::sleep(ms(300)).await; // subscribed, and re-checked
                                       // The other reader leaves: the kept one still reads, the writer waits on.
    other.release().await.unwrap();
    reader.release().await.unwrap();
    assert_eq!(crate::common::readers(&rw.inspect().await.unwrap()), 1);
    let writer = waiting.await.unwrap().expect("the writer gets the lock");
    let waited = asked.elapsed();
    assert!(
        waited >= ms(790),
        "in before the minimum hold ended: {waited:?}"
    );
    assert!(
        waited < ms(5_000),
        "not told of the earlier end: {waited:?}"
    );
    writer.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// Mixed use never leaves a reader and a writer (or a plain lock) in at once: many tasks
/// of separate lockers, counting who is inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_never_overlap() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let state = Arc::new(AtomicI64::new(0)); // readers inside, or -1 for a writer
    let until = Instant::now() + ms(2_000);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let rw = own_locker(&server, i % 2 == 0)
            .await
            .rw_lock("mix")
            .unwrap();
        let state = state.clone();
        tasks.push(tokio::spawn(async move {
            let mut turns = 0;
            while Instant::now() < until {
                if i % 3 == 0 {
                    let writer = (rw.write(ms(5_000)))
                        .retry(retry::constant(ms(5)))
                        .deadline(ms(3_000))
                        .await
                        .unwrap();
                    assert_eq!(
                        state.swap(-1, Ordering::SeqCst),
                        0,
                        "a writer beside others"
                    );
                    tokio::time::sleep(ms(3)).await;
                    assert_eq!(state.swap(0, Ordering::SeqCst), -1);
                    writer.release().await.unwrap();
                } else {
                    let reader = (rw.read(ms(5_000)))
                        .retry(retry::constant(ms(5)))
                        .deadline(ms(3_000))
                        .await
                        .unwrap();
                    let before = state.fetch_add(1, Ordering::SeqCst);
                    assert!(before >= 0, "a reader beside a writer");
                    tokio::time::sleep(ms(3)).await;
                    state.fetch_sub(1, Ordering::SeqCst);
                    reader.release().await.unwrap();
                }
                turns += 1;
            }
            turns
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap() > 0, "a task never got in");
    }
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn bad_input_and_foreign_data_get_typed_errors_and_leave_nothing() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = own_locker(&server, false).await;
    assert_eq!(
        blamed(&locker.rw_lock("").unwrap_err()),
        Some(Argument::Key)
    );
    assert_eq!(
        blamed(&locker.rw_lock("{x}:intents").unwrap_err()),
        Some(Argument::Key)
    );
    assert_eq!(
        blamed(&locker.rw_lock("{x}:readers").unwrap_err()),
        Some(Argument::Key)
    );
    let rw = locker.rw_lock("bad").unwrap();
    let short = rw.clone().with_heartbeat(MIN_HEARTBEAT / 2).unwrap_err();
    assert_eq!(blamed(&short), Some(Argument::Heartbeat));
    assert_eq!(
        blamed(&rw.read(Duration::ZERO).await.unwrap_err()),
        Some(Argument::Ttl)
    );
    assert_eq!(
        blamed(
            &(rw.write(ms(1_000)))
                .metadata("x".repeat(redmutex::limits::MAX_METADATA_LEN + 1))
                .await
                .unwrap_err()
        ),
        Some(Argument::Metadata)
    );
    assert_eq!(raw.dbsize().await, 0);
    // A semaphore of the same name, and a list: refused, untouched.
    let permit = locker
        .semaphore("bad", 2)
        .unwrap()
        .acquire(1, ms(5_000))
        .await
        .unwrap();
    for error in [
        rw.read(ms(1_000)).await.unwrap_err(),
        rw.write(ms(1_000)).await.unwrap_err(),
    ] {
        assert_eq!(blamed(&error), Some(Argument::Key), "{error}");
    }
    assert_eq!(
        rw.inspect().await.unwrap().unwrap().kind,
        LockKind::Semaphore
    );
    permit.release().await.unwrap();
    let _: () = raw
        .run(redis::cmd("RPUSH").arg("{bad}:intents").arg("x"))
        .await;
    assert_eq!(
        blamed(&rw.read(ms(1_000)).await.unwrap_err()),
        Some(Argument::Key)
    );
    let _: () = raw.run(redis::cmd("DEL").arg("{bad}:intents")).await;
    // And a reader's set refuses a semaphore in turn.
    let reader = rw.read(ms(5_000)).await.unwrap();
    let sem = locker
        .semaphore("bad", 2)
        .unwrap()
        .acquire(1, ms(1_000))
        .await;
    assert_eq!(blamed(&sem.unwrap_err()), Some(Argument::Key));
    reader.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// Over Redlock: readers share on a quorum, a writer excludes them, fences go up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_works_over_redlock() {
    let servers = RedisServer::spawn_many(3);
    let locker = redlock(&servers).await;
    let rw = locker.rw_lock("ledger").unwrap();
    let a = rw.read(ms(10_000)).with_fence().await.unwrap();
    let seen = a.fence().await.unwrap();
    let b = rw.read(ms(10_000)).await.unwrap();
    let info = rw.inspect().await.unwrap();
    assert_eq!(crate::common::readers(&info), 2, "{info:?}");
    assert!(rw.write(ms(5_000)).await.unwrap_err().is_not_obtained());
    // One node down: still a quorum.
    servers[2].kill();
    a.release().await.unwrap();
    b.release().await.unwrap();
    let writer = rw.write(ms(10_000)).with_fence().await.unwrap();
    assert!(writer.fence().await.unwrap() > seen);
    assert!(rw.read(ms(5_000)).await.unwrap_err().is_not_obtained());
    let reader = writer.downgrade().await.unwrap();
    assert_eq!(crate::common::readers(&rw.inspect().await.unwrap()), 1);
    reader.release().await.unwrap();
    for server in &servers[..2] {
        let mut raw = Raw::new(server).await;
        assert_eq!(raw.dbsize().await, 0);
    }
}

/// A reader's and a writer's kept-alive lease end as lost — never silently — when the server
/// restarts empty, and when it freezes (before their validity ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_lost_loudly_when_the_server_restarts_empty_or_freezes() {
    let server = RedisServer::spawn();
    let locker = Locker::new(common::manager(&server).await);
    let rw = locker.rw_lock("volatile").unwrap();
    let reader = rw.read(ms(900)).await.unwrap().keep_alive().unwrap();
    let other = locker.rw_lock("volatile-w").unwrap();
    let writer = other.write(ms(900)).await.unwrap().keep_alive().unwrap();
    server.restart();
    for lease_lost in [
        tokio::time::timeout(ms(3_000), reader.lost())
            .await
            .unwrap(),
        tokio::time::timeout(ms(3_000), writer.lost())
            .await
            .unwrap(),
    ] {
        assert!(
            matches!(
                lease_lost,
                LostReason::NotHeld | LostReason::Unreachable { .. }
            ),
            "{lease_lost}"
        );
    }

    let server = RedisServer::spawn();
    let locker = Locker::new(common::multiplexed_with_timeout(&server, ms(200)).await);
    let rw = locker.rw_lock("frozen").unwrap();
    let reader = rw.read(ms(900)).await.unwrap().keep_alive().unwrap();
    let valid_until = reader.valid_until();
    server.pause();
    let reason = tokio::time::timeout(ms(3_000), reader.lost())
        .await
        .unwrap();
    let lost_at = Instant::now();
    server.resume();
    assert!(matches!(reason, LostReason::Unreachable { .. }), "{reason}");
    assert!(lost_at <= reader.valid_until().max(valid_until) + ms(50));
}

/// A minimum hold: a reader or writer released early stays until it passes (nobody
/// renews or releases it then), and the keys still expire.
#[tokio::test]
async fn a_minimum_hold_keeps_readers_and_writers_until_it_passes() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let rw = own_locker(&server, false).await.rw_lock("period").unwrap();
    let reader = rw.read(ms(10_000)).min_hold(ms(400)).await.unwrap();
    reader.release().await.unwrap();
    assert_eq!(crate::common::readers(&rw.inspect().await.unwrap()), 1);
    assert!(rw.write(ms(1_000)).await.unwrap_err().is_not_obtained());
    every_key_expires(&mut raw).await;
    let writer = (rw.write(ms(10_000)))
        .min_hold(ms(400))
        .retry(retry::constant(ms(20)))
        .deadline(ms(2_000))
        .await
        .unwrap();
    let taken = Instant::now();
    writer.release().await.unwrap();
    assert!(rw.read(ms(1_000)).await.unwrap_err().is_not_obtained());
    every_key_expires(&mut raw).await;
    let reader = (rw.read(ms(1_000)))
        .retry(retry::constant(ms(20)))
        .deadline(ms(2_000))
        .await
        .unwrap();
    assert!(taken.elapsed() >= ms(390), "{:?}", taken.elapsed());
    reader.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// Over Redlock, a waiting writer's intent keeps readers out on a quorum, and it gets the
/// lock once the reader leaves; one that gives up takes its intent off every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_over_redlock_keeps_readers_out_and_leaves_cleanly() {
    let servers = RedisServer::spawn_many(3);
    let locker = redlock(&servers).await;
    let rw = locker.rw_lock("books").unwrap();
    let reader = rw.read(ms(10_000)).await.unwrap();
    let gave_up = (rw.write(ms(5_000)))
        .retry(retry::constant(ms(20)))
        .deadline(ms(200))
        .await
        .unwrap_err();
    assert!(gave_up.is_not_obtained(), "{gave_up}");
    assert_eq!(writers_waiting(&rw).await, 0);
    for server in &servers {
        let mut raw = Raw::new(server).await;
        assert!(!raw.exists("{books}:intents").await, "an intent stayed");
    }
    let writer = tokio::spawn(
        (rw.write(ms(5_000)))
            .retry(retry::constant(ms(20)))
            .deadline(ms(10_000))
            .into_future(),
    );
    until_writers_wait(&rw, true).await;
    assert!(rw.read(ms(5_000)).await.unwrap_err().is_not_obtained());
    reader.release().await.unwrap();
    let writer = writer.await.unwrap().unwrap();
    writer.release().await.unwrap();
    for server in &servers {
        let mut raw = Raw::new(server).await;
        assert_eq!(raw.dbsize().await, 0);
    }
}

/// Writers waiting in separate processes (lockers) line up: the last reader's release
/// hands the lock to the first, and each writer's release to the next — one process woken
/// per hand-off, in the order they came, none trying again but on its heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_writers_of_several_processes_are_handed_the_lock_in_line_one_at_a_time() {
    const LOCKERS: usize = 5;
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let reader = (own_locker(&server, true).await.rw_lock("herd").unwrap())
        .read(ms(30_000))
        .await
        .unwrap();
    // Per locker, when each of its tries failed; and the order they got the lock in.
    let tries: Arc<Vec<std::sync::Mutex<Vec<std::time::Instant>>>> =
        Arc::new((0..LOCKERS).map(|_| Default::default()).collect());
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut writers = Vec::new();
    for i in 0..LOCKERS {
        let rw = own_locker(&server, true).await.rw_lock("herd").unwrap();
        let (record, order) = (tries.clone(), order.clone());
        let write = (rw.write(ms(30_000)))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(ms(30_000))
            .on_failed_try(move |_| record[i].lock().unwrap().push(std::time::Instant::now()))
            .into_future();
        writers.push(tokio::spawn(async move {
            let writer = write.await.expect("each process gets its turn");
            order.lock().unwrap().push(i);
            tokio::time::sleep(ms(10)).await;
            writer.release().await.unwrap();
        }));
        // In line before the next one comes: the line's order is known.
        let until = Instant::now() + ms(5_000);
        while common::places_in_line(&server, "{herd}:line") < i as u64 + 1 {
            assert!(Instant::now() < until, "writer {i} never lined up");
            tokio::time::sleep(ms(20)).await;
        }
    }
    tokio::time::sleep(ms(100)).await;
    let released_at = std::time::Instant::now();
    reader.release().await.unwrap();
    for writer in writers {
        writer.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..LOCKERS).collect::<Vec<_>>());
    common::assert_tries_only_on_heartbeat(&tries, released_at);
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

/// The lock handed to a process that died while first in line (its place made by hand,
/// with a live heartbeat) waits for it a moment only: the writer behind it gets the lock
/// within the dead one's heartbeat, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_dead_process_falls_through_to_the_next_writer() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let rw = own_locker(&server, true).await.rw_lock("gone").unwrap();
    let held = rw.write(ms(30_000)).await.unwrap();
    // First in line: a locker that will never try again (its process was killed).
    let now = raw.server_micros().await;
    let ends = now / 1000 + redmutex::limits::DEFAULT_HEARTBEAT.as_millis() as u64;
    raw.run::<i64>(
        redis::cmd("ZADD")
            .arg("{gone}:line")
            .arg(now)
            .arg("AAAAAAAAAAAAAAAAAAAAAA")
            .arg(-(ends as i64))
            .arg(common::beat_of("AAAAAAAAAAAAAAAAAAAAAA")),
    )
    .await;
    let behind = own_locker(&server, true).await.rw_lock("gone").unwrap();
    let waiter = tokio::spawn(
        (behind.write(ms(30_000)))
            .retry(retry::constant(Duration::from_secs(20)))
            .deadline(ms(30_000))
            .into_future(),
    );
    let until = Instant::now() + ms(5_000);
    while common::places_in_line(&server, "{gone}:line") < 2 {
        assert!(Instant::now() < until, "the writer never lined up");
        tokio::time::sleep(ms(20)).await;
    }
    let released_at = Instant::now();
    held.release().await.unwrap();
    let writer = (waiter.await.unwrap()).expect("the next in line gets the lock");
    let waited = released_at.elapsed();
    assert!(
        waited < redmutex::limits::DEFAULT_HEARTBEAT,
        "the next in line waited {waited:?} for a lock handed to a dead process"
    );
    writer.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}
