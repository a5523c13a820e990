//! `Locker::list`: every lock under a prefix, of every kind, against real servers.

mod common;

use std::time::Duration;

use common::{multiplexed, Raw};
use redmutex::{ListedLock, LockKind, Locker, LIST_PAGE};
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
async fn redlock_lists_a_key_found_on_any_node_once() {
    let servers = RedisServer::spawn_many(3);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed(server).await);
    }
    let locker = Locker::redlock(conns).unwrap();
    let lock = locker
        .acquire("q:held", secs(30))
        .metadata("m")
        .await
        .unwrap();
    let fence = lock.fence().await.unwrap();
    Raw::new(&servers[1]).await.set("q:stray", "x").await;

    let listed = locker.list("q:*").unwrap().collect().await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:#?}");
    let held = find(&listed, "q:held");
    assert_eq!(
        (held.kind, held.nodes, held.fence),
        (LockKind::Lock, 3, Some(fence))
    );
    assert_eq!(held.holders[0].metadata.as_deref(), Some("m"));
    let stray = find(&listed, "q:stray");
    assert_eq!((stray.kind, stray.nodes), (LockKind::Foreign, 1));
    lock.release().await.unwrap();
}
