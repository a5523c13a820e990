//! Wake-up on a cluster stays on the key's shard: releases and requests are announced on
//! shard channels in the key's slot (`SPUBLISH`), which the cluster bus does not carry to
//! every node, and each locker's subscriber follows the slot when it moves to another
//! master, by migration or failover. On a server without shard channels (Redis 6.2) the
//! same tests pass over `PUBLISH`, as the cluster bus carries it.

use std::future::IntoFuture;
use std::time::Duration;

use crate::cluster::{connect, subscriber};
use crate::common::{blamed, ms};
use redis::cluster_async::ClusterConnection;
use redmutex::{error::Argument, retry, Error, Lock, Locker, WakeUpSource, WakeUpState};
use testkit::RedisCluster;
use tokio::time::Instant;

/// Whether the cluster's servers have shard channels (Redis 7+, Valkey).
fn has_shard_channels(cluster: &RedisCluster) -> bool {
    // An unknown command's entry is a nil: `$-1` (6.2) or `*-1`.
    let info = cluster.nodes()[0].command(&["COMMAND", "INFO", "SPUBLISH"]);
    info.to_ascii_lowercase().contains("spublish")
}

/// A number from a reply's text: the integer after `prefix` (`INFO`'s `field:`), or 0.
fn after(text: &str, prefix: &str) -> u64 {
    (text.split(prefix).nth(1))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// How many times each node ran `command` (scripts' calls included).
fn calls(cluster: &RedisCluster, command: &str) -> Vec<u64> {
    let field = format!("cmdstat_{command}:calls=");
    (cluster.nodes().iter())
        .map(|node| match node.pid() {
            Some(_) => after(&node.command(&["INFO", "commandstats"]), &field),
            None => 0,
        })
        .collect()
}

/// `PUBLISH` messages the nodes sent each other over the cluster bus.
fn bus_publishes(cluster: &RedisCluster) -> u64 {
    (cluster.nodes().iter().filter(|node| node.pid().is_some()))
        .map(|node| {
            let info = node.command(&["CLUSTER", "INFO"]);
            after(&info, "cluster_stats_messages_publish_sent:")
        })
        .sum()
}

/// Subscribers of `channel`: on shard channels (on the key's master), and plain ones (on
/// any node).
fn subscribers(cluster: &RedisCluster, channel: &str) -> (u64, u64) {
    let (mut shard, mut plain) = (0, 0);
    for node in cluster.nodes().iter().filter(|node| node.pid().is_some()) {
        let count = |reply: String| after(&reply, &format!("{channel}\r\n:"));
        shard += count(node.command(&["PUBSUB", "SHARDNUMSUB", channel]));
        plain += count(node.command(&["PUBSUB", "NUMSUB", channel]));
    }
    (shard, plain)
}

async fn woken_locker(cluster: &RedisCluster) -> Locker<ClusterConnection> {
    Locker::cluster(connect(cluster).await)
        .with_wake_up([subscriber(cluster)])
        .unwrap()
}

/// Waits (up to 10 s) until `channel` has a subscriber: on a shard channel where the server
/// has them and the channel is one (`by_shard`).
pub(crate) async fn until_subscribed(cluster: &RedisCluster, channel: &str, by_shard: bool) {
    let until = Instant::now() + ms(10_000);
    loop {
        let (shard, plain) = subscribers(cluster, channel);
        match by_shard && has_shard_channels(cluster) {
            true if shard > 0 => return,
            false if plain > 0 => return,
            _ => {}
        }
        assert!(Instant::now() < until, "{channel}: never subscribed");
        tokio::time::sleep(ms(20)).await;
    }
}

/// A waiter on `key` that polls only every 30 s, so that a wait shorter than that was a
/// wake-up.
fn patient(
    locker: &Locker<ClusterConnection>,
    key: &str,
) -> tokio::task::JoinHandle<Result<Lock<ClusterConnection>, Error>> {
    tokio::spawn(
        locker
            .acquire(key, ms(10_000))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(25))
            .into_future(),
    )
}

/// Releases `held` and awaits `waiting`'s lock (then releases it): within `limit` of the
/// release, which only a wake-up achieves where the waiter polls far less often.
async fn woken_by_release(
    held: Lock<ClusterConnection>,
    waiting: tokio::task::JoinHandle<Result<Lock<ClusterConnection>, Error>>,
    limit: Duration,
    what: &str,
) {
    let released = Instant::now();
    held.release().await.unwrap();
    let lock = waiting.await.unwrap().unwrap();
    assert!(released.elapsed() < limit, "{what}: woken, not polled");
    lock.release().await.unwrap();
}

/// A waiter on `key` that polls every 100 ms, for a wake-up that is known not to work.
fn polling(
    locker: &Locker<ClusterConnection>,
    key: &str,
) -> tokio::task::JoinHandle<Result<Lock<ClusterConnection>, Error>> {
    tokio::spawn(
        locker
            .acquire(key, ms(10_000))
            .retry(retry::constant(ms(100)))
            .deadline(Duration::from_secs(10))
            .into_future(),
    )
}

/// Releases go on the key's shard channel: the key's master runs `SPUBLISH`, no node runs
/// `PUBLISH`, and the cluster bus carries no published message — for an untagged key (its
/// channel `{job}`) and a tagged one. A key with a `}` but no tag has no channel name in
/// its slot: it goes by `PUBLISH`, and is woken all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_announced_on_the_keys_shard_alone() {
    let cluster = RedisCluster::spawn();
    let sharded = has_shard_channels(&cluster);
    let (holder, waiter) = (woken_locker(&cluster).await, woken_locker(&cluster).await);
    for (key, channel, by_shard) in [
        ("job", "{job}", sharded),
        ("{tenant-3}:job", "{tenant-3}:job", sharded),
        ("odd}key", "odd}key", false),
    ] {
        let held = holder.acquire(key, ms(10_000)).await.unwrap();
        let waiting = patient(&waiter, key);
        until_subscribed(&cluster, channel, by_shard).await;
        let master = cluster.master_of(key);
        let (publish, spublish) = (calls(&cluster, "publish"), calls(&cluster, "spublish"));
        let bus = bus_publishes(&cluster);
        woken_by_release(held, waiting, ms(5_000), key).await;
        let (publish_after, spublish_after) =
            (calls(&cluster, "publish"), calls(&cluster, "spublish"));
        match by_shard {
            true => {
                assert!(spublish_after[master] > spublish[master], "{key}: SPUBLISH");
                assert_eq!(publish_after, publish, "{key}: no PUBLISH anywhere");
                assert_eq!(bus_publishes(&cluster), bus, "{key}: nothing on the bus");
            }
            false => {
                assert!(
                    publish_after.iter().sum::<u64>() > publish.iter().sum::<u64>(),
                    "{key}: PUBLISH"
                );
            }
        }
    }
}

/// A cluster locker's wake-up needs a cluster's source, and a cluster's source is for a
/// cluster locker: refused before anything is sent. The source speaks RESP3 whatever its
/// seed URLs say (shard channels need it): seeds that name RESP2 wake waiters all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_locker_wakes_up_through_a_cluster_source_over_resp3() {
    let cluster = RedisCluster::spawn();
    let node = redis::Client::open(cluster.urls()[0].as_str()).unwrap();
    let refused = Locker::cluster(connect(&cluster).await)
        .with_wake_up([node.clone()])
        .unwrap_err();
    assert_eq!(blamed(&refused), Some(Argument::Nodes), "{refused}");
    assert!(
        refused.to_string().contains("WakeUpSource::cluster"),
        "{refused}"
    );
    let single = node.get_multiplexed_async_connection().await.unwrap();
    let refused = Locker::new(single)
        .with_wake_up([subscriber(&cluster)])
        .unwrap_err();
    assert_eq!(blamed(&refused), Some(Argument::Nodes), "{refused}");

    let resp2_urls = cluster
        .urls()
        .into_iter()
        .map(|url| url + "/?protocol=resp2");
    let source = WakeUpSource::cluster(resp2_urls).unwrap();
    let (holder, waiter) = (
        woken_locker(&cluster).await,
        Locker::cluster(connect(&cluster).await)
            .with_wake_up([source])
            .unwrap(),
    );
    let held = holder.acquire("resp2", ms(10_000)).await.unwrap();
    let waiting = patient(&waiter, "resp2");
    until_subscribed(&cluster, "{resp2}", true).await;
    woken_by_release(held, waiting, ms(5_000), "resp2 seeds").await;
    assert!(matches!(waiter.wake_up_state(), WakeUpState::Working));
}

/// A master that stops answering (`CLIENT PAUSE ... ALL`) leaves its own keys' waiters
/// unheard, and no other: a key on another master is woken at once by its release while
/// the first master is still paused, and once that master answers again, its key's waiter
/// is subscribed again and woken too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_master_leaves_the_other_shards_wake_ups_alone() {
    let cluster = RedisCluster::spawn();
    let stalled_key = "stalled-a";
    let stalled = cluster.master_of(stalled_key);
    let healthy_key = (0..)
        .map(|n| format!("healthy-{n}"))
        .find(|key| cluster.master_of(key) != stalled)
        .unwrap();
    // Each key's holder has a connection of its own, so that a stalled request of one does
    // not hold up the other's release: what is measured is the waiter's subscriber.
    let (holds_stalled, holds_healthy) =
        (woken_locker(&cluster).await, woken_locker(&cluster).await);
    let waiter = woken_locker(&cluster).await;
    let held_stalled = holds_stalled
        .acquire(stalled_key, ms(60_000))
        .await
        .unwrap();
    let held_healthy = holds_healthy
        .acquire(&healthy_key, ms(60_000))
        .await
        .unwrap();
    let waiting_stalled = patient(&waiter, stalled_key);
    let waiting_healthy = patient(&waiter, &healthy_key);
    until_subscribed(&cluster, "{stalled-a}", true).await;
    until_subscribed(&cluster, &format!("{{{healthy_key}}}"), true).await;
    // (A pause that ends by itself: `CLIENT UNPAUSE` would wait behind it, as everything
    // else does.)
    let paused_at = Instant::now();
    let paused = cluster.nodes()[stalled].command(&["CLIENT", "PAUSE", "10000", "ALL"]);
    assert_eq!(paused, "+OK\r\n");
    // Long enough for the subscriber's health checks to find the paused master silent.
    tokio::time::sleep(ms(6_500)).await;
    assert!(!waiting_healthy.is_finished() && !waiting_stalled.is_finished());
    let released = Instant::now();
    held_healthy.release().await.unwrap();
    let lock = waiting_healthy.await.unwrap().unwrap();
    // Woken while the other master is still paused (for 3.5 s more), not after it.
    assert!(
        released.elapsed() < ms(2_000),
        "woken, not polled: {:?}",
        released.elapsed()
    );
    lock.release().await.unwrap();

    tokio::time::sleep_until(paused_at + ms(10_100)).await;
    until_subscribed(&cluster, "{stalled-a}", true).await;
    let released = Instant::now();
    held_stalled.release().await.unwrap();
    let lock = waiting_stalled.await.unwrap().unwrap();
    assert!(
        released.elapsed() < ms(5_000),
        "woken, not polled: {:?}",
        released.elapsed()
    );
    lock.release().await.unwrap();
}

/// The key's slot migrates to another master while a waiter waits: the old master drops
/// the shard channel's subscribers, the waiter's subscriber connects again and subscribes
/// on the new master, and the holder's release there wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_its_keys_slot_to_another_master() {
    let cluster = RedisCluster::spawn();
    let (holder, waiter) = (woken_locker(&cluster).await, woken_locker(&cluster).await);
    let key = "moving";
    let held = holder.acquire(key, ms(20_000)).await.unwrap();
    let waiting = patient(&waiter, key);
    until_subscribed(&cluster, "{moving}", true).await;
    let source = cluster.master_of(key);
    let target = (0..3).find(|m| *m != source).unwrap();
    move_slot(&cluster, key, source, target);
    assert_eq!(cluster.master_of(key), target);
    if has_shard_channels(&cluster) {
        let until = Instant::now() + ms(10_000);
        while after(
            &cluster.nodes()[target].command(&["PUBSUB", "SHARDNUMSUB", "{moving}"]),
            "{moving}\r\n:",
        ) == 0
        {
            assert!(Instant::now() < until, "never subscribed on the new master");
            tokio::time::sleep(ms(20)).await;
        }
    }
    woken_by_release(held, waiting, ms(5_000), key).await;
}

/// Moves `key`'s slot, with its keys, from master `source` to master `target`.
fn move_slot(cluster: &RedisCluster, key: &str, source: usize, target: usize) {
    let nodes = cluster.nodes();
    let id = |node: usize| {
        let reply = nodes[node].command(&["CLUSTER", "MYID"]);
        reply.split("\r\n").nth(1).unwrap().to_owned()
    };
    let slot = nodes[source].command(&["CLUSTER", "KEYSLOT", key])[1..]
        .trim()
        .to_owned();
    let (source_id, target_id) = (id(source), id(target));
    let ok = "+OK\r\n";
    let importing = ["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id];
    assert_eq!(nodes[target].command(&importing), ok);
    let migrating = ["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id];
    assert_eq!(nodes[source].command(&migrating), ok);
    let keys = nodes[source].command(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
    let keys: Vec<&str> = (keys.split("\r\n"))
        .filter(|line| !line.is_empty() && !line.starts_with(['*', '$']))
        .collect();
    let port = nodes[target].port().to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(keys.iter().copied());
    assert_eq!(nodes[source].command(&migrate), ok, "{keys:?}");
    for master in &nodes[..3] {
        let owner = ["CLUSTER", "SETSLOT", &slot, "NODE", &target_id];
        assert_eq!(master.command(&owner), ok);
    }
}

/// The key's master is killed while a waiter waits, and its replica takes over: the
/// waiter's subscriber connects again and subscribes on the promoted master; the wait ends
/// at once when the key is released there (or found free by the re-check that follows a
/// new subscription, had the lock not reached the replica), long before its 30 s poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_its_keys_slot_through_a_failover() {
    let cluster = RedisCluster::spawn();
    let (holder, waiter) = (woken_locker(&cluster).await, woken_locker(&cluster).await);
    let key = "failing-over";
    let held = holder.acquire(key, ms(30_000)).await.unwrap();
    let waiting = patient(&waiter, key);
    until_subscribed(&cluster, "{failing-over}", true).await;
    tokio::time::sleep(ms(300)).await; // the lock reaches the replica
    let master = cluster.master_of(key);
    cluster.nodes()[master].kill();
    cluster.wait_until_settled();
    let promoted = cluster.master_of(key);
    assert_ne!(promoted, master);
    let until = Instant::now() + ms(10_000);
    while !waiting.is_finished() {
        let (shard, plain) = subscribers(&cluster, "{failing-over}");
        if shard + plain > 0 {
            break;
        }
        assert!(Instant::now() < until, "never subscribed again");
        tokio::time::sleep(ms(20)).await;
    }
    let released = Instant::now();
    let _ = held.release().await;
    let lock = waiting.await.unwrap().unwrap();
    assert!(released.elapsed() < ms(5_000), "woken, not polled");
    lock.release().await.unwrap();
}

/// An ACL user with [`redmutex::check::acl_rule`], `+cluster|slots` (a cluster client reads the
/// slot map) and, where the cluster has shard channels, the three commands
/// docs/OPERATIONS.md adds for them: wake-up works. Without those three, it says it is
/// refused, and waiters get the lock by polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acl_rule_and_the_shard_commands_are_enough_for_wake_up() {
    let shard = "+spublish +ssubscribe +sunsubscribe";
    let rule = format!("{} +cluster|slots", redmutex::check::acl_rule("app:"));
    let full = format!("full on >pw {rule} {shard}");
    let bare = format!("bare on >pw {rule}");
    let probe = RedisCluster::spawn();
    let sharded = has_shard_channels(&probe);
    drop(probe);
    let mut users = testkit::acl_user(&bare);
    if sharded {
        users.extend(testkit::acl_user(&full));
    }
    let args: Vec<&str> = users.iter().map(String::as_str).collect();
    let cluster = RedisCluster::spawn_with(&args);
    let as_user = |user: &str| {
        (redis::cluster::ClusterClient::builder(cluster.urls()))
            .username(user)
            .password("pw")
            .connection_timeout(ms(1_000))
            .response_timeout(ms(1_000))
            .build()
            .unwrap()
    };
    let source_as = |user: &str| {
        let urls = (cluster.urls().into_iter())
            .map(|url| url.replacen("redis://", &format!("redis://{user}:pw@"), 1));
        WakeUpSource::cluster(urls).unwrap()
    };
    let user = if sharded { "full" } else { "bare" };
    let locker_of = |user: &'static str| {
        let (conn, subscriber) = (as_user(user), source_as(user));
        async move {
            let conn = conn.get_async_connection().await.unwrap();
            (Locker::cluster(conn).with_wake_up([subscriber]))
                .unwrap()
                .with_prefix("app:")
        }
    };
    let (holder, waiter) = (locker_of(user).await, locker_of(user).await);
    let held = holder.acquire("job", ms(10_000)).await.unwrap();
    let waiting = patient(&waiter, "job");
    until_subscribed(&cluster, "{app:job}", true).await;
    woken_by_release(held, waiting, ms(5_000), "acl user").await;
    assert!(matches!(waiter.wake_up_state(), WakeUpState::Working));
    if !sharded {
        return;
    }
    // The bare rule: refused, said so, and polled.
    let (holder, waiter) = (locker_of("bare").await, locker_of("bare").await);
    let held = holder.acquire("job", ms(10_000)).await.unwrap();
    let waiting = polling(&waiter, "job");
    let until = Instant::now() + ms(5_000);
    while !waiter.wake_up_state().is_permission_denied() {
        assert!(Instant::now() < until, "{:?}", waiter.wake_up_state());
        tokio::time::sleep(ms(20)).await;
    }
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

/// The blocking API over a cluster locker with wake-up: a thread waiting with a 30 s poll
/// gets the key within moments of another thread's release.
#[cfg(feature = "blocking")]
#[test]
fn a_blocking_cluster_locker_is_woken_on_the_keys_shard() {
    let cluster = RedisCluster::spawn();
    let blocking_locker = || {
        let (urls, subscriber) = (cluster.urls(), subscriber(&cluster));
        redmutex::blocking::Locker::build(move || async move {
            let client = redis::cluster::ClusterClient::new(urls).map_err(Error::from)?;
            let conn = client.get_async_connection().await.map_err(Error::from)?;
            Locker::cluster(conn).with_wake_up([subscriber])
        })
        .unwrap()
    };
    let (holder, waiter) = (blocking_locker(), blocking_locker());
    let held = holder.acquire("blocking-job", ms(10_000)).call().unwrap();
    let waiting = std::thread::spawn(move || {
        waiter
            .acquire("blocking-job", ms(10_000))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(25))
            .call()
    });
    let until = std::time::Instant::now() + ms(10_000);
    while subscribers(&cluster, "{blocking-job}") == (0, 0) {
        assert!(std::time::Instant::now() < until, "never subscribed");
        std::thread::sleep(ms(20));
    }
    let released = std::time::Instant::now();
    held.release().unwrap();
    let lock = waiting.join().unwrap().unwrap();
    assert!(released.elapsed() < ms(5_000), "woken, not polled");
    lock.release().unwrap();
}

/// Every permit of a semaphore is freed while its waiters' subscriber connection is cut:
/// once subscribed again, each waiter re-checks, and all of them get a permit at once —
/// not one, with the others left to their poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_freed_while_the_subscriber_reconnects_reach_every_waiter() {
    let cluster = RedisCluster::spawn();
    let (holder, waiter) = (woken_locker(&cluster).await, woken_locker(&cluster).await);
    let (held_by, waited_on) = (
        holder.semaphore("pool", 3).unwrap(),
        waiter.semaphore("pool", 3).unwrap(),
    );
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(held_by.acquire(1, ms(30_000)).await.unwrap());
    }
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            tokio::spawn(
                (waited_on.acquire(1, ms(30_000)))
                    .retry(retry::constant(Duration::from_secs(30)))
                    .deadline(Duration::from_secs(25))
                    .into_future(),
            )
        })
        .collect();
    until_subscribed(&cluster, "{pool}", true).await;
    tokio::time::sleep(ms(300)).await;
    let master = cluster.master_of("pool");
    cluster.nodes()[master].command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let released = Instant::now();
    for permit in held {
        permit.release().await.unwrap();
    }
    for waiter in waiting {
        let permit = waiter.await.unwrap().unwrap();
        assert!(
            released.elapsed() < ms(5_000),
            "a waiter was left to its poll"
        );
        permit.release().await.unwrap();
    }
}

/// A locker waits on thousands of keys when one of their slots moves to another master:
/// its subscriber follows (on shard channels, every waiter re-checks at once), and the
/// locker's own connection goes on answering through it — a probe every 500 ms answers in
/// time, and a lease it keeps alive with a 300 ms TTL is not lost — and a release
/// afterwards wakes its waiter at once. Then the holder drops its thousands of guards at
/// once and its own 300 ms lease is not lost behind those releases. Without a bound on the
/// locker's requests in flight, redis-rs's cluster connection stopped answering for tens
/// of seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locker_waiting_on_thousands_of_keys_answers_through_a_slot_move() {
    const KEYS: usize = 6_000;
    let cluster = RedisCluster::spawn();
    let holder = Locker::cluster(connect(&cluster).await);
    let waiter = woken_locker(&cluster).await;
    let key = |n: usize| format!("lapse-{n}");
    let mut held = Vec::with_capacity(KEYS);
    for n in 0..KEYS {
        held.push(holder.acquire(key(n), ms(120_000)).await.unwrap());
    }
    // A lease the waiting locker holds, kept alive every 100 ms or so: its renewals must
    // not wait behind the waiters' tries — their first ones, the re-checks once subscribed,
    // and those after the move. (Taken before them: a try of its own would queue behind
    // theirs, as tries do, and could outlast its 300 ms TTL.)
    let kept = waiter.acquire("kept", ms(300)).await.unwrap();
    let kept = kept.keep_alive().unwrap();
    let waiting: Vec<_> = (0..KEYS)
        .map(|n| {
            tokio::spawn(
                waiter
                    .acquire(key(n), ms(10_000))
                    .retry(retry::constant(Duration::from_secs(30)))
                    .deadline(Duration::from_secs(100))
                    .into_future(),
            )
        })
        .collect();
    let listing = match has_shard_channels(&cluster) {
        true => "SHARDCHANNELS",
        false => "CHANNELS",
    };
    let until = Instant::now() + ms(60_000);
    loop {
        let subscribed: u64 = (cluster.nodes()[..3].iter())
            .map(|node| {
                let count = node.command(&["PUBSUB", listing]);
                let count = count.split("\r\n").next().unwrap_or("*0");
                count.trim_start_matches('*').parse::<u64>().unwrap_or(0)
            })
            .sum();
        if subscribed >= KEYS as u64 && matches!(waiter.wake_up_state(), WakeUpState::Working) {
            break;
        }
        assert!(Instant::now() < until, "{subscribed} subscribed");
        tokio::time::sleep(ms(100)).await;
    }
    let source = cluster.master_of(&key(0));
    let target = (0..3).find(|m| *m != source).unwrap();
    move_slot(&cluster, &key(0), source, target);
    let moved = Instant::now();
    let mut probe = waiter.connection().clone();
    let mut late = Vec::new();
    while moved.elapsed() < ms(4_000) {
        let asked = Instant::now();
        let answer = tokio::time::timeout(ms(2_000), async {
            redis::cmd("PTTL")
                .arg(key(1))
                .query_async::<i64>(&mut probe)
                .await
        })
        .await;
        if !matches!(answer, Ok(Ok(_))) {
            late.push((moved.elapsed(), asked.elapsed(), format!("{answer:?}")));
        }
        tokio::time::sleep(ms(500)).await;
    }
    assert!(
        late.is_empty(),
        "probes unanswered after the move: {late:?}"
    );
    assert!(
        !kept.is_lost(),
        "the kept lease was lost during the re-checks"
    );
    kept.release().await.unwrap();
    let mut held = held.into_iter();
    let last = held.next_back().unwrap();
    let mut waiting = waiting.into_iter();
    let last_waiter = waiting.next_back().unwrap();
    woken_by_release(last, last_waiter, ms(2_000), "after the move").await;
    for waiter in waiting {
        waiter.abort();
    }
    // The holder drops its 5,999 guards at once, while it keeps a 300 ms lease alive: the
    // releases queue, the lease's renewals do not queue behind them.
    let holder_kept = holder.acquire("holder-kept", ms(300)).await.unwrap();
    let holder_kept = holder_kept.keep_alive().unwrap();
    tokio::time::sleep(ms(200)).await;
    drop(held);
    tokio::time::sleep(ms(1_500)).await;
    assert!(
        !holder_kept.is_lost(),
        "the holder's kept lease was lost behind its releases"
    );
    holder_kept.release().await.unwrap();
}
