//! Mutual exclusion under contention, retry strategies, deadlines and cancellation.

use crate::common;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{ms, multiplexed, multiplexed_with_timeout, Raw};
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{Error, Locker, TryFailure};
use testkit::RedisServer;

/// 32 tasks over 4 connections contend for 3 keys; each critical section checks that
/// nobody else is inside. Thousands of acquisitions, zero overlaps allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_under_contention() {
    const TASKS: usize = 32;
    const KEYS: usize = 3;
    const PER_TASK: u64 = 100;

    let server = RedisServer::spawn();
    let mut lockers = Vec::new();
    for _ in 0..4 {
        lockers.push(Locker::new(multiplexed(&server).await));
    }
    let inside: Arc<Vec<AtomicU32>> = Arc::new((0..KEYS).map(|_| AtomicU32::new(0)).collect());
    let overlaps = Arc::new(AtomicU64::new(0));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let locker = lockers[t % lockers.len()].clone();
        let (inside, overlaps, acquisitions) =
            (inside.clone(), overlaps.clone(), acquisitions.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_TASK {
                let k = (t + i as usize) % KEYS;
                let lock = locker
                    .acquire(format!("mx:{k}"), Duration::from_secs(10))
                    .retry(retry::constant(ms(1)).jitter(Jitter::full()))
                    .deadline(Duration::from_secs(60))
                    .await
                    .expect("acquire within the deadline");
                if inside[k].fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside[k].fetch_sub(1, Ordering::SeqCst);
                acquisitions.fetch_add(1, Ordering::SeqCst);
                lock.release().await.expect("release what we hold");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(acquisitions.load(Ordering::SeqCst), TASKS as u64 * PER_TASK);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders were inside at once"
    );
    assert_eq!(
        Raw::new(&server).await.dbsize().await,
        0,
        "no key left behind"
    );
}

#[tokio::test]
async fn waiter_gets_the_lock_after_release() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let holder = locker
        .acquire("shared", Duration::from_secs(10))
        .await
        .unwrap();
    let released_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let released = released_at.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(200)).await;
        *released.lock().unwrap() = Some(Instant::now());
        holder.release().await.unwrap();
    });
    let started = Instant::now();
    let mut failed = 0;
    let lock = locker
        .acquire("shared", Duration::from_secs(10))
        .retry(retry::exponential(ms(20), ms(1000)))
        .on_failed_try(|_| failed += 1)
        .await
        .unwrap();
    let got_at = Instant::now();
    assert!(got_at >= released_at.lock().unwrap().expect("released first"));
    assert!(started.elapsed() >= ms(200));
    assert!(failed >= 2, "it had to wait: {failed} failed tries");
    lock.release().await.unwrap();
}

#[tokio::test]
async fn failed_tries_are_reported_with_numbers_and_delays() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await.with_prefix("p:");
    let _holder = locker
        .acquire("busy", Duration::from_secs(10))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let err = locker
        .acquire("busy", Duration::from_secs(10))
        .retry(retry::ticks([ms(10), ms(20), ms(30)]))
        .on_failed_try(|t| {
            let key = match t.reason {
                TryFailure::Held { key } => key.to_vec(),
                TryFailure::Redis(e) => panic!("unexpected {e}"),
                _ => unreachable!(),
            };
            seen.push((t.attempt, t.next_delay, key));
        })
        .await
        .unwrap_err();
    let expected: Vec<_> = [
        (1, Some(ms(10))),
        (2, Some(ms(20))),
        (3, Some(ms(30))),
        (4, None),
    ]
    .into_iter()
    .map(|(a, d)| (a, d, b"p:busy".to_vec()))
    .collect();
    assert_eq!(
        seen, expected,
        "ticks: three pauses, four tries, then give up"
    );
    match err {
        Error::NotObtained(n) => {
            assert_eq!(n.attempts, 4);
            assert!(n.last_error.is_none());
            assert!(n.elapsed >= ms(60));
        }
        e => panic!("{e}"),
    }
}

#[tokio::test]
async fn max_tries_limits_any_strategy() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let _holder = locker
        .acquire("busy", Duration::from_secs(10))
        .await
        .unwrap();
    for (strategy, tries) in [
        (
            Box::new(retry::immediate().max_tries(5)) as Box<dyn Iterator<Item = Duration> + Send>,
            5,
        ),
        (Box::new(retry::constant(ms(5)).max_tries(3)), 3),
        (
            Box::new(
                retry::exponential(ms(1), ms(8))
                    .jitter(Jitter::equal())
                    .max_tries(4),
            ),
            4,
        ),
        (Box::new(retry::linear(ms(1), ms(1)).max_tries(2)), 2),
        (Box::new(retry::none()), 1),
        (Box::new(vec![ms(1), ms(2)].into_iter()), 3),
    ] {
        match locker
            .acquire("busy", Duration::from_secs(10))
            .retry(strategy)
            .await
        {
            Err(Error::NotObtained(n)) => assert_eq!(n.attempts, tries),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn deadline_bounds_the_wait() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let _holder = locker
        .acquire("busy", Duration::from_secs(30))
        .await
        .unwrap();

    // An explicit deadline.
    let started = Instant::now();
    let err = locker
        .acquire("busy", Duration::from_secs(30))
        .retry(retry::constant(ms(20)))
        .deadline(ms(300))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_not_obtained());
    assert!(waited >= ms(300) && waited < ms(2000), "{waited:?}");

    // Default deadline: the TTL.
    let started = Instant::now();
    let err = locker
        .acquire("busy", ms(250))
        .retry(retry::constant(ms(20)))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_not_obtained());
    assert!(waited >= ms(250) && waited < ms(2000), "{waited:?}");
}

#[tokio::test]
async fn last_try_happens_at_the_deadline() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let holder = locker
        .acquire("busy", Duration::from_secs(30))
        .await
        .unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(ms(100)).await;
        holder.release().await.unwrap();
    });
    // The strategy's next pause (10 s) ends past the deadline: one more try at 400 ms.
    let started = Instant::now();
    let lock = locker
        .acquire("busy", Duration::from_secs(30))
        .retry(retry::constant(Duration::from_secs(10)))
        .deadline(ms(400))
        .await
        .unwrap();
    assert!(started.elapsed() >= ms(400) && started.elapsed() < ms(3000));
    lock.release().await.unwrap();
}

#[tokio::test]
async fn outer_timeout_cancels_mid_retry_and_leaves_nothing() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let holder = locker
        .acquire("busy", Duration::from_secs(30))
        .await
        .unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = attempts.clone();
    let result = tokio::time::timeout(
        ms(200),
        locker
            .acquire("busy", Duration::from_secs(30))
            .retry(retry::constant(ms(30)))
            .deadline(Duration::from_secs(60))
            .on_failed_try(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            })
            .into_future(),
    )
    .await;
    assert!(result.is_err(), "the outer timeout fires first");
    assert!(attempts.load(Ordering::SeqCst) >= 2, "it was retrying");
    assert_eq!(
        raw.get("busy").await.unwrap(),
        common::stored(holder.token())
    );
    holder.release().await.unwrap();
    tokio::time::sleep(ms(100)).await;
    assert_eq!(
        raw.dbsize().await,
        0,
        "the cancelled acquire left nothing behind"
    );
}

/// The hard case: the acquire is cancelled while its request is in flight to a frozen
/// server. When the server wakes up it executes the SET — and the background cleanup
/// queued behind it must delete the key again.
#[tokio::test]
async fn cancel_with_request_in_flight_cleans_up() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed_with_timeout(&server, Duration::from_secs(5)).await);
    server.pause();
    let result = tokio::time::timeout(
        ms(150),
        locker
            .acquire("inflight", Duration::from_secs(60))
            .into_future(),
    )
    .await;
    assert!(result.is_err(), "cancelled while the server is frozen");
    server.resume();
    // Give the queued SET time to land before looking; the cleanup runs right behind it.
    tokio::time::sleep(ms(300)).await;
    assert!(
        raw.wait_until_gone("inflight", ms(2000)).await,
        "the SET that landed after cancellation was not cleaned up"
    );
}

/// A try whose reply is lost (response timeout) may still have set the key. The retry must
/// recognise our own token instead of waiting for our own lock to expire.
#[tokio::test]
async fn retry_after_a_lost_reply_recognises_its_own_key() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed_with_timeout(&server, ms(200)).await);
    server.pause();
    let resumer = {
        let pid = server.pid().unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(ms(600)).await;
            pid
        })
    };
    let acquire = locker
        .acquire("lost-reply", Duration::from_secs(30))
        .retry(retry::constant(ms(100)))
        .deadline(Duration::from_secs(5));
    let handle = tokio::spawn(acquire.into_future());
    resumer.await.unwrap();
    server.resume();
    let lock = handle
        .await
        .unwrap()
        .expect("acquired after the server woke up");
    assert_eq!(
        raw.get("lost-reply").await.unwrap(),
        common::stored(lock.token())
    );
    assert!(lock.ttl().await.unwrap() > Duration::from_secs(25));
    lock.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0);
}

/// When a try may have set keys and the acquire then gives up, it removes them itself.
#[tokio::test]
async fn giving_up_after_ambiguous_tries_leaves_nothing() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed_with_timeout(&server, ms(100)).await);
    server.pause();
    let err = locker
        .acquire("ambiguous", Duration::from_secs(30))
        .retry(retry::constant(ms(50)))
        .deadline(ms(250))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Redis(ref e) if e.is_timeout()),
        "never saw the lock held: {err}"
    );
    assert!(err.is_transient());
    server.resume();
    // The SETs queued while frozen run now, and so do the releases queued behind them.
    tokio::time::sleep(ms(300)).await;
    assert!(
        raw.wait_until_gone("ambiguous", ms(1000)).await,
        "key left behind by an abandoned acquire"
    );
}

/// The retry strategy is the caller's iterator: a pause is drawn from it as a try fails,
/// not ahead of the tries, so an acquire that obtains on its n-th try has drawn n − 1.
#[tokio::test]
async fn pauses_are_drawn_from_the_strategy_only_as_tries_fail() {
    let server = RedisServer::spawn();
    let (holder, waiter) = (
        Locker::new(multiplexed(&server).await),
        Locker::new(multiplexed(&server).await),
    );
    let drawn = AtomicU32::new(0);
    let mut pauses = retry::constant(ms(20)).inspect(|_| {
        drawn.fetch_add(1, Ordering::SeqCst);
    });
    let held = holder.acquire("drawn", ms(10_000)).await.unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(ms(150)).await;
        held.release().await.unwrap();
    });
    let mut failed = 0;
    let lock = waiter
        .acquire("drawn", ms(10_000))
        .retry(&mut pauses)
        .on_failed_try(|_| failed += 1)
        .await
        .unwrap();
    release.await.unwrap();
    assert!(failed >= 2, "{failed} failed tries");
    assert_eq!(drawn.load(Ordering::SeqCst), failed);
    lock.release().await.unwrap();
}
