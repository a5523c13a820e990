//! Redlock over five independent test-kit nodes: quorum, validity, undo after failure,
//! faults (killed, paused, slow nodes), keep-alive, and the restart hazard.

use crate::common;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{every_node_empties, every_node_holds, ms, nodes_hold};
use redis::aio::ConnectionManager;
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{
    error::Argument, error::NodeError, Error, KeepAlive, Locker, LostReason, QuorumSettings,
};
use testkit::{Proxy, RedisServer};
use tokio::time::Instant;

const NODES: usize = 5;

/// A node timeout that a loaded two-core test machine meets even on a first request that
/// must also connect; tests of the timeout itself set their own.
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// A Redlock locker over `urls`, with connections that may be down at first.
fn redlock_over<S: AsRef<str>>(urls: &[S]) -> Locker<ConnectionManager> {
    let conns = urls
        .iter()
        .map(|url| redmutex::connection::connect_lazy(url.as_ref()).unwrap());
    Locker::redlock(conns)
        .unwrap()
        .with_quorum_settings(QuorumSettings::new().node_timeout(NODE_TIMEOUT))
}

fn redlock(servers: &[RedisServer]) -> Locker<ConnectionManager> {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    redlock_over(&urls)
}

/// The value at `key` on one node, read without the code under test.
fn get(server: &RedisServer, key: &str) -> Option<String> {
    let reply = server.command(&["GET", key]);
    if reply.starts_with("$-1") {
        return None;
    }
    let (_, value) = reply.split_once("\r\n").expect("bulk reply");
    Some(value.trim_end_matches("\r\n").to_string())
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.command(&["PTTL", key]);
    reply.trim_start_matches(':').trim_end().parse().unwrap()
}

/// Keys left on one node, fence counters aside (they stay by design).
fn dbsize(server: &RedisServer) -> u64 {
    common::lock_key_count(server)
}

/// Running nodes where `key` holds this token.
fn holding(servers: &[RedisServer], key: &str, token: &redmutex::Token) -> Vec<usize> {
    servers
        .iter()
        .enumerate()
        .filter(|(_, s)| s.pid().is_some())
        .filter(|(_, s)| get(s, key).is_some_and(|v| v.starts_with(token.as_str())))
        .map(|(i, _)| i)
        .collect()
}

#[tokio::test]
async fn a_lock_is_on_every_node_with_validity_and_is_released_everywhere() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers).with_prefix("app:");
    assert_eq!(locker.nodes().len(), NODES);
    let ttl = ms(10_000);
    let started = Instant::now();
    let mut lock = locker
        .acquire_all(["a", "b"], ttl)
        .metadata("worker=7")
        .await
        .unwrap();
    let drift = default_drift(ttl);
    // Valid until send time + ttl − drift: never longer, and only the round trip shorter.
    assert!(lock.valid_until() >= started + ttl - drift);
    assert!(lock.remaining_validity() <= ttl - drift);
    assert!(lock.remaining_validity() > ttl - drift - ms(500));
    let left = lock.ttl().await.unwrap();
    assert!(left > ms(9000) && left <= ttl - drift, "{left:?}");
    for key in ["app:a", "app:b"] {
        assert_eq!(holding(&servers, key, &lock.token()), [0, 1, 2, 3, 4]);
    }
    for server in &servers {
        assert!((9000..=10_000).contains(&pttl(server, "app:a")));
    }

    let info = locker.inspect("a").await.unwrap();
    assert!(info.held);
    assert_eq!(info.metadata.as_deref(), Some("worker=7"));
    assert!(info.ttl.unwrap() > ms(9000));
    assert_eq!(info.nodes.len(), NODES);
    assert!(info.nodes.iter().all(|n| n.info.as_ref().unwrap().held));

    lock.refresh(ms(20_000)).await.unwrap();
    assert!(lock.remaining_validity() > ms(19_000));
    for server in &servers {
        assert!((19_000..=20_000).contains(&pttl(server, "app:b")));
    }
    lock.release().await.unwrap();
    every_node_empties(&servers).await;
    assert!(!locker.inspect("a").await.unwrap().held);
}

/// The one-key lock's quorum paths send one command built for every node: a plain `SET`
/// to take it, an `EVALSHA` of the release script to release it. Nodes whose script cache
/// was emptied (a restart, a `SCRIPT FLUSH`) get the script loaded and the release run
/// again; nodes that hold the key for someone else are neither taken nor touched.
#[tokio::test]
async fn one_command_for_every_node_takes_and_releases_and_reloads_a_flushed_script() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    // Warm: every node has the release script.
    locker
        .acquire("warm", ms(10_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Two nodes hold the key for someone else: the other three are a quorum.
    for server in &servers[..2] {
        assert!(server
            .command(&["SET", "k", "someone", "PX", "10000"])
            .starts_with("+OK"));
    }
    let lock = locker.acquire("k", ms(10_000)).await.unwrap();
    assert_eq!(holding(&servers, "k", &lock.token()), [2, 3, 4]);
    for server in &servers[2..4] {
        assert!(server.command(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    }
    lock.release().await.unwrap();
    for server in &servers[2..] {
        assert_eq!(get(server, "k"), None);
    }
    for server in &servers[..2] {
        assert_eq!(get(server, "k").as_deref(), Some("someone"));
    }
}

#[tokio::test]
async fn two_of_five_nodes_down_acquire_refresh_keep_alive_and_release_work() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    servers[1].kill();
    servers[3].kill();

    let mut lock = locker.acquire("job", ms(900)).await.unwrap();
    assert_eq!(holding(&servers, "job", &lock.token()), [0, 2, 4]);
    lock.refresh(ms(900)).await.unwrap();
    assert!(lock.ttl().await.unwrap() > ms(800));

    let lease = lock.keep_alive().unwrap();
    tokio::time::sleep(ms(2000)).await;
    assert!(!lease.is_lost(), "{:?}", lease.signal().reason());
    assert!(lease.renewals() >= 4, "{} renewals", lease.renewals());
    let token = lease.token();
    assert_eq!(holding(&servers, "job", &token), [0, 2, 4]);

    lease.release().await.unwrap();
    for live in [0, 2, 4] {
        assert_eq!(dbsize(&servers[live]), 0);
    }
    // Another owner can take it at once.
    locker
        .acquire("job", ms(900))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn three_of_five_down_is_a_typed_no_quorum_within_the_deadline_leaving_nothing() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    for down in [0, 2, 3] {
        servers[down].kill();
    }
    let mut tries = 0;
    let started = Instant::now();
    let err = locker
        .acquire("job", ms(2000))
        .retry(retry::constant(ms(50)))
        .deadline(ms(600))
        .on_failed_try(|t| {
            tries += 1;
            assert!(matches!(t.reason, redmutex::TryFailure::NoQuorum(f) if f.agreed == 2));
        })
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed < ms(600 + 400), "gave up after {elapsed:?}");
    assert!(tries >= 3, "{tries} tries");
    assert!(err.is_transient());
    let Error::NoQuorum(failure) = &err else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert_eq!((failure.agreed, failure.needed, failure.nodes), (2, 3, 5));
    assert_eq!(failure.unreachable(), 3);
    assert_eq!(failure.held(), 0);
    let failed: Vec<usize> = failure.failures.iter().map(|f| f.node).collect();
    assert_eq!(failed, [0, 2, 3]);
    let text = err.to_string();
    assert!(text.contains("2 of 5 nodes agreed, 3 needed"), "{text}");
    // Every failed try was undone on the nodes that had agreed.
    assert_eq!(dbsize(&servers[1]), 0);
    assert_eq!(dbsize(&servers[4]), 0);
}

#[tokio::test]
async fn an_outage_with_a_stale_key_is_no_quorum_not_held_elsewhere() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    servers[0].command(&["SET", "job", "stale", "PX", "60000"]);
    for server in &servers[1..] {
        server.kill();
    }
    let err = locker.acquire("job", ms(1000)).await.unwrap_err();
    let Error::NoQuorum(failure) = &err else {
        panic!("an outage reported as {err:?}");
    };
    assert_eq!((failure.held(), failure.unreachable()), (1, 4));
}

#[tokio::test]
async fn a_minimum_validity_refuses_short_leases_and_leaves_nothing() {
    let servers = RedisServer::spawn_many(NODES);
    // TTL 1 s leaves at most 1000 − 12 (drift) = 988 ms: never 995.
    let strict = redlock(&servers).with_quorum_settings(
        QuorumSettings::new()
            .node_timeout(NODE_TIMEOUT)
            .min_validity(ms(995)),
    );
    let err = strict.acquire("job", ms(1000)).await.unwrap_err();
    let Error::NoQuorum(failure) = &err else {
        panic!("{err:?}")
    };
    assert!(failure.too_late, "{failure}");
    // Decided when a quorum took it: the nodes heard by then.
    assert!((3..=NODES).contains(&failure.agreed), "{failure}");
    every_node_empties(&servers).await;
    // A longer TTL meets it.
    let lock = strict.acquire("job", ms(2000)).await.unwrap();
    assert!(lock.remaining_validity() >= ms(995) - ms(50));
    lock.release().await.unwrap();
}

#[tokio::test]
async fn held_on_a_quorum_elsewhere_is_not_obtained_and_the_minority_is_undone() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    // Another owner holds nodes 0..3: a quorum.
    for server in &servers[..3] {
        server.command(&["SET", "job", "someone-else", "PX", "60000"]);
    }
    let err = locker
        .acquire("job", ms(5000))
        .retry(retry::constant(ms(30)).max_tries(2))
        .await
        .unwrap_err();
    assert!(err.is_not_obtained(), "{err:?}");
    let Error::NotObtained(details) = &err else {
        unreachable!()
    };
    let failure = details.no_quorum.as_ref().expect("node details");
    assert_eq!(
        (failure.agreed, failure.held(), failure.unreachable()),
        (2, 3, 0)
    );
    assert!(failure
        .failures
        .iter()
        .all(|f| f.error == NodeError::Held && f.node < 3));
    assert_eq!(dbsize(&servers[3]), 0, "the minority it got was released");
    assert_eq!(dbsize(&servers[4]), 0);
    assert_eq!(get(&servers[0], "job").as_deref(), Some("someone-else"));
}

#[tokio::test]
async fn a_paused_node_costs_one_node_timeout_not_more() {
    let servers = RedisServer::spawn_many(NODES);
    let timeout = ms(100);
    let locker =
        redlock(&servers).with_quorum_settings(QuorumSettings::new().node_timeout(timeout));
    // Connect every node before the pause, so that the pause hits an open connection.
    locker
        .acquire("warm", ms(5000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    servers[2].pause();
    let started = Instant::now();
    let lock = locker.acquire("job", ms(10_000)).await.unwrap();
    let took = started.elapsed();
    // The connection's own response timeout is 500 ms: waiting for it would show.
    assert!(took < timeout + ms(250), "took {took:?}");
    let awake: Vec<usize> = [0, 1, 3, 4]
        .into_iter()
        .filter(|&i| get(&servers[i], "job").is_some_and(|v| v.starts_with(lock.token().as_str())))
        .collect();
    assert_eq!(awake, [0, 1, 3, 4]);
    let token = lock.token();
    let released = Instant::now();
    lock.release().await.unwrap();
    assert!(released.elapsed() < timeout + ms(250));
    servers[2].resume();
    // The paused node runs the queued acquire when it wakes, then the background release.
    let mut left = true;
    for _ in 0..100 {
        left = !holding(&servers, "job", &token).is_empty();
        if !left {
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    assert!(!left, "the paused node kept the key after it woke");
}

/// The nodes of `on` that hold `key` for `token` (without asking the others, which may be
/// paused).
fn holding_on(
    servers: &[RedisServer],
    on: &[usize],
    key: &str,
    token: &redmutex::Token,
) -> Vec<usize> {
    (on.iter().copied())
        .filter(|&i| get(&servers[i], key).is_some_and(|v| v.starts_with(token.as_str())))
        .collect()
}

/// A new process's first lock, released at once, over connections still being set up: a
/// request is written only once its connection is up, by whichever task is polled first,
/// so a quorum does not decide without a node this locker has never heard from (the
/// acquire's late request could go behind its release and stay until its TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_lockers_first_lock_released_at_once_leaves_nothing_on_any_node() {
    let servers = RedisServer::spawn_many(NODES);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    for round in 0..50 {
        let locker = Locker::redlock(
            urls.iter()
                .map(|url| redmutex::connection::connect_lazy(url).unwrap()),
        )
        .unwrap();
        let lock = locker
            .acquire(format!("job{round}"), ms(20_000))
            .await
            .unwrap();
        lock.release().await.unwrap();
    }
    every_node_empties(&servers).await;
}

#[tokio::test]
async fn a_frozen_minority_costs_an_acquire_and_a_release_nothing_and_is_cleaned_when_it_wakes() {
    let servers = RedisServer::spawn_many(NODES);
    let node_timeout = ms(3000);
    let settings = (QuorumSettings::new().node_timeout(node_timeout)).wait_for_every_node(false);
    let locker = redlock(&servers).with_quorum_settings(settings);
    // Connect every node and load the scripts everywhere first.
    locker
        .acquire("warm", ms(10_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Node 2 lost its scripts (as a restart that kept its data would), and two nodes freeze.
    servers[2].command(&["SCRIPT", "FLUSH"]);
    servers[1].pause();
    servers[2].pause();
    let started = Instant::now();
    let lock = locker.acquire("job", ms(10_000)).await.unwrap();
    let token = lock.token();
    assert_eq!(holding_on(&servers, &[0, 3, 4], "job", &token), [0, 3, 4]);
    lock.release().await.unwrap();
    let took = started.elapsed();
    // Waiting for the frozen nodes would take a node timeout (3 s) for each call.
    assert!(took < node_timeout / 2, "took {took:?}");
    assert!(holding_on(&servers, &[0, 3, 4], "job", &token).is_empty());
    tokio::time::sleep(ms(300)).await;
    servers[1].resume();
    servers[2].resume();
    // The frozen nodes run the acquire they were sent when they wake, then the release
    // that followed it — node 2 with the script sent whole — long before the TTL.
    every_node_empties(&servers).await;
}

/// A connection that holds each `SET` back for a while before sending it: a slow node as
/// far as the caller can tell.
#[derive(Clone)]
struct HeldBackSets {
    inner: ConnectionManager,
    delay: Duration,
}

impl redis::aio::ConnectionLike for HeldBackSets {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let is_set = matches!(cmd.args_iter().next(), Some(redis::Arg::Simple(name)) if name.eq_ignore_ascii_case(b"SET"));
        Box::pin(async move {
            if is_set {
                tokio::time::sleep(self.delay).await;
            }
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test]
async fn a_release_at_once_goes_behind_its_acquire_on_slow_nodes_still_connecting() {
    let servers = RedisServer::spawn_many(NODES);
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.addr())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    proxies[0].set_latency(ms(30));
    proxies[1].set_latency(ms(30));
    // Lockers whose connections are still being set up: on nodes 0 and 1 the acquire is
    // still out when the guard goes, by an explicit release and by a drop.
    for key in ["released", "dropped"] {
        let quorum = QuorumSettings::new().node_timeout(NODE_TIMEOUT);
        let locker = redlock_over(&urls).with_quorum_settings(quorum.wait_for_every_node(false));
        let lock = locker.acquire(key, ms(10_000)).await.unwrap();
        match key {
            "released" => lock.release().await.unwrap(),
            _ => drop(lock),
        }
    }
    // The slow nodes are sent both acquires all the same (a lock is on every node it can
    // reach, not only on the quorum that decided)...
    let set_calls = |server: &RedisServer| {
        let stats = server.command(&["INFO", "commandstats"]);
        (stats.split("cmdstat_set:calls=").nth(1))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let both_sent = async {
        while !servers[..2].iter().all(|server| set_calls(server) == 2) {
            tokio::time::sleep(ms(10)).await;
        }
    };
    tokio::time::timeout(ms(3000), both_sent).await.unwrap();
    // ... and each release there went behind its SET: nothing is left anywhere.
    every_node_empties(&servers).await;
}

#[tokio::test]
async fn waiting_for_every_node_hands_out_a_lock_every_node_has() {
    let servers = RedisServer::spawn_many(NODES);
    let conns = servers
        .iter()
        .enumerate()
        .map(|(node, server)| HeldBackSets {
            inner: redmutex::connection::connect_lazy(&server.url()).unwrap(),
            delay: ms(if node < 2 { 100 } else { 0 }),
        });
    let settings = QuorumSettings::new()
        .node_timeout(ms(1000))
        .wait_for_every_node(true);
    let locker = Locker::redlock(conns)
        .unwrap()
        .with_quorum_settings(settings);
    let lock = locker.acquire("job", ms(10_000)).await.unwrap();
    let token = lock.detach();
    // The token may leave the process now: every node has the lock already.
    assert_eq!(holding(&servers, "job", &token), [0, 1, 2, 3, 4]);
    let other = redlock(&servers);
    other.release_with_token(["job"], &token).await.unwrap();
    every_node_empties(&servers).await;
}

#[tokio::test]
async fn latency_on_two_nodes_is_tolerated_and_latency_past_the_ttl_never_yields_a_lock() {
    let servers = RedisServer::spawn_many(NODES);
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.addr())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let locker = redlock_over(&urls);
    let rival = redlock_over(&urls);
    proxies[0].set_latency(ms(20));
    proxies[1].set_latency(ms(20));

    let lock = locker.acquire("job", ms(2000)).await.unwrap();
    // Decided by the three fast nodes, without waiting for the slow two, which take it
    // once their latency has passed.
    assert!(holding(&servers, "job", &lock.token()).ends_with(&[2, 3, 4]));
    every_node_holds(&servers, "job", &lock.token()).await;
    assert!(rival
        .acquire("job", ms(2000))
        .await
        .unwrap_err()
        .is_not_obtained());
    lock.release().await.unwrap();

    // Three nodes now answer after ~2 × 120 ms: more than the whole TTL.
    for proxy in &proxies[..3] {
        proxy.set_latency(ms(120));
    }
    for ttl in [ms(150), ms(200), ms(230)] {
        let slow =
            redlock_over(&urls).with_quorum_settings(QuorumSettings::new().node_timeout(ms(1000)));
        match slow.acquire("job", ttl).await {
            Ok(lock) => panic!("a lock with {:?} validity", lock.remaining_validity()),
            Err(Error::NoQuorum(failure)) => {
                assert!(failure.agreed < 3 || failure.too_late, "{failure}")
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    // Whatever the slow tries set was undone (the release queues behind them).
    for proxy in &proxies {
        proxy.set_latency(ms(0));
    }
    tokio::time::sleep(ms(300)).await;
    every_node_empties(&servers).await;

    // A black hole on one node and cut connections on another: the other three suffice,
    // and the cut node is back (reconnected) for the next lock.
    proxies[3].blackhole(true);
    proxies[4].cut();
    let lock = locker.acquire("job", ms(2000)).await.unwrap();
    let on = holding(&servers, "job", &lock.token());
    assert!(on.starts_with(&[0, 1, 2]) && !on.contains(&3), "{on:?}");
    lock.release().await.unwrap();
    proxies[3].blackhole(false);
    let lock = locker.acquire("job2", ms(2000)).await.unwrap();
    // The cut node is reached again: it takes the lock too (maybe after the quorum).
    nodes_hold(&servers, &[4], "job2", &lock.token()).await;
    lock.release().await.unwrap();

    // With latency below the TTL every lock handed out has positive validity, smaller by at
    // least the time taken.
    let tolerant =
        redlock_over(&urls).with_quorum_settings(QuorumSettings::new().node_timeout(ms(250)));
    tolerant
        .acquire("warm", ms(1000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let ttl = ms(300);
    for latency in [0, 10, 30, 60] {
        for proxy in &proxies[..3] {
            proxy.set_latency(ms(latency));
        }
        let started = Instant::now();
        let lock = tolerant.acquire("job", ttl).await.unwrap();
        let took = started.elapsed();
        assert!(took >= ms(2 * latency), "{took:?}");
        assert!(lock.remaining_validity() > ms(0));
        // Sent after `started`, answered at least a round trip later.
        let drift = default_drift(ttl);
        assert!(lock.valid_until() >= started + ttl - drift);
        assert!(lock.remaining_validity() <= ttl - drift - ms(2 * latency));
        lock.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_tasks_on_five_nodes_never_overlap() {
    let servers = RedisServer::spawn_many(NODES);
    let lockers: Vec<_> = (0..8).map(|_| redlock(&servers)).collect();
    let keys = ["k0", "k1"];
    let holders: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let acquired = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..32u64 {
        let locker = lockers[task as usize % lockers.len()].clone();
        let (holders, overlaps, acquired) = (holders.clone(), overlaps.clone(), acquired.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..12 {
                let k = ((task + round) % 2) as usize;
                let lock = match locker
                    .acquire(keys[k], ms(2000))
                    .retry(retry::exponential(ms(2), ms(40)).jitter(Jitter::full()))
                    .deadline(ms(20_000))
                    .await
                {
                    Ok(lock) => lock,
                    Err(e) => panic!("task {task}: {e}"),
                };
                if holders[k]
                    .compare_exchange(0, task + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(ms(1)).await;
                assert!(lock.remaining_validity() > ms(0));
                let _ =
                    holders[k].compare_exchange(task + 1, 0, Ordering::SeqCst, Ordering::SeqCst);
                acquired.fetch_add(1, Ordering::SeqCst);
                lock.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(acquired.load(Ordering::SeqCst), 32 * 12);
    // Releases to nodes that answered late finish in the background.
    let until = Instant::now() + ms(2000);
    while servers.iter().any(|s| dbsize(s) != 0) && Instant::now() < until {
        tokio::time::sleep(ms(20)).await;
    }
    every_node_empties(&servers).await;
}

#[tokio::test]
async fn a_lease_survives_a_minority_of_dead_nodes_and_is_lost_with_the_quorum() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    let lease = locker
        .acquire("job", ms(900))
        .await
        .unwrap()
        .keep_alive_with(KeepAlive::new().interval(ms(300)))
        .unwrap();
    servers[0].kill();
    tokio::time::sleep(ms(700)).await;
    servers[4].kill();
    let before = lease.renewals();
    tokio::time::sleep(ms(1500)).await;
    assert!(!lease.is_lost(), "{:?}", lease.signal().reason());
    assert!(
        lease.renewals() >= before + 3,
        "{} -> {}",
        before,
        lease.renewals()
    );

    servers[2].kill();
    let killed = Instant::now();
    let reason = tokio::time::timeout(ms(2000), lease.lost()).await.unwrap();
    // When redmutex decided the loss, not when this task woke up to it (which a loaded
    // machine can delay past any margin).
    let ended = lease.signal().ended_at().expect("the lease ended");
    assert!(
        ended - killed < ms(1000),
        "lost only after {:?}",
        ended - killed
    );
    // Decided before the lock could have run out: the validity is cut to the moment of the
    // loss only when that moment comes first. (The validity is read after the loss: a
    // renewal answered just before the kill may still have extended it.)
    assert_eq!(
        lease.valid_until(),
        ended,
        "the loss was decided after the validity ran out"
    );
    match reason {
        LostReason::Unreachable {
            last_error: Some(e),
        } => {
            assert!(e.to_string().contains("2 of 5 nodes agreed"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_lease_deleted_on_a_quorum_is_lost_not_held_and_on_a_minority_kept() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    let lease = locker
        .acquire("job", ms(600))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    every_node_holds(&servers, "job", &lease.token()).await;
    servers[0].command(&["DEL", "job"]);
    servers[1].command(&["DEL", "job"]);
    tokio::time::sleep(ms(700)).await;
    assert!(!lease.is_lost());
    servers[2].command(&["DEL", "job"]);
    let reason = tokio::time::timeout(ms(1000), lease.lost()).await.unwrap();
    assert!(matches!(reason, LostReason::NotHeld), "{reason:?}");
    // The renewer released what was left.
    tokio::time::sleep(ms(100)).await;
    every_node_empties(&servers).await;
}

#[tokio::test]
async fn refresh_needs_a_quorum_and_tells_lost_from_unreachable() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);

    let mut lock = locker.acquire("a", ms(5000)).await.unwrap();
    every_node_holds(&servers, "a", &lock.token()).await;
    servers[0].command(&["DEL", "a"]);
    servers[1].command(&["DEL", "a"]);
    lock.refresh(ms(5000)).await.unwrap();
    servers[2].command(&["DEL", "a"]);
    assert!(lock.refresh(ms(5000)).await.unwrap_err().is_not_held());
    // Release then finds it lost as well, and cleans what is left.
    assert!(lock.release().await.unwrap_err().is_not_held());
    every_node_empties(&servers).await;

    let mut lock = locker.acquire("b", ms(5000)).await.unwrap();
    every_node_holds(&servers, "b", &lock.token()).await;
    let before = lock.valid_until();
    for down in [1, 2, 3] {
        servers[down].kill();
    }
    let err = lock.refresh(ms(5000)).await.unwrap_err();
    let Error::NoQuorum(failure) = &err else {
        panic!("{err:?}");
    };
    assert_eq!((failure.agreed, failure.unreachable()), (2, 3));
    assert!(err.is_transient());
    // Not extended, still valid as before.
    assert_eq!(lock.valid_until(), before);
    assert!(lock.ttl().await.unwrap() > ms(4000));
}

#[tokio::test]
async fn refresh_past_the_validity_is_lost_and_changes_nothing() {
    let servers = RedisServer::spawn_many(NODES);
    // A large drift allowance: validity ends ~300 ms before the keys expire on the nodes.
    let locker = redlock(&servers).with_quorum_settings(
        QuorumSettings::new()
            .node_timeout(NODE_TIMEOUT)
            .fixed_drift(ms(300)),
    );
    let mut lock = locker.acquire("a", ms(600)).await.unwrap();
    tokio::time::sleep(lock.remaining_validity() + ms(20)).await;
    assert!(lock.ttl().await.unwrap_err().is_not_held());
    assert!(lock.refresh(ms(60_000)).await.unwrap_err().is_not_held());
    for server in &servers {
        let left = pttl(server, "a");
        assert!(left < 1000, "the late refresh extended a key to {left} ms");
    }
}

#[tokio::test]
async fn inspect_shows_each_node_including_unreachable_ones() {
    let servers = RedisServer::spawn_many(NODES);
    let locker = redlock(&servers);
    let lock = locker
        .acquire("job", ms(30_000))
        .metadata("host=a")
        .await
        .unwrap();
    every_node_holds(&servers, "job", &lock.token()).await;
    servers[3].kill();
    servers[4].command(&["SET", "job", "not-a-lock"]);
    let info = locker.inspect("job").await.unwrap();
    assert!(info.held, "a quorum still holds it");
    assert!(info.foreign, "node 4 holds something else");
    assert_eq!(info.metadata.as_deref(), Some("host=a"));
    let views: Vec<String> = info
        .nodes
        .iter()
        .map(|n| match &n.info {
            Ok(i) if i.foreign => "foreign".to_string(),
            Ok(i) if i.held => "held".to_string(),
            Ok(_) => "free".to_string(),
            Err(e) if e.is_unreachable() => "down".to_string(),
            Err(e) => format!("{e}"),
        })
        .collect();
    assert_eq!(views, ["held", "held", "held", "down", "foreign"]);
    lock.release().await.unwrap();
    assert_eq!(
        get(&servers[4], "job").as_deref(),
        Some("not-a-lock"),
        "never touched"
    );

    // Foreign data on a majority of the live nodes: nobody can take it, though no redmutex
    // owner holds it.
    servers[0].command(&["SET", "job", "x"]);
    servers[1].command(&["SET", "job", "x"]);
    let info = locker.inspect("job").await.unwrap();
    assert!(info.held && info.foreign && info.metadata.is_none() && info.ttl.is_none());
    servers[1].command(&["DEL", "job"]);
    // 1 occupied, 3 free + 1 down: free by a quorum.
    servers[0].command(&["DEL", "job"]);
    assert!(!locker.inspect("job").await.unwrap().held);
    // 2 occupied, 2 free + 1 down: the node that is down may hold it for someone with a
    // quorum — nobody can tell, and that is an error, not "free".
    servers[0].command(&["SET", "job", "x"]);
    let unknown = locker.inspect("job").await.unwrap_err();
    assert!(matches!(unknown, Error::NoQuorum(_)), "{unknown}");
}

#[tokio::test]
async fn bad_input_and_refusing_nodes_are_reported_at_once() {
    let empty: Vec<ConnectionManager> = Vec::new();
    match Locker::redlock(empty) {
        Err(Error::InvalidArgument(a)) => assert_eq!(a.argument, Argument::Nodes),
        other => panic!("{:?}", other.map(|_| ())),
    }

    // Every node wants a password we do not give: no retry can help.
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::spawn_with(testkit::ServerOptions {
                password: Some("s3cret".into()),
                ..Default::default()
            })
        })
        .collect();
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}", s.port()))
        .collect();
    let locker = redlock_over(&urls);
    let started = Instant::now();
    let err = locker
        .acquire("job", ms(5000))
        .retry(retry::constant(ms(100)))
        .await
        .unwrap_err();
    assert!(started.elapsed() < ms(1000), "retried a hopeless case");
    assert!(!err.is_transient(), "{err:?}");
    assert!(matches!(err, Error::NoQuorum(_)), "{err:?}");
    assert!(!err.to_string().contains("s3cret"));
}

/// The hazard every Redlock user must know: a node that restarts empty, while a lock is
/// held, can hand the same lock to a second owner. Then the documented mitigation: while
/// the crashed node stays out (for the longest TTL), no second owner can get it.
#[tokio::test]
async fn a_node_restarted_without_persistence_can_break_mutual_exclusion_unless_delayed() {
    let servers = RedisServer::spawn_many(NODES);
    let a = redlock(&servers);
    let b = redlock(&servers);
    let ttl = ms(3000);

    // A takes the lock while nodes 3 and 4 are down: it holds exactly a quorum, 0..3.
    servers[3].kill();
    servers[4].kill();
    let held = a.acquire("job", ttl).await.unwrap();
    assert_eq!(holding(&servers, "job", &held.token()), [0, 1, 2]);
    servers[3].restart();
    servers[4].restart();
    assert!(b.acquire("job", ttl).await.unwrap_err().is_not_obtained());

    // Node 2 crashes and comes straight back, empty: B now finds 2, 3, 4 free.
    servers[2].restart();
    let stolen = b
        .acquire("job", ttl)
        .retry(retry::constant(ms(20)))
        .await
        .expect("the hazard: B obtains a lock A still holds");
    assert!(
        held.remaining_validity() > ms(0),
        "both believe they hold it (A's validity must outlast three restarts)"
    );
    assert!(stolen.remaining_validity() > ms(0));
    drop(stolen);
    drop(held);
    tokio::time::sleep(ms(100)).await;

    // Mitigation: the crashed node stays down until every lock it knew has expired.
    servers[3].kill();
    servers[4].kill();
    let held = a.acquire("job", ttl).await.unwrap();
    servers[3].restart();
    servers[4].restart();
    servers[2].kill();
    // All the while A is valid, B finds only nodes 3 and 4 free: never a quorum.
    let mut refused = 0;
    while held.remaining_validity() > ms(0) {
        match b.acquire("job", ms(300)).await {
            Ok(_) => panic!("B got the lock while A still held it"),
            Err(e) => {
                assert!(
                    e.is_not_obtained() || matches!(e, Error::NoQuorum(_)),
                    "{e:?}"
                );
                refused += 1;
            }
        }
        tokio::time::sleep(ms(50)).await;
    }
    assert!(refused >= 10, "{refused} refusals");
    // Only then does node 2 rejoin; the lock is free for B.
    servers[2].restart();
    let later = b
        .acquire("job", ttl)
        .retry(retry::constant(ms(20)))
        .await
        .unwrap();
    later.release().await.unwrap();
}

/// A stalled node (a minority: `SIGSTOP`) does not keep a healthy quorum from handing out
/// fences: the first round waits the node timeout for it, and the fence's second round
/// (raising the nodes whose counters were lower) gets a node timeout of its own — it had
/// only what the first round left, nothing, and most fenced tries failed (found by an
/// adversarial review: a campaign, which gives up at its first failed try, failed 2 of 3).
#[tokio::test]
async fn a_stalled_minority_node_does_not_stop_fenced_acquires() {
    let servers = RedisServer::spawn_many(3);
    let locker = redlock(&servers);
    // Connected and scripts loaded before the node stalls.
    let warm = locker
        .acquire("warm", ms(10_000))
        .with_fence()
        .await
        .unwrap();
    warm.release().await.unwrap();
    servers[2].pause();
    for key in ["a", "b", "c", "d", "e"] {
        let lock = locker.acquire(key, ms(10_000)).with_fence().await;
        let lock = lock.unwrap_or_else(|e| panic!("{key}: {e}"));
        assert!(lock.fence_if_taken().is_some());
        lock.release()
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
    }
    servers[2].resume();
}

/// The clock-drift allowance of the default settings, as `QuorumSettings::new` documents
/// it: 1% of the TTL plus 2 ms.
fn default_drift(ttl: Duration) -> Duration {
    ttl / 100 + ms(2)
}
