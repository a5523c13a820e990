//! One suite, four worlds: every case below runs against the in-memory server, against a
//! real Redis server, and — where the primitive applies — against Redlock over three real
//! servers and over three in-memory ones. The in-memory server promises the semantics of
//! Redis; a case that passes in one world and fails in another is a bug in one of them.
//!
//! Each world gives lockers (each one what another process would have, with push wake-up)
//! and the faults a test can cause from outside: a key's TTL ending now, another owner
//! taking a key. Every case ends by checking that nothing but fence counters (which expire
//! by design) was left behind, and that every key left has a TTL.

use crate::common;
use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redmutex::memory::MemoryRedis;
use redmutex::{connection::Connection, error::Argument, retry, KeepAlive, Locker, LostReason};
use testkit::RedisServer;
use tokio::time::Instant;

use crate::common::{blamed, is_fence_counter, ms};

/// Where state lives for one case, and what a test may do to it from outside.
trait World: Sync {
    type Conn: Connection;
    /// A locker of its own (another process's), with push wake-up.
    fn locker(&self) -> impl Future<Output = Locker<Self::Conn>> + Send;
    /// Ends `key`'s TTL now on every node, as if it had run out.
    fn expire_now(&self, key: &str) -> impl Future<Output = ()> + Send;
    /// Another owner's value at `key` on every node, for `ttl`.
    fn take_over(&self, key: &str, ttl: Duration) -> impl Future<Output = ()> + Send;
    /// Restarts node `node` without persistence: it forgets every key.
    fn restart_empty(&self, node: usize) -> impl Future<Output = ()> + Send;
    /// Every key on every node with its PTTL (-1: none).
    fn keys(&self) -> impl Future<Output = Vec<(Vec<u8>, i64)>> + Send;
    fn is_redlock(&self) -> bool;
}

/// Nothing left but fence counters, each with a TTL. Redlock decides a release once a
/// quorum deleted the lock; the other nodes delete it a round trip later, so with Redlock
/// this waits (at most 3 s) for the last node to be clean.
async fn assert_clean<W: World>(world: &W) {
    let until = Instant::now() + ms(3000);
    loop {
        let keys = world.keys().await;
        let clean = keys.iter().all(|(key, _)| is_fence_counter(key));
        if !clean && world.is_redlock() && Instant::now() < until {
            tokio::time::sleep(ms(20)).await;
            continue;
        }
        for (key, pttl) in keys {
            let name = String::from_utf8_lossy(&key);
            assert!(is_fence_counter(&key), "left behind: {name}");
            assert!(pttl > 0, "{name} has no TTL ({pttl})");
        }
        return;
    }
}

const TTL: Duration = Duration::from_secs(5);

/// A TTL a case lets run out: long enough for Redlock's drift allowance.
const SHORT_TTL: Duration = Duration::from_millis(400);

// ---------------------------------------------------------------------------------------
// The worlds.

struct Memory {
    nodes: Vec<MemoryRedis>,
}

impl Memory {
    fn single() -> Memory {
        Memory {
            nodes: vec![MemoryRedis::new()],
        }
    }

    fn redlock() -> Memory {
        Memory {
            nodes: (0..3).map(|_| MemoryRedis::new()).collect(),
        }
    }
}

impl World for Memory {
    type Conn = MemoryRedis;

    async fn locker(&self) -> Locker<MemoryRedis> {
        match self.nodes.as_slice() {
            [one] => Locker::in_memory_on(one),
            nodes => Locker::redlock(nodes.to_vec())
                .unwrap()
                .with_wake_up(nodes)
                .unwrap(),
        }
    }

    async fn expire_now(&self, key: &str) {
        for node in &self.nodes {
            node.expire_now(key);
        }
    }

    async fn take_over(&self, key: &str, ttl: Duration) {
        for node in &self.nodes {
            node.take_over(key, ttl);
        }
    }

    async fn restart_empty(&self, node: usize) {
        self.nodes[node].restart_empty();
    }

    async fn keys(&self) -> Vec<(Vec<u8>, i64)> {
        let mut all = Vec::new();
        for node in &self.nodes {
            for key in node.keys() {
                let ttl = node.ttl(&key).map_or(-1, |ttl| ttl.as_millis() as i64);
                all.push((key, ttl));
            }
        }
        all
    }

    fn is_redlock(&self) -> bool {
        self.nodes.len() > 1
    }
}

struct Real {
    servers: Vec<RedisServer>,
}

impl Real {
    fn single() -> Real {
        Real {
            servers: vec![RedisServer::spawn()],
        }
    }

    fn redlock() -> Real {
        Real {
            servers: RedisServer::spawn_many(3),
        }
    }

    async fn raw(&self) -> Vec<MultiplexedConnection> {
        let mut conns = Vec::new();
        for server in &self.servers {
            conns.push(common::multiplexed(server).await);
        }
        conns
    }

    /// Waits (at most 1 s) until every node has the same value at `key`. Redlock hands a
    /// lock out once a quorum took it; the slower nodes take it a round trip later, and a
    /// change made from outside before then would be overwritten by their late `SET`.
    async fn settle(&self, key: &str) {
        let mut conns = self.raw().await;
        let until = Instant::now() + ms(1000);
        while Instant::now() < until {
            let mut values = Vec::new();
            for conn in &mut conns {
                let value: Option<Vec<u8>> =
                    redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
                values.push(value);
            }
            if values.windows(2).all(|pair| pair[0] == pair[1]) {
                return;
            }
            tokio::time::sleep(ms(10)).await;
        }
    }
}

impl World for Real {
    // Connections that reconnect, as `redmutex::connection::connect` gives: a node that restarts is
    // reached again.
    type Conn = ConnectionManager;

    async fn locker(&self) -> Locker<ConnectionManager> {
        let clients: Vec<redis::Client> = (self.servers.iter())
            .map(|server| redis::Client::open(server.url()).unwrap())
            .collect();
        let mut conns = Vec::new();
        for server in &self.servers {
            conns.push(common::manager(server).await);
        }
        let locker = match conns.len() {
            1 => Locker::new(conns.pop().unwrap()),
            _ => Locker::redlock(conns).unwrap(),
        };
        locker.with_wake_up(clients).unwrap()
    }

    async fn restart_empty(&self, node: usize) {
        self.servers[node].restart();
    }

    async fn expire_now(&self, key: &str) {
        self.settle(key).await;
        for mut conn in self.raw().await {
            let _: i64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    }

    async fn take_over(&self, key: &str, ttl: Duration) {
        self.settle(key).await;
        for mut conn in self.raw().await {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg("taken over by another owner")
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    }

    async fn keys(&self) -> Vec<(Vec<u8>, i64)> {
        let mut all = Vec::new();
        for mut conn in self.raw().await {
            let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
                .arg("*")
                .query_async(&mut conn)
                .await
                .unwrap();
            for key in keys {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                all.push((key, pttl));
            }
        }
        all
    }

    fn is_redlock(&self) -> bool {
        self.servers.len() > 1
    }
}

/// Each case as a test in each world.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(&super::Memory::single()).await })*
        }
        mod memory_redlock {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(&super::Memory::redlock()).await })*
        }
        mod server {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(&super::Real::single()).await })*
        }
        mod redlock {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(&super::Real::redlock()).await })*
        }
    };
}

conformance!(
    a_lock_is_exclusive_until_released,
    only_the_owner_releases_or_refreshes,
    an_unrenewed_lock_expires_and_its_holder_finds_it_lost,
    a_refresh_extends_the_lock,
    fences_grow_from_holder_to_holder,
    multi_key_locks_are_all_or_nothing,
    a_waiter_is_woken_by_the_release,
    keep_alive_holds_past_the_ttl,
    a_lease_whose_key_expires_is_lost_loudly,
    a_key_another_owner_took_is_lost_and_held,
    bad_input_is_refused_before_any_request,
    semaphores_count_permits,
    fair_locks_serve_waiters_in_arrival_order,
    read_write_locks_share_reads_and_exclude_writes,
    an_election_has_one_leader_and_terms_that_grow,
    a_server_restarted_empty_loses_its_locks_unless_a_quorum_keeps_them,
);

async fn a_lock_is_exclusive_until_released<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let lock = a.acquire("job", TTL).metadata("host=a").await.unwrap();
    let refused = b.acquire("job", TTL).await.unwrap_err();
    assert!(refused.is_not_obtained(), "{refused}");
    let info = b.inspect("job").await.unwrap();
    assert!(info.held && !info.foreign, "{info:?}");
    assert_eq!(info.metadata.as_deref(), Some("host=a"));
    lock.release().await.unwrap();
    assert!(!b.inspect("job").await.unwrap().held);
    let lock = b.acquire("job", TTL).await.unwrap();
    lock.release().await.unwrap();
    assert_clean(world).await;
}

async fn only_the_owner_releases_or_refreshes<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let lock = a.acquire("job", TTL).await.unwrap();
    let other = b.acquire("other", TTL).await.unwrap();
    // Another owner's token releases and refreshes nothing.
    let refused = b
        .release_with_token(["job"], &other.token())
        .await
        .unwrap_err();
    assert!(refused.is_not_held(), "{refused}");
    let refused = (b.refresh_with_token(["job"], &other.token(), TTL).await).unwrap_err();
    assert!(refused.is_not_held(), "{refused}");
    assert!(b.inspect("job").await.unwrap().held);
    // The owner's token does, from any locker.
    let token = lock.token();
    b.release_with_token(["job"], &token).await.unwrap();
    assert!(lock.release().await.unwrap_err().is_not_held());
    other.release().await.unwrap();
    assert_clean(world).await;
}

async fn an_unrenewed_lock_expires_and_its_holder_finds_it_lost<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let mut lock = a.acquire("job", SHORT_TTL).await.unwrap();
    tokio::time::sleep(SHORT_TTL + ms(150)).await;
    let taken = b.acquire("job", TTL).await.unwrap();
    assert!(lock.refresh(TTL).await.unwrap_err().is_not_held());
    assert!(lock.release().await.unwrap_err().is_not_held());
    assert!(
        b.inspect("job").await.unwrap().held,
        "the new holder's lock stays"
    );
    taken.release().await.unwrap();
    assert_clean(world).await;
}

async fn a_refresh_extends_the_lock<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let mut lock = a.acquire("job", SHORT_TTL).await.unwrap();
    lock.refresh(TTL).await.unwrap();
    tokio::time::sleep(SHORT_TTL + ms(150)).await;
    assert!(b.acquire("job", TTL).await.unwrap_err().is_not_obtained());
    let left = lock.ttl().await.unwrap();
    assert!(left > SHORT_TTL && left <= TTL, "{left:?}");
    lock.release().await.unwrap();
    assert_clean(world).await;
}

async fn fences_grow_from_holder_to_holder<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let mut fences = Vec::new();
    for locker in [&a, &b, &a] {
        let lock = locker.acquire("job", TTL).with_fence().await.unwrap();
        let fence = lock.fence_if_taken().expect("taken with the lock");
        assert_eq!(lock.fence().await.unwrap(), fence, "one fence per holder");
        fences.push(fence);
        lock.release().await.unwrap();
    }
    // Taken later, by a holder that did not ask when acquiring: above all of them.
    let lock = b.acquire("job", TTL).await.unwrap();
    fences.push(lock.fence().await.unwrap());
    lock.release().await.unwrap();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_clean(world).await;
}

async fn multi_key_locks_are_all_or_nothing<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let held = a.acquire("b", TTL).await.unwrap();
    let refused = b.acquire_all(["a", "b", "c"], TTL).await.unwrap_err();
    assert!(refused.is_not_obtained(), "{refused}");
    for key in ["a", "c"] {
        assert!(!a.inspect(key).await.unwrap().held, "{key} was taken alone");
    }
    held.release().await.unwrap();
    let all = b.acquire_all(["a", "b", "c"], TTL).await.unwrap();
    assert!(a.acquire("c", TTL).await.unwrap_err().is_not_obtained());
    all.release().await.unwrap();
    assert_clean(world).await;
}

async fn a_waiter_is_woken_by_the_release<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let lock = a.acquire("job", TTL).await.unwrap();
    // It would poll only after 30 s; the deadline ends it after 10 s unless woken.
    let waiter = tokio::spawn(async move {
        b.acquire("job", TTL)
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(ms(300)).await;
    lock.release().await.unwrap();
    let woken = waiter.await.unwrap();
    woken
        .expect("woken by the release, long before polling")
        .release()
        .await
        .unwrap();
    assert_clean(world).await;
}

async fn keep_alive_holds_past_the_ttl<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let lease = (a.acquire("job", SHORT_TTL).await.unwrap())
        .keep_alive()
        .unwrap();
    tokio::time::sleep(SHORT_TTL * 3).await;
    assert!(!lease.is_lost());
    assert!(lease.renewals() >= 2, "{} renewals", lease.renewals());
    assert!(b.acquire("job", TTL).await.unwrap_err().is_not_obtained());
    lease.release().await.unwrap();
    assert_clean(world).await;
}

async fn a_lease_whose_key_expires_is_lost_loudly<W: World>(world: &W) {
    let a = world.locker().await;
    let settings = KeepAlive::new().interval(ms(100));
    let lease = (a.acquire("job", Duration::from_secs(2)).await.unwrap())
        .keep_alive_with(settings)
        .unwrap();
    world.expire_now("job").await;
    let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("the loss is signalled at the next renewal");
    assert!(matches!(reason, LostReason::NotHeld), "{reason:?}");
    assert!(lease.is_lost());
    assert!(lease.release().await.unwrap_err().is_not_held());
    assert_clean(world).await;
}

async fn a_key_another_owner_took_is_lost_and_held<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let mut lock = a.acquire("job", TTL).await.unwrap();
    world.take_over("job", SHORT_TTL).await;
    // No node keeps the other owner's value past this (a key lives through its last
    // millisecond).
    let foreign_gone = tokio::time::Instant::now() + SHORT_TTL + ms(2);
    assert!(lock.refresh(TTL).await.unwrap_err().is_not_held());
    let info = b.inspect("job").await.unwrap();
    assert!(info.held && info.foreign, "{info:?}");
    assert!(b.acquire("job", TTL).await.unwrap_err().is_not_obtained());
    assert!(lock.release().await.unwrap_err().is_not_held());
    assert_eq!(
        world
            .keys()
            .await
            .iter()
            .filter(|(k, _)| k == b"job")
            .count(),
        {
            if world.is_redlock() {
                3
            } else {
                1
            }
        }
    );
    // Once the other owner's TTL ran out, it is anyone's again.
    let taken = b
        .acquire("job", TTL)
        .retry(retry::constant(ms(50)))
        .deadline(Duration::from_secs(3))
        .await
        .unwrap();
    taken.release().await.unwrap();
    // On Redlock a quorum of nodes may have let the value run out a millisecond before the
    // last one: the acquire got in there, and the last node's copy runs out on its own.
    tokio::time::sleep_until(foreign_gone).await;
    assert_clean(world).await;
}

async fn bad_input_is_refused_before_any_request<W: World>(world: &W) {
    let a = world.locker().await;
    let empty = a.acquire("", TTL).await.unwrap_err();
    assert_eq!(blamed(&empty), Some(Argument::Key), "{empty}");
    let zero = a.acquire("job", Duration::ZERO).await.unwrap_err();
    assert_eq!(blamed(&zero), Some(Argument::Ttl), "{zero}");
    let none = a.acquire_all(Vec::<&str>::new(), TTL).await.unwrap_err();
    assert!(none.is_invalid_argument(), "{none}");
    let metadata = a.acquire("job", TTL).metadata("x".repeat(100_000)).await;
    assert!(metadata.unwrap_err().is_invalid_argument());
    assert!(world.keys().await.is_empty(), "a request was made");
}

async fn semaphores_count_permits<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    if world.is_redlock() {
        let refused = a.semaphore("pool", 2).unwrap_err();
        assert_eq!(blamed(&refused), Some(Argument::Nodes), "{refused}");
        return;
    }
    let (pool_a, pool_b) = (
        a.semaphore("pool", 3).unwrap(),
        b.semaphore("pool", 3).unwrap(),
    );
    let two = pool_a.acquire(2, TTL).await.unwrap();
    let one = pool_b.acquire(1, TTL).await.unwrap();
    assert!(pool_b.acquire(1, TTL).await.unwrap_err().is_not_obtained());
    let over = pool_b.acquire(4, TTL).await.unwrap_err();
    assert!(over.is_invalid_argument(), "{over}");
    assert_eq!(crate::common::used(&pool_b.inspect().await.unwrap()), 3);
    let waiter = tokio::spawn(async move {
        pool_b
            .acquire(2, TTL)
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(10))
            .await
    });
    tokio::time::sleep(ms(200)).await;
    two.release().await.unwrap();
    let two_more = waiter
        .await
        .unwrap()
        .expect("woken by the release of two permits");
    assert_eq!(crate::common::used(&pool_a.inspect().await.unwrap()), 3);
    one.release().await.unwrap();
    two_more.release().await.unwrap();
    assert_eq!(crate::common::used(&pool_a.inspect().await.unwrap()), 0);
    assert_clean(world).await;
}

async fn fair_locks_serve_waiters_in_arrival_order<W: World>(world: &W) {
    let a = world.locker().await;
    if world.is_redlock() {
        let refused = a.fair_lock("line").unwrap_err();
        assert_eq!(blamed(&refused), Some(Argument::Nodes), "{refused}");
        return;
    }
    let fair = a.fair_lock("line").unwrap();
    let first = fair.acquire(TTL).await.unwrap();
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for n in 0..3 {
        let fair = world.locker().await.fair_lock("line").unwrap();
        let order_tx = order_tx.clone();
        waiters.push(tokio::spawn(async move {
            let guard = fair
                .acquire(TTL)
                .retry(retry::constant(ms(50)))
                .deadline(Duration::from_secs(20))
                .await
                .unwrap();
            order_tx.send(n).unwrap();
            tokio::time::sleep(ms(20)).await;
            guard.release().await.unwrap();
        }));
        // In line before the next one comes.
        let until = Instant::now() + Duration::from_secs(5);
        while fair_waiters(&a, "line").await < n + 1 {
            assert!(Instant::now() < until, "waiter {n} not in line");
            tokio::time::sleep(ms(10)).await;
        }
    }
    first.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    drop(order_tx);
    let mut order = Vec::new();
    while let Some(n) = order_rx.recv().await {
        order.push(n);
    }
    assert_eq!(order, [0, 1, 2]);
    assert_clean(world).await;
}

async fn fair_waiters<C: Connection>(locker: &Locker<C>, key: &str) -> usize {
    let info = locker.fair_lock(key).unwrap().inspect().await.unwrap();
    crate::common::in_line(&info) as usize
}

async fn read_write_locks_share_reads_and_exclude_writes<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let (rw_a, rw_b) = (a.rw_lock("doc").unwrap(), b.rw_lock("doc").unwrap());
    let read_a = rw_a.read(TTL).await.unwrap();
    let read_b = rw_b.read(TTL).await.unwrap();
    assert!(rw_b.write(TTL).await.unwrap_err().is_not_obtained());
    read_a.release().await.unwrap();
    read_b.release().await.unwrap();
    let write = rw_b.write(TTL).await.unwrap();
    assert!(rw_a.read(TTL).await.unwrap_err().is_not_obtained());
    assert!(rw_a.write(TTL).await.unwrap_err().is_not_obtained());
    // A writer may step down to a reader; readers then join.
    let read_b = write.downgrade().await.unwrap();
    let read_a = rw_a.read(TTL).await.unwrap();
    assert!(rw_a.write(TTL).await.unwrap_err().is_not_obtained());
    read_a.release().await.unwrap();
    read_b.release().await.unwrap();
    assert_clean(world).await;
}

async fn an_election_has_one_leader_and_terms_that_grow<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let (vote_a, vote_b) = (a.election("leader").unwrap(), b.election("leader").unwrap());
    assert!(vote_a.leader().await.unwrap().is_none());
    let first = vote_a.campaign("node-a").await.unwrap();
    let leader = vote_b.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.value, "node-a");
    let second = tokio::spawn(async move { vote_b.campaign("node-b").await });
    tokio::time::sleep(ms(300)).await;
    assert!(!second.is_finished(), "two leaders at once");
    let first_term = first.term();
    first.resign().await.unwrap();
    let second = second.await.unwrap().unwrap();
    assert_eq!(second.value(), "node-b");
    assert!(
        second.term() > first_term,
        "{} after {first_term}",
        second.term()
    );
    let leader = vote_a.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.value, "node-b");
    assert_eq!(leader.term, Some(second.term()));
    second.resign().await.unwrap();
    assert!(vote_a.leader().await.unwrap().is_none());
    assert_clean(world).await;
}

async fn a_server_restarted_empty_loses_its_locks_unless_a_quorum_keeps_them<W: World>(world: &W) {
    let (a, b) = (world.locker().await, world.locker().await);
    let settings = KeepAlive::new().interval(ms(100));
    let lease = (a.acquire("job", Duration::from_secs(2)).await.unwrap())
        .keep_alive_with(settings)
        .unwrap();
    world.restart_empty(0).await;
    if world.is_redlock() {
        // One node of three forgot it: the other two still hold it for the owner.
        tokio::time::sleep(ms(600)).await;
        assert!(!lease.is_lost(), "{:?}", lease.signal().reason());
        assert!(b.acquire("job", TTL).await.unwrap_err().is_not_obtained());
        lease.release().await.unwrap();
    } else {
        let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
            .await
            .expect("the loss is signalled at the next renewal");
        assert!(matches!(reason, LostReason::NotHeld), "{reason:?}");
        // The server forgot it: anyone may take it, with a fence above the old ones.
        // (Over Redis, the first request on a connection the restart cut fails, transient,
        // and the connection manager reconnects: a retry covers it.)
        let lock = (b.acquire("job", TTL).with_fence())
            .retry(retry::constant(ms(50)))
            .deadline(Duration::from_secs(3))
            .await
            .unwrap();
        assert!(lock.fence_if_taken().is_some());
        lock.release().await.unwrap();
    }
    assert_clean(world).await;
}
