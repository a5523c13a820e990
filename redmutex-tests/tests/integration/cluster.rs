//! Redis Cluster: a real six-node cluster (three masters, three replicas) from the test
//! kit. Locks spread over every master with their fences in the same slot; multi-key locks
//! need one hash slot (checked before sending); keep-alive batches per slot and wake-up
//! work; ASK and MOVED during a slot migration are followed; a master killed while a lease
//! is kept alive leaves the lease held or reported lost, never silently lost.

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::time::Duration;

use crate::common::ms;
use redis::cluster_async::ClusterConnection;
use redmutex::{error::Argument, retry, Error, Locker};
use testkit::RedisCluster;

pub(crate) async fn connect(cluster: &RedisCluster) -> ClusterConnection {
    redis::cluster::ClusterClient::builder(cluster.urls())
        .connection_timeout(ms(1_000))
        .response_timeout(ms(1_000))
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

/// Where a cluster locker's wake-up subscribes: each key's master, found from the seeds.
pub(crate) fn subscriber(cluster: &RedisCluster) -> redmutex::WakeUpSource {
    redmutex::WakeUpSource::cluster(cluster.urls()).unwrap()
}

/// The value at `key` on node `node`, read directly (`None` when missing or not there);
/// `ASKING` first, so that a node importing the key's slot answers too.
fn get(cluster: &RedisCluster, node: usize, key: &str) -> Option<String> {
    let reply = cluster.nodes()[node]
        .commands(&[&["ASKING"], &["GET", key]])
        .pop()
        .unwrap();
    let (header, body) = reply.split_once("\r\n")?;
    header
        .starts_with('$')
        .then(|| body.trim_end().to_owned())
        .filter(|_| header != "$-1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_every_master_with_their_fences_beside_them() {
    let cluster = RedisCluster::spawn();
    let locker = Locker::cluster(connect(&cluster).await);
    assert!(locker.is_cluster());
    let mut masters = BTreeSet::new();
    for i in 0..30 {
        let key = format!("job-{i}");
        // Every other lock takes its fence with its keys, the others when asked.
        let lock = match i % 2 {
            0 => locker.acquire(&key, ms(10_000)).with_fence().await.unwrap(),
            _ => locker.acquire(&key, ms(10_000)).await.unwrap(),
        };
        let fence = lock.fence().await.unwrap();
        let master = cluster.master_of(&key);
        masters.insert(master);
        let stored = get(&cluster, master, &key).expect("on the slot's master");
        assert!(stored.starts_with(lock.token().as_str()));
        assert_eq!(
            get(&cluster, master, &format!("{{{key}}}:fence")),
            Some(fence.to_string())
        );
        let info = locker.inspect(&key).await.unwrap();
        assert!(info.held);
        assert_eq!(info.fence, Some(fence));
        lock.release().await.unwrap();
        assert_eq!(get(&cluster, master, &key), None);
    }
    assert_eq!(masters.len(), 3, "every master holds some locks");
}

#[tokio::test]
async fn multi_key_locks_need_one_hash_slot_checked_before_sending() {
    let cluster = RedisCluster::spawn();
    let locker = Locker::cluster(connect(&cluster).await).with_prefix("shop:");
    let calls_before = total_calls(&cluster);
    let error = locker
        .acquire_all(["payment", "stock"], ms(5_000))
        .await
        .unwrap_err();
    match &error {
        Error::InvalidArgument(invalid) => assert_eq!(invalid.argument, Argument::Keys),
        other => panic!("{other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("hash tag") && text.contains("shop:payment"),
        "{text}"
    );
    assert_eq!(total_calls(&cluster), calls_before, "nothing was sent");

    let lock = locker
        .acquire_all(["{order-7}:payment", "{order-7}:stock"], ms(5_000))
        .with_fence()
        .await
        .unwrap();
    let fence = lock.fence_if_taken().expect("taken with the keys");
    let master = cluster.master_of("shop:{order-7}:payment");
    assert!(get(&cluster, master, "shop:{order-7}:stock").is_some());
    assert_eq!(
        get(&cluster, master, "{order-7}:fence:shop:{order-7}:payment"),
        Some(fence.to_string())
    );
    // The token-based calls check the slot as well.
    let token = lock.token();
    let error = locker
        .release_with_token(["{order-7}:payment", "other"], &token)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    // Guarded writes run on the lock's node: their keys share its hash slot, or they are
    // refused before anything is sent.
    let mut writes = redmutex::Writes::new();
    writes.add(
        redis::cmd("SET").arg("shop:{order-7}:state").arg("paid"),
        ["shop:{order-7}:state"],
    );
    assert_eq!(
        lock.write_if_held(&writes).await.unwrap(),
        [redis::Value::Okay]
    );
    assert_eq!(
        get(&cluster, master, "shop:{order-7}:state").as_deref(),
        Some("paid")
    );
    writes.add(redis::cmd("SET").arg("shop:audit").arg("x"), ["shop:audit"]);
    let calls_before = total_calls(&cluster);
    match lock.write_if_held(&writes).await.unwrap_err() {
        Error::InvalidArgument(bad) => {
            assert_eq!(bad.argument, Argument::Writes);
            assert!(bad.reason.contains("shop:audit"), "{}", bad.reason);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(total_calls(&cluster), calls_before, "nothing was sent");
    lock.release().await.unwrap();
}

/// Lock commands (`SET`, `EVAL`, `EVALSHA`) run by the whole cluster so far.
fn total_calls(cluster: &RedisCluster) -> u64 {
    let mut calls = 0;
    for node in cluster.nodes() {
        let info = node.command(&["INFO", "commandstats"]);
        for line in info.lines() {
            let Some((name, stats)) = line.split_once(':') else {
                continue;
            };
            if ["cmdstat_set", "cmdstat_eval", "cmdstat_evalsha"].contains(&name) {
                calls += stats
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_and_wake_up_work_on_the_cluster() {
    let cluster = RedisCluster::spawn();
    let locker = Locker::cluster(connect(&cluster).await)
        .with_wake_up([subscriber(&cluster)])
        .unwrap();
    // Leases on keys in many slots on all masters: renewed in per-slot batches.
    let mut leases = Vec::new();
    for i in 0..24 {
        let lock = locker.acquire(format!("lease-{i}"), ms(600)).await.unwrap();
        leases.push(lock.keep_alive().unwrap());
    }
    tokio::time::sleep(ms(2_000)).await;
    for lease in &leases {
        assert!(!lease.is_lost(), "{:?}", lease.signal().reason());
        assert!(lease.renewals() >= 3, "{}", lease.renewals());
    }
    // A request to let go reaches the one holder asked, in its own slot's batch.
    let asked = locker.request_release("lease-7").await.unwrap();
    assert!(asked.is_some());
    tokio::time::sleep(ms(500)).await;
    for (i, lease) in leases.iter().enumerate() {
        assert_eq!(lease.is_release_requested(), i == 7, "lease-{i}");
        assert!(!lease.is_lost());
    }
    for lease in leases {
        lease.release().await.unwrap();
    }
    // With wake-up, heard at once, long before the next renewal of a 30 s lease: the
    // request is announced on the key's shard channel, subscribed on the key's master
    // (on Redis 6.2, without shard channels, on a plain channel).
    let long = (locker.acquire("long", ms(30_000)).await.unwrap())
        .keep_alive()
        .unwrap();
    crate::sharded::until_subscribed(&cluster, "{long}:~a", true).await;
    assert!(locker.request_release("long").await.unwrap().is_some());
    let heard = tokio::time::timeout(ms(1_000), long.release_requested()).await;
    assert!(heard.is_ok(), "heard only at the next renewal");
    long.release().await.unwrap();

    // A waiter polling only every 30 s is woken by the release.
    let holder = locker.acquire("woken", ms(10_000)).await.unwrap();
    let first = holder.fence().await.unwrap();
    let waiter = tokio::spawn(
        locker
            .acquire("woken", ms(10_000))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(20))
            .into_future(),
    );
    let until = tokio::time::Instant::now() + ms(5_000);
    while !locker.inspect("woken").await.unwrap().awaited {
        assert!(tokio::time::Instant::now() < until, "never marked");
        tokio::time::sleep(ms(10)).await;
    }
    let released = tokio::time::Instant::now();
    holder.release().await.unwrap();
    let lock = waiter.await.unwrap().unwrap();
    assert!(released.elapsed() < ms(3_000), "woken, not polled");
    assert!(lock.fence().await.unwrap() > first);
    lock.release().await.unwrap();
}

/// A slot migrates while the connection's slot map still says the old master: the
/// acquire of a new key is redirected with ASK during the migration and with MOVED after
/// it, and the lock lands on the new master. During the migration Redis refuses
/// multi-key requests on keys it does not have yet (`TRYAGAIN`), so a fenced acquire (key
/// and counter) gets a transient error then, and works once the slot has moved.
#[tokio::test]
async fn ask_and_moved_during_a_slot_migration_are_followed() {
    let cluster = RedisCluster::spawn();
    let locker = Locker::cluster(connect(&cluster).await);
    // Load the scripts (and the slot map) first.
    locker
        .acquire("warm", ms(5_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let key = "migrating";
    let source = cluster.master_of(key);
    let target = (0..3).find(|m| *m != source).unwrap();
    let id = |node: usize| {
        let reply = cluster.nodes()[node].command(&["CLUSTER", "MYID"]);
        reply.split("\r\n").nth(1).unwrap().to_owned()
    };
    let slot = cluster.nodes()[source].command(&["CLUSTER", "KEYSLOT", key])[1..]
        .trim()
        .to_owned();
    let (source_id, target_id) = (id(source), id(target));
    let ok = "+OK\r\n";
    assert_eq!(
        cluster.nodes()[target].command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]),
        ok
    );
    assert_eq!(
        cluster.nodes()[source].command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]),
        ok
    );
    // The key does not exist on the source: ASK sends the SET to the target.
    let lock = locker.acquire(key, ms(10_000)).await.unwrap();
    assert!(get(&cluster, target, key).is_some(), "taken on the target");
    assert!(get(&cluster, source, key).is_none());
    lock.release().await.unwrap();
    let error = locker
        .acquire(key, ms(10_000))
        .with_fence()
        .await
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(
        get(&cluster, target, key).is_none(),
        "nothing left by the refused try"
    );

    for node in 0..3 {
        let reply =
            cluster.nodes()[node].command(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
        assert_eq!(reply, ok);
    }
    // Now the source answers MOVED for the slot.
    let lock = locker.acquire(key, ms(10_000)).with_fence().await.unwrap();
    assert!(get(&cluster, target, key).is_some());
    let fence = lock.fence_if_taken().unwrap().to_string();
    let counter = format!("{{{key}}}:fence");
    assert_eq!(
        get(&cluster, target, &counter),
        Some(fence),
        "the counter lives on the new master"
    );
    lock.release().await.unwrap();
}

/// The master of a kept-alive lease is killed; its replica takes over. Afterwards the lease
/// is either still held — and then nobody else can take the lock — or reported lost; and
/// new locks work on the promoted master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_a_kept_alive_lease_never_leaves_it_silently_lost() {
    let cluster = RedisCluster::spawn();
    let locker = Locker::cluster(connect(&cluster).await);
    let rival = Locker::cluster(connect(&cluster).await);
    let key = "failover-job";
    let lease = locker
        .acquire(key, ms(6_000))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    // Let the lock reach the replica, then kill the master.
    tokio::time::sleep(ms(300)).await;
    let master = cluster.master_of(key);
    let renewals_before = lease.renewals();
    cluster.nodes()[master].kill();
    // For 12 s — the failover (node timeout 1 s) and then two TTLs — a rival tries every
    // 250 ms. Whenever it gets the lock, the lease must have been told, or be told by its
    // next renewal.
    let until = tokio::time::Instant::now() + Duration::from_secs(12);
    let mut taken_over = false;
    while tokio::time::Instant::now() < until && !taken_over {
        tokio::time::sleep(ms(250)).await;
        if let Ok(taken) = rival.acquire(key, ms(2_000)).await {
            let until_known = tokio::time::Instant::now() + ms(6_000);
            while !lease.is_lost() {
                assert!(
                    tokio::time::Instant::now() < until_known,
                    "another client holds the lock while the lease still says held"
                );
                tokio::time::sleep(ms(50)).await;
            }
            taken.release().await.unwrap();
            taken_over = true;
        }
    }
    if !lease.is_lost() {
        // Kept through the failover: then it is really held, on the promoted master.
        assert!(!taken_over);
        let error = rival.acquire(key, ms(2_000)).await.unwrap_err();
        assert!(error.is_not_obtained(), "{error}");
        assert!(
            lease.renewals() > renewals_before,
            "renewed after the failover"
        );
        let now_master = cluster.master_of(key);
        assert_ne!(now_master, master, "the replica took over");
        let stored = get(&cluster, now_master, key).expect("held on the new master");
        assert!(stored.starts_with(lease.token().as_str()));
        lease.release().await.unwrap();
    }
    // New acquisitions work on the promoted master.
    let lock = rival
        .acquire(key, ms(5_000))
        .retry(retry::constant(ms(200)))
        .deadline(Duration::from_secs(20))
        .await
        .unwrap();
    assert_ne!(
        cluster.master_of(key),
        master,
        "served by the promoted replica"
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_keeps_its_keys_in_one_slot_on_the_cluster() {
    let cluster = RedisCluster::spawn();
    let locker = Locker::cluster(connect(&cluster).await)
        .with_wake_up([subscriber(&cluster)])
        .unwrap();
    // Semaphores whose names hash to different slots (and one with a hash tag): each
    // one's holders, details and fence counter in its own slot, on whichever master.
    for name in ["jobs", "uploads", "exports", "{tenant-7}:imports"] {
        let s = locker.semaphore(name, 2).unwrap();
        let a = s.acquire(1, ms(600)).with_fence().await.unwrap();
        let b = s.acquire(1, ms(600)).await.unwrap().keep_alive().unwrap();
        assert!(b.fence().await.unwrap() > a.fence().await.unwrap());
        assert!(s.acquire(1, ms(600)).await.unwrap_err().is_not_obtained());
        tokio::time::sleep(ms(1_000)).await;
        assert!(!b.is_lost(), "{:?}", b.signal().reason());
        // a expired meanwhile: its permit came back.
        let c = s.acquire(1, ms(5_000)).await.unwrap();
        assert_eq!(crate::common::used(&s.inspect().await.unwrap()), 2);
        b.release().await.unwrap();
        c.release().await.unwrap();
        assert_eq!(crate::common::used(&s.inspect().await.unwrap()), 0);
    }
}

/// A fair lock on the cluster: its queue beside the key in its slot, waiters of separate
/// lockers served in arrival order and woken on their own channels over the cluster bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_serves_its_line_in_order_on_the_cluster() {
    let cluster = RedisCluster::spawn();
    for name in ["ledger", "{tenant-7}:ledger"] {
        let mut lockers = Vec::new();
        for _ in 0..3 {
            let locker = Locker::cluster(connect(&cluster).await)
                .with_wake_up([subscriber(&cluster)])
                .unwrap();
            lockers.push(
                locker
                    .fair_lock(name)
                    .unwrap()
                    .with_heartbeat(ms(60_000))
                    .unwrap(),
            );
        }
        let held = lockers[0].acquire(ms(10_000)).await.unwrap();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for (i, fair) in lockers.iter().enumerate().skip(1) {
            // Tries again only every 20 s: the release before its turn wakes it.
            let acquire = (fair.acquire(ms(10_000)))
                .retry(retry::constant(Duration::from_secs(30)))
                .deadline(Duration::from_secs(30));
            let order = order.clone();
            waiters.push(tokio::spawn(async move {
                let guard = acquire.await.unwrap();
                order.lock().unwrap().push(i);
                guard.release().await.unwrap();
            }));
            let until = tokio::time::Instant::now() + ms(5_000);
            while (crate::common::in_line(&lockers[0].inspect().await.unwrap()) as usize) < i {
                assert!(tokio::time::Instant::now() < until, "{name}: never in line");
                tokio::time::sleep(ms(10)).await;
            }
        }
        tokio::time::sleep(ms(300)).await; // subscribed by now
        let released = tokio::time::Instant::now();
        held.release().await.unwrap();
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert!(released.elapsed() < ms(5_000), "{name}: woken, not polled");
        assert_eq!(*order.lock().unwrap(), [1, 2], "{name}");
        assert_eq!(
            crate::common::in_line(&lockers[0].inspect().await.unwrap()),
            0
        );
    }
}

/// A read-write lock on the cluster: its readers, details and intents beside the key in
/// its slot; readers share, a waiting writer keeps new ones out and is woken over the
/// cluster bus by the last reader's release; downgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_works_on_the_cluster() {
    let cluster = RedisCluster::spawn();
    for name in ["catalog", "{tenant-7}:catalog"] {
        let mut locks = Vec::new();
        for _ in 0..3 {
            let locker = Locker::cluster(connect(&cluster).await)
                .with_wake_up([subscriber(&cluster)])
                .unwrap();
            let rw = locker.rw_lock(name).unwrap();
            locks.push(rw.with_heartbeat(ms(60_000)).unwrap());
        }
        let a = locks[0].read(ms(10_000)).await.unwrap();
        let b = locks[1]
            .read(ms(10_000))
            .await
            .unwrap()
            .keep_alive()
            .unwrap();
        let writer = tokio::spawn(
            (locks[2].write(ms(10_000)))
                .with_fence()
                .retry(retry::constant(Duration::from_secs(30)))
                .deadline(Duration::from_secs(30))
                .into_future(),
        );
        let until = tokio::time::Instant::now() + ms(5_000);
        while crate::common::in_line(&locks[0].inspect().await.unwrap()) == 0 {
            assert!(tokio::time::Instant::now() < until, "{name}: no intent");
            tokio::time::sleep(ms(10)).await;
        }
        let refused = locks[0].read(ms(10_000)).await.unwrap_err();
        assert!(refused.is_not_obtained(), "{name}: {refused}");
        tokio::time::sleep(ms(300)).await; // subscribed by now
        a.release().await.unwrap();
        let released = tokio::time::Instant::now();
        b.release().await.unwrap();
        let writer = writer.await.unwrap().unwrap();
        assert!(released.elapsed() < ms(5_000), "{name}: woken, not polled");
        let reader = writer.downgrade().await.unwrap();
        let other = locks[1].read(ms(10_000)).await.unwrap();
        assert_eq!(
            crate::common::readers(&locks[0].inspect().await.unwrap()),
            2
        );
        reader.release().await.unwrap();
        other.release().await.unwrap();
        assert!(locks[0].inspect().await.unwrap().is_none(), "{name}");
    }
}

/// An election on the cluster: one leader at a time, terms going up, observers told of the
/// change over the cluster bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_works_on_the_cluster() {
    use futures_util::StreamExt;
    let cluster = RedisCluster::spawn();
    let mut elections = Vec::new();
    for _ in 0..3 {
        let locker = Locker::cluster(connect(&cluster).await)
            .with_wake_up([subscriber(&cluster)])
            .unwrap();
        elections.push(locker.election("{svc}:leader").unwrap());
    }
    let mut changes = Box::pin(elections[2].observe());
    assert_eq!(changes.next().await.unwrap().unwrap(), None);
    let first = elections[0].campaign("a").await.unwrap();
    let second = elections[1].clone();
    let second = tokio::spawn(async move { second.campaign("b").await });
    tokio::time::sleep(ms(300)).await;
    assert!(!second.is_finished());
    let seen = changes.next().await.unwrap().unwrap().unwrap();
    assert_eq!((seen.value.as_str(), seen.term), ("a", Some(first.term())));
    let term = first.term();
    first.resign().await.unwrap();
    let second = second.await.unwrap().unwrap();
    assert!(second.term() > term);
    second.resign().await.unwrap();
    assert!(elections[2].leader().await.unwrap().is_none());
}

/// A master that does not know redmutex's scripts (restarted, failed over, or flushed) is
/// sent their source, and runs them, while another master does not answer: each
/// primitive's operations on a key elsewhere go on. (Loading them with `SCRIPT LOAD`, which
/// a cluster connection sends to every master, waited for the paused one and failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_a_master_does_not_know_run_there_while_another_master_is_paused() {
    let cluster = RedisCluster::spawn();
    let paused = cluster.master_of("paused");
    let key = (0..)
        .map(|n| format!("elsewhere-{n}"))
        .find(|key| cluster.master_of(key) != paused)
        .unwrap();
    let locker = Locker::cluster(connect(&cluster).await);
    for master in &cluster.nodes()[..3] {
        assert_eq!(master.command(&["SCRIPT", "FLUSH"]), "+OK\r\n");
    }
    let pause = cluster.nodes()[paused].command(&["CLIENT", "PAUSE", "6000", "ALL"]);
    assert_eq!(pause, "+OK\r\n");
    let paused_at = tokio::time::Instant::now();

    let mut lock = locker.acquire(&key, ms(10_000)).with_fence().await.unwrap();
    lock.refresh(ms(10_000)).await.unwrap();
    lock.release().await.unwrap();
    let pool = locker.semaphore(format!("{{{key}}}:pool"), 2).unwrap();
    pool.acquire(1, ms(10_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let fair = locker.fair_lock(format!("{{{key}}}:fair")).unwrap();
    fair.acquire(ms(10_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let rw = locker.rw_lock(format!("{{{key}}}:rw")).unwrap();
    rw.read(ms(10_000)).await.unwrap().release().await.unwrap();
    rw.write(ms(10_000)).await.unwrap().release().await.unwrap();
    assert!(!locker.inspect(&key).await.unwrap().held);
    assert!(
        paused_at.elapsed() < ms(5_000),
        "done while the other master was still paused"
    );
    tokio::time::sleep_until(paused_at + ms(6_100)).await;
}
