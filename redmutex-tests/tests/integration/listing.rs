//! `Locker::list`: every lock under a prefix, of every kind, against real servers.

use crate::common;
use std::time::Duration;

use crate::common::{ms, multiplexed, Raw};
use redmutex::{limits::LIST_PAGE, state::ListedLock, state::LockKind, Locker};
use testkit::RedisServer;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn find<'a>(listed: &'a [ListedLock], key: &str) -> &'a ListedLock {
    (listed.iter())
        .find(|lock| lock.key == key.as_bytes())
        .unwrap_or_else(|| panic!("{key} not listed: {listed:?}"))
}

#[tokio::test]
async fn every_kind_is_listed_with_its_holders_waiters_and_fence() {
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await).with_prefix("app:");
    let other = Locker::new(multiplexed(&server).await).with_prefix("app:");
    let mut raw = Raw::new(&server).await;

    let lock = (locker.acquire("plain", secs(30)))
        .metadata("host=a pid=1")
        .with_fence()
        .await
        .unwrap();
    let fence = lock.fence().await.unwrap();
    let fair = locker.fair_lock("fair").unwrap();
    let fair_held = fair.acquire(secs(30)).await.unwrap();
    let fair_waiter = {
        let fair = other.fair_lock("fair").unwrap();
        tokio::spawn(async move {
            fair.acquire(secs(30))
                .retry(redmutex::retry::constant(Duration::from_millis(50)))
                .deadline(secs(5))
                .await
        })
    };
    let rw = locker.rw_lock("table").unwrap();
    let reader_a = rw.read(secs(30)).metadata("reader=a").await.unwrap();
    let reader_b = rw.read(secs(20)).metadata("reader=b").await.unwrap();
    let writer_waits = {
        let rw = other.rw_lock("table").unwrap();
        tokio::spawn(async move {
            rw.write(secs(30))
                .retry(redmutex::retry::constant(Duration::from_millis(50)))
                .deadline(secs(5))
                .await
        })
    };
    let written = (locker.rw_lock("doc").unwrap())
        .write(secs(30))
        .await
        .unwrap();
    let semaphore = locker.semaphore("pool", 3).unwrap();
    let permit = semaphore
        .acquire(2, secs(30))
        .metadata("worker=1")
        .await
        .unwrap();
    let leader = (locker.election("leader").unwrap())
        .campaign("node-7")
        .await
        .unwrap();
    raw.set("app:stranger", "not a lock").await;
    raw.set("elsewhere:plain", "outside the prefix").await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let listed = locker.list("*").unwrap().collect().await.unwrap();
    let keys: Vec<_> = listed.iter().map(|l| l.key_lossy().into_owned()).collect();
    assert_eq!(listed.len(), 7, "{keys:?}");

    let plain = find(&listed, "app:plain");
    assert_eq!(plain.kind, LockKind::Lock);
    assert_eq!(plain.fence, Some(fence));
    assert_eq!(plain.holder_count, 1);
    assert_eq!(plain.holders[0].metadata.as_deref(), Some("host=a pid=1"));
    assert!(plain.ttl.unwrap() > secs(25));
    assert!(!plain.awaited);

    let fair_listed = find(&listed, "app:fair");
    assert_eq!(fair_listed.kind, LockKind::FairLock);
    assert_eq!(fair_listed.waiters, Some(1));

    let table = find(&listed, "app:table");
    assert_eq!(table.kind, LockKind::Readers);
    assert_eq!(table.holder_count, 2);
    assert_eq!(table.waiters, Some(1), "the waiting writer's intent");
    let metadata: Vec<_> = (table.holders.iter())
        .map(|h| h.metadata.as_deref().unwrap())
        .collect();
    assert_eq!(
        metadata,
        ["reader=b", "reader=a"],
        "soonest to expire first"
    );
    assert!(table.holders[0].ttl.unwrap() <= secs(20));

    // A writer's key is a lock's, and excludes everyone as a lock does: it reads as one
    // (as a writer only while other writers wait in line).
    assert_eq!(find(&listed, "app:doc").kind, LockKind::Lock);
    let pool = find(&listed, "app:pool");
    assert_eq!(pool.kind, LockKind::Semaphore);
    assert_eq!(pool.permits, Some((2, 3)));
    assert_eq!(pool.holders[0].permits, Some(2));
    assert_eq!(pool.holders[0].metadata.as_deref(), Some("worker=1"));
    let leading = find(&listed, "app:leader");
    assert_eq!(leading.kind, LockKind::Lock);
    assert_eq!(leading.holders[0].metadata.as_deref(), Some("node-7"));
    assert_eq!(leading.fence, Some(leader.term()));
    let stranger = find(&listed, "app:stranger");
    assert_eq!(stranger.kind, LockKind::Foreign);
    assert!(stranger.holders.is_empty());
    // Companion keys exist, and are not listed as locks of their own.
    assert!(raw.exists("{app:plain}:fence").await);
    assert!(listed.iter().all(|l| !l.key.starts_with(b"{")));

    // One key, in one round trip, as the listing shows it.
    let described = locker.describe("table").await.unwrap().unwrap();
    assert_eq!(
        (described.kind, described.holder_count),
        (LockKind::Readers, 2)
    );
    assert_eq!(
        described.holders,
        table
            .holders
            .iter()
            .map(|h| {
                let mut h = h.clone();
                h.ttl = described
                    .holders
                    .iter()
                    .find(|d| d.metadata == h.metadata)
                    .unwrap()
                    .ttl;
                h
            })
            .collect::<Vec<_>>()
    );
    assert!(locker.describe("nothing").await.unwrap().is_none());
    assert!(locker.describe("").await.unwrap_err().is_invalid_argument());

    // A pattern narrows it; another prefix sees none of them.
    let narrowed = locker.list("ta*").unwrap().collect().await.unwrap();
    assert_eq!(narrowed.len(), 1);
    assert_eq!(narrowed[0].key, b"app:table");
    let elsewhere = Locker::new(multiplexed(&server).await).with_prefix("nothing-here:");
    assert!(elsewhere
        .list("*")
        .unwrap()
        .collect()
        .await
        .unwrap()
        .is_empty());

    lock.release().await.unwrap();
    fair_held.release().await.unwrap();
    fair_waiter.await.unwrap().unwrap().release().await.unwrap();
    reader_a.release().await.unwrap();
    reader_b.release().await.unwrap();
    writer_waits
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    written.release().await.unwrap();
    permit.release().await.unwrap();
    leader.resign().await.unwrap();
}

#[tokio::test]
async fn thousands_of_locks_are_listed_once_each_in_bounded_pages() {
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await).with_prefix("many:");
    let count = 3000;
    let mut tokens = Vec::with_capacity(count);
    for i in 0..count {
        let lock = locker.acquire(format!("job-{i}"), secs(60)).await.unwrap();
        tokens.push(lock.detach());
    }
    let mut listing = locker.list("*").unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut pages = 0;
    while let Some(page) = listing.next_page().await.unwrap() {
        assert!(page.len() <= LIST_PAGE);
        pages += 1;
        for lock in page {
            assert_eq!(lock.kind, LockKind::Lock);
            assert!(seen.insert(lock.key), "listed twice");
        }
    }
    assert_eq!(seen.len(), count);
    assert!(pages >= count / LIST_PAGE, "{pages} pages");
}

#[tokio::test]
async fn redlock_lists_a_key_where_one_holder_has_a_quorum_and_never_a_minoritys_leftover() {
    let servers = RedisServer::spawn_many(3);
    let locker = Locker::redlock(common::multiplexed_all(&servers).await).unwrap();
    let lock = locker
        .acquire("q:held", secs(30))
        .metadata("m")
        .await
        .unwrap();
    let fence = lock.fence().await.unwrap();
    // A leftover on node 0 (a holder that lost the others, a rival's failed try), listed
    // first among the nodes: the holder on nodes 1 and 2 is who holds the key.
    let node0 = common::locker(&servers[0]).await;
    let leftover = node0.acquire("q:split", secs(30)).metadata("stale");
    let leftover = leftover.await.unwrap();
    let split = locker.acquire("q:split", secs(30)).metadata("owner");
    let split = split.await.unwrap();
    // Alone on node 1: nobody holds it (the next acquire takes it).
    let _alone = (common::locker(&servers[1]).await)
        .acquire("q:alone", secs(30))
        .await
        .unwrap();
    Raw::new(&servers[1]).await.set("q:stray", "x").await;
    Raw::new(&servers[2]).await.set("q:stray", "x").await;

    let listed = locker.list("q:*").unwrap().collect().await.unwrap();
    let mut keys: Vec<_> = listed.iter().map(|l| l.key_lossy().into_owned()).collect();
    keys.sort();
    assert_eq!(keys, ["q:held", "q:split", "q:stray"], "{listed:#?}");
    let held = find(&listed, "q:held");
    assert_eq!(
        (held.kind, held.nodes, held.fence),
        (LockKind::Lock, 3, Some(fence))
    );
    assert_eq!(held.holders[0].metadata.as_deref(), Some("m"));
    let owned = find(&listed, "q:split");
    assert_eq!(owned.nodes, 2);
    assert_eq!(owned.holders[0].metadata.as_deref(), Some("owner"));
    let stray = find(&listed, "q:stray");
    assert_eq!((stray.kind, stray.nodes), (LockKind::Foreign, 2));
    let described = locker.describe("q:split").await.unwrap().expect("held");
    assert_eq!(described.holders[0].metadata.as_deref(), Some("owner"));
    assert_eq!(locker.describe("q:alone").await.unwrap(), None);

    // With node 2 gone, the leftover on node 0 and the silent node could be a quorum:
    // nobody can tell, and neither says "free".
    split.release().await.unwrap();
    assert_eq!(locker.describe("q:split").await.unwrap(), None);
    servers[2].kill();
    let unknown = locker.describe("q:split").await.unwrap_err();
    assert!(matches!(unknown, redmutex::Error::NoQuorum(_)), "{unknown}");
    let unknown = locker.list("q:*").unwrap().collect().await.unwrap_err();
    assert!(matches!(unknown, redmutex::Error::NoQuorum(_)), "{unknown}");
    // Its holder on nodes 0 and 1 is still told.
    let held = locker.describe("q:held").await.unwrap().expect("held");
    assert_eq!(held.nodes, 2);
    leftover.release().await.unwrap();
}

#[tokio::test]
async fn a_release_forced_at_once_says_what_it_took_and_the_holder_finds_out_at_its_renewal() {
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, false).await;
    let waiter = common::own_locker(&server, true).await;
    let operator = Locker::new(multiplexed(&server).await);
    let mut raw = Raw::new(&server).await;

    let lease = (holder.acquire("stuck", secs(3)))
        .metadata("host=a pid=7")
        .with_fence()
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    let fence = lease.fence().await.unwrap();
    let waiting = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let lock = waiter
            .acquire("stuck", secs(10))
            .retry(redmutex::retry::constant(secs(20)))
            .deadline(secs(8))
            .with_fence()
            .await
            .unwrap();
        (started.elapsed(), lock)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let was = operator.force_release_now("stuck").await.unwrap().unwrap();
    assert_eq!(was.kind, LockKind::Lock);
    assert_eq!(was.holders[0].metadata.as_deref(), Some("host=a pid=7"));
    assert_eq!(was.fence, Some(fence));
    assert!(was.awaited, "the waiter had marked it");
    // The waiter is woken by it, not by its 20 s poll, and its fence is greater.
    let (waited, lock) = tokio::time::timeout(secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(waited < secs(5), "{waited:?}");
    assert!(lock.fence().await.unwrap() > fence);
    // The old holder is told at its next renewal (a third of its TTL).
    let reason = tokio::time::timeout(secs(2), lease.lost()).await.unwrap();
    assert!(
        matches!(reason, redmutex::LostReason::NotHeld),
        "{reason:?}"
    );
    lock.release().await.unwrap();

    // Nothing there: None; foreign data: described, left alone.
    assert!(operator.force_release_now("stuck").await.unwrap().is_none());
    raw.set("theirs", "data").await;
    let foreign = operator.force_release_now("theirs").await.unwrap().unwrap();
    assert_eq!(foreign.kind, LockKind::Foreign);
    assert_eq!(raw.get("theirs").await.as_deref(), Some(&b"data"[..]));

    // A semaphore: every holder's permits, and its details, go.
    let semaphore = holder.semaphore("slots", 4).unwrap();
    let a = semaphore.acquire(1, secs(30)).metadata("a").await.unwrap();
    let b = semaphore.acquire(2, secs(30)).metadata("b").await.unwrap();
    let was = operator.force_release_now("slots").await.unwrap().unwrap();
    assert_eq!(
        (was.kind, was.holder_count, was.permits),
        (LockKind::Semaphore, 2, Some((3, 4)))
    );
    assert!(semaphore.inspect().await.unwrap().is_none());
    assert!(!raw.exists("{slots}:permits").await);
    assert!(a.release().await.unwrap_err().is_not_held());
    drop(b);

    // Readers of a read-write lock: all of them.
    let rw = holder.rw_lock("table").unwrap();
    let reader = rw.read(secs(30)).metadata("r1").await.unwrap();
    let was = operator.force_release_now("table").await.unwrap().unwrap();
    assert_eq!((was.kind, was.holder_count), (LockKind::Readers, 1));
    assert!(reader.release().await.unwrap_err().is_not_held());
    let writer = rw.write(secs(5)).await.unwrap();
    writer.release().await.unwrap();

    // Bad input is refused before any request.
    assert!(operator
        .force_release("")
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(operator
        .force_release("{x}:fence")
        .await
        .unwrap_err()
        .is_invalid_argument());
}

/// Any holder's key keeps a read-write lock's readers out — a fair lock's too, when both
/// are used on one name — so a forced release of it lets waiting readers in at once (no
/// writer waiting), as a writer's release would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_of_a_fair_holder_lets_waiting_readers_in() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let fair = common::own_locker(&server, true).await;
    let holder = fair
        .fair_lock("shared")
        .unwrap()
        .acquire(secs(30))
        .await
        .unwrap();
    let readers = common::own_locker(&server, true).await;
    let read = (readers.rw_lock("shared").unwrap().read(secs(30)))
        .retry(redmutex::retry::constant(secs(20)))
        .deadline(secs(30));
    let waiting = tokio::spawn(std::future::IntoFuture::into_future(read));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let operator = Locker::new(multiplexed(&server).await);
    let forced_at = std::time::Instant::now();
    assert!(operator
        .force_release_now("shared")
        .await
        .unwrap()
        .is_some());
    let reader = waiting.await.unwrap().expect("the reader gets in");
    let waited = forced_at.elapsed();
    assert!(
        waited < Duration::from_millis(1_000),
        "the reader got in {waited:?} after the forced release"
    );
    reader.release().await.unwrap();
    drop(holder);
    let until = std::time::Instant::now() + secs(3);
    while raw.dbsize().await != 0 {
        assert!(
            std::time::Instant::now() < until,
            "{:?}",
            raw.lock_keys().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Lockers with wake-up line up beside a lock or a semaphore (one place per process, see
/// `helpers.lua`): the listing counts those places as its waiters, and a place whose
/// heartbeat ended no longer counts.
#[tokio::test]
async fn a_lines_waiting_processes_are_counted_for_a_lock_and_a_semaphore() {
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, true).await;
    let lock = holder.acquire("job", secs(30)).await.unwrap();
    let semaphore = holder.semaphore("pool", 1).unwrap();
    let permit = semaphore.acquire(1, secs(30)).await.unwrap();
    let mut waiting = Vec::new();
    for _ in 0..2 {
        // Each a process of its own: its own locker, connection and subscriber.
        let locker = common::own_locker(&server, true).await;
        // Woken by the release; polling only as the fallback.
        let poll = || redmutex::retry::constant(secs(1));
        let job = (locker.acquire("job", secs(30)).retry(poll())).deadline(secs(2));
        waiting.push(tokio::spawn(async move { job.await.map(drop) }));
        let pool = locker.semaphore("pool", 1).unwrap();
        waiting.push(tokio::spawn(async move {
            let permit = pool.acquire(1, secs(30)).retry(poll()).deadline(secs(2));
            permit.await.map(drop)
        }));
    }
    // Both lockers' tries are in by now (their first try is at once).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let job = holder.describe("job").await.unwrap().unwrap();
    assert_eq!(
        (job.kind, job.waiters, job.awaited),
        (LockKind::Lock, Some(2), true)
    );
    let pool = holder.describe("pool").await.unwrap().unwrap();
    assert_eq!(
        (pool.kind, pool.waiters, pool.awaited),
        (LockKind::Semaphore, Some(2), true)
    );
    let listed = holder.list("*").unwrap().collect().await.unwrap();
    assert_eq!(find(&listed, "job").waiters, Some(2));
    assert_eq!(find(&listed, "pool").waiters, Some(2));
    // They give up (deadline), leaving the lines: nobody waits any more, whatever flag
    // the holder's value still carries.
    for waiter in waiting {
        assert!(waiter.await.unwrap().unwrap_err().is_not_obtained());
    }
    let job = holder.describe("job").await.unwrap().unwrap();
    assert_eq!((job.waiters, job.awaited), (Some(0), false));
    let pool = holder.describe("pool").await.unwrap().unwrap();
    assert!(!pool.awaited && pool.waiters.unwrap_or(0) == 0, "{pool:?}");
    lock.release().await.unwrap();
    permit.release().await.unwrap();
}

/// A forced release (lock-delay): the stuck holder's place is a tombstone until its TTL
/// ends — nobody else gets in meanwhile, a waiter of another process takes the lock as it
/// ends — and the holder's next renewal finds itself gone (lost, before its validity
/// ends). Forcing the tombstone again changes nothing; it has its TTL throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_keeps_everyone_out_until_the_holders_ttl_ends() {
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, false).await;
    let waiter = common::own_locker(&server, true).await;
    let operator = Locker::new(multiplexed(&server).await);
    let mut raw = Raw::new(&server).await;

    let lease = (holder.acquire("stuck", secs(3)))
        .metadata("host=a pid=7")
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    let waiting = tokio::spawn(async move {
        let lock = waiter
            .acquire("stuck", secs(10))
            // Polls only every 20 s: the tombstone's TTL, which it was told, wakes it.
            .retry(redmutex::retry::constant(secs(20)))
            .deadline(secs(15))
            .await
            .unwrap();
        (tokio::time::Instant::now(), lock)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let was = operator.force_release("stuck").await.unwrap().unwrap();
    let forced_at = tokio::time::Instant::now();
    let pttl = raw.pttl("stuck").await;
    assert_eq!((was.kind, was.forced), (LockKind::Lock, 0));
    assert_eq!(was.holders[0].metadata.as_deref(), Some("host=a pid=7"));
    assert!(pttl > 0 && pttl <= 3_000, "the holder's TTL kept: {pttl}");
    let tombstone = operator
        .describe("stuck")
        .await
        .unwrap()
        .expect("a tombstone");
    assert_eq!((tombstone.kind, tombstone.forced), (LockKind::Lock, 1));
    assert!(tombstone.holders[0].released_by_force);
    assert_eq!(
        tombstone.holders[0].metadata.as_deref(),
        Some("host=a pid=7")
    );
    assert!(operator.inspect("stuck").await.unwrap().held);
    // Forced again: the same tombstone, TTL and all.
    let again = operator.force_release("stuck").await.unwrap().unwrap();
    assert_eq!(again.forced, 1);
    assert!(raw.pttl("stuck").await <= pttl);
    // Nobody else, in any process, gets in while the holder may still believe it holds.
    let other = common::own_locker(&server, false).await;
    let tried = other
        .acquire("stuck", secs(1))
        .retry(redmutex::retry::none())
        .await
        .unwrap_err();
    assert!(tried.is_not_obtained(), "{tried}");
    // The holder is told at its next renewal, before its validity ends.
    let valid_until = lease.valid_until();
    let reason = tokio::time::timeout(secs(3), lease.lost()).await.unwrap();
    assert!(
        matches!(reason, redmutex::LostReason::NotHeld),
        "{reason:?}"
    );
    assert!(tokio::time::Instant::now() < valid_until);
    // The waiter takes it once the tombstone's TTL ran out — not before.
    let (taken_at, lock) = tokio::time::timeout(secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    let blocked = taken_at - forced_at;
    assert!(
        blocked + Duration::from_millis(20) >= Duration::from_millis(pttl as u64),
        "{blocked:?} < {pttl} ms"
    );
    assert!(
        blocked < Duration::from_millis(pttl as u64) + secs(2),
        "{blocked:?}"
    );
    lock.release().await.unwrap();
    assert_eq!(raw.dbsize().await, 0, "nothing left behind");
}

/// A semaphore's and readers' forced release: each holder's permits stay counted (a
/// tombstone each) until its TTL ends, so the limit holds and a writer stays out; each
/// holder finds itself gone; then the permits come back and nothing is left behind.
#[tokio::test]
async fn a_forced_release_keeps_a_semaphores_permits_and_readers_until_their_ttl_ends() {
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, false).await;
    let other = common::own_locker(&server, false).await;
    let operator = Locker::new(multiplexed(&server).await);
    let mut raw = Raw::new(&server).await;

    let semaphore = holder.semaphore("slots", 3).unwrap();
    let mut a = semaphore.acquire(1, ms(1_500)).metadata("a").await.unwrap();
    let b = semaphore.acquire(2, ms(1_500)).await.unwrap();
    let was = operator.force_release("slots").await.unwrap().unwrap();
    assert_eq!(
        (was.holder_count, was.permits, was.forced),
        (2, Some((3, 3)), 0)
    );
    let tombstones = operator
        .describe("slots")
        .await
        .unwrap()
        .expect("tombstones");
    assert_eq!(
        (
            tombstones.holder_count,
            tombstones.permits,
            tombstones.forced
        ),
        (2, Some((3, 3)), 2)
    );
    assert!(tombstones.holders.iter().all(|h| h.released_by_force));
    let mut metadata: Vec<_> = tombstones
        .holders
        .iter()
        .map(|h| h.metadata.clone())
        .collect();
    metadata.sort();
    assert_eq!(metadata, [None, Some("a".to_owned())]);
    let theirs = other.semaphore("slots", 3).unwrap();
    let tried = theirs
        .acquire(1, secs(5))
        .retry(redmutex::retry::none())
        .await
        .unwrap_err();
    assert!(tried.is_not_obtained(), "the limit holds: {tried}");
    assert!(a.refresh(secs(5)).await.unwrap_err().is_not_held());
    assert!(b.release().await.unwrap_err().is_not_held());
    // The released holder's release gave nothing back: still full.
    assert!(theirs
        .acquire(1, secs(5))
        .retry(redmutex::retry::none())
        .await
        .unwrap_err()
        .is_not_obtained());
    let permit = theirs
        .acquire(3, secs(5))
        .retry(redmutex::retry::constant(secs(20)))
        .deadline(secs(5))
        .await
        .unwrap();
    permit.release().await.unwrap();
    drop(a);

    let rw = holder.rw_lock("table").unwrap();
    let mut reader = rw.read(ms(1_500)).metadata("r1").await.unwrap();
    let was = operator.force_release("table").await.unwrap().unwrap();
    assert_eq!((was.kind, was.holder_count), (LockKind::Readers, 1));
    assert_eq!(operator.describe("table").await.unwrap().unwrap().forced, 1);
    let writers = other.rw_lock("table").unwrap();
    assert!(writers
        .write(secs(5))
        .retry(redmutex::retry::none())
        .await
        .unwrap_err()
        .is_not_obtained());
    assert!(reader.refresh(secs(5)).await.unwrap_err().is_not_held());
    let writer = writers
        .write(secs(5))
        .retry(redmutex::retry::constant(ms(50)))
        .deadline(secs(5))
        .await
        .unwrap();
    writer.release().await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert_eq!(raw.dbsize().await, 0, "{:?}", raw.lock_keys().await);
}

/// Redlock: the forced release keeps each node's TTL; nobody gets a quorum before the
/// holder's validity ended, and the holder finds itself gone.
#[tokio::test]
async fn a_forced_release_on_redlock_keeps_mutual_exclusion() {
    let servers = RedisServer::spawn_many(3);
    let holder = Locker::redlock(common::multiplexed_all(&servers).await).unwrap();
    let other = Locker::redlock(common::multiplexed_all(&servers).await).unwrap();
    let mut lock = holder
        .acquire("job", ms(1_500))
        .metadata("m")
        .await
        .unwrap();
    let was = other.force_release("job").await.unwrap().unwrap();
    assert_eq!(was.nodes, 3);
    let tombstone = other.describe("job").await.unwrap().expect("a tombstone");
    assert_eq!((tombstone.forced, tombstone.nodes), (1, 3));
    let tried = other
        .acquire("job", secs(5))
        .retry(redmutex::retry::none())
        .await
        .unwrap_err();
    assert!(tried.is_not_obtained(), "{tried}");
    assert!(lock.refresh(secs(5)).await.unwrap_err().is_not_held());
    let valid_until = lock.valid_until();
    let next = other
        .acquire("job", secs(5))
        .retry(redmutex::retry::constant(ms(50)))
        .deadline(secs(5))
        .await
        .unwrap();
    assert!(tokio::time::Instant::now() > valid_until);
    next.release().await.unwrap();
    drop(lock);
}

/// Redlock: a node that is down or frozen is left out of a listing while the others are
/// a quorum — a key held on a quorum is on one of them — and the listing ends in about
/// the node timeout rather than failing; without a quorum of nodes it says so.
#[tokio::test]
async fn a_redlock_listing_goes_on_without_a_node_while_a_quorum_answers() {
    let servers = RedisServer::spawn_many(3);
    let locker = Locker::redlock(common::multiplexed_all(&servers).await).unwrap();
    let held = locker
        .acquire("q:held", secs(60))
        .metadata("m")
        .await
        .unwrap();
    held.detach();
    let keys = |listed: Vec<ListedLock>| -> Vec<String> {
        listed.iter().map(|l| l.key_lossy().into_owned()).collect()
    };

    servers[1].pause();
    let started = tokio::time::Instant::now();
    let listed = locker.list("q:*").unwrap().collect().await.unwrap();
    assert_eq!(keys(listed), ["q:held"]);
    assert!(started.elapsed() < secs(3), "{:?}", started.elapsed());
    servers[1].resume();

    servers[2].kill();
    let listed = locker.list("q:*").unwrap().collect().await.unwrap();
    assert_eq!(keys(listed), ["q:held"]);
    servers[1].kill();
    let unknown = locker.list("q:*").unwrap().collect().await.unwrap_err();
    assert!(matches!(unknown, redmutex::Error::NoQuorum(_)), "{unknown}");
}

/// Redlock: a page of a listing that cannot be told (a leftover on one node, the node that
/// could complete its quorum frozen) fails whole, and the next call describes the same
/// page again — nothing of it is skipped — so a caller can wait for the node and retry.
#[tokio::test]
async fn a_redlock_listing_page_that_cannot_be_told_is_read_again_by_the_next_call() {
    let servers = RedisServer::spawn_many(3);
    let locker = Locker::redlock(common::multiplexed_all(&servers).await).unwrap();
    locker.acquire("q:held", secs(60)).await.unwrap().detach();
    let node0 = common::locker(&servers[0]).await;
    node0.acquire("q:split", secs(60)).await.unwrap().detach();
    servers[2].pause();
    let mut listing = locker.list("q:*").unwrap();
    let unknown = listing.next_page().await.unwrap_err();
    assert!(matches!(unknown, redmutex::Error::NoQuorum(_)), "{unknown}");
    assert!(
        unknown.is_transient(),
        "a frozen node may answer again: {unknown}"
    );
    servers[2].resume();
    let page = listing.next_page().await.unwrap().expect("the page again");
    let keys: Vec<_> = page.iter().map(|l| l.key_lossy().into_owned()).collect();
    // The leftover on node 0 alone holds nothing, now that node 2 says it is free there.
    assert_eq!(keys, ["q:held"], "{page:#?}");
    assert_eq!(listing.next_page().await.unwrap(), None);
}
