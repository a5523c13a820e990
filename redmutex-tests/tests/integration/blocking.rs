//! The blocking API: the conformance cases (conformance.rs) written with blocking calls,
//! each against the in-memory server, a real Redis server and — where the primitive
//! applies — Redlock over three real servers; plus what only the blocking API has: calls
//! from inside an async runtime, renewals while the caller's thread is busy, dropped
//! guards, many threads contending.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redmutex::blocking::Locker;
use redmutex::memory::MemoryRedis;
use redmutex::{connection::Connection, error::Argument, retry, Error, KeepAlive, LostReason};
use testkit::RedisServer;

use crate::common::{blamed, is_fence_counter, lock_key_count, ms};

const TTL: Duration = Duration::from_secs(5);
const SHORT_TTL: Duration = Duration::from_millis(400);

/// Where state lives, with the faults a test causes from outside (all blocking calls).
trait World {
    type Conn: Connection;
    fn locker(&self) -> Locker<Self::Conn>;
    fn expire_now(&self, key: &str);
    fn take_over(&self, key: &str, ttl: Duration);
    /// Keys left that are not fence counters.
    fn lock_keys(&self) -> u64;
    fn is_redlock(&self) -> bool;
}

/// Asserts that no lock key is left in `world`, waiting up to 3 s: on Redlock a release
/// returns once a quorum deleted the keys, and the other nodes do so a round trip later.
fn no_lock_keys_left<W: World>(world: &W) {
    let deadline = std::time::Instant::now() + ms(3000);
    while world.lock_keys() != 0 && std::time::Instant::now() < deadline {
        thread::sleep(ms(10));
    }
    assert_eq!(world.lock_keys(), 0);
}

struct Memory(MemoryRedis);

impl World for Memory {
    type Conn = MemoryRedis;

    fn locker(&self) -> Locker<MemoryRedis> {
        let redis = self.0.clone();
        Locker::build(move || async move { Ok(redmutex::Locker::in_memory_on(&redis)) }).unwrap()
    }

    fn expire_now(&self, key: &str) {
        self.0.expire_now(key);
    }

    fn take_over(&self, key: &str, ttl: Duration) {
        self.0.take_over(key, ttl);
    }

    fn lock_keys(&self) -> u64 {
        self.0
            .keys()
            .iter()
            .filter(|key| !is_fence_counter(key))
            .count() as u64
    }

    fn is_redlock(&self) -> bool {
        false
    }
}

struct Real(Vec<RedisServer>);

impl World for Real {
    type Conn = ConnectionManager;

    fn locker(&self) -> Locker<ConnectionManager> {
        if let [server] = self.0.as_slice() {
            return Locker::connect(&server.url()).unwrap();
        }
        let urls: Vec<String> = self.0.iter().map(RedisServer::url).collect();
        Locker::build(move || async move {
            let nodes = urls
                .iter()
                .map(|url| redmutex::connection::connect_lazy(url));
            let clients = urls
                .iter()
                .map(|url| redis::Client::open(url.as_str()).unwrap());
            redmutex::Locker::redlock(nodes.collect::<Result<Vec<_>, _>>()?)?.with_wake_up(clients)
        })
        .unwrap()
    }

    fn expire_now(&self, key: &str) {
        for server in &self.0 {
            server.command(&["DEL", key]);
        }
    }

    fn take_over(&self, key: &str, ttl: Duration) {
        let ttl = ttl.as_millis().to_string();
        for server in &self.0 {
            server.command(&["SET", key, "taken over by another owner", "PX", &ttl]);
        }
    }

    fn lock_keys(&self) -> u64 {
        self.0.iter().map(lock_key_count).sum()
    }

    fn is_redlock(&self) -> bool {
        self.0.len() > 1
    }
}

macro_rules! through_blocking {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[test]
            fn $case() { super::$case(&super::Memory(super::MemoryRedis::new())) })*
        }
        mod server {
            $(#[test]
            fn $case() { super::$case(&super::Real(vec![super::RedisServer::spawn()])) })*
        }
        mod redlock {
            $(#[test]
            fn $case() { super::$case(&super::Real(super::RedisServer::spawn_many(3))) })*
        }
    };
}

through_blocking!(
    a_lock_is_exclusive_until_released,
    only_the_owner_releases_or_refreshes,
    an_unrenewed_lock_expires_and_its_holder_finds_it_lost,
    fences_grow_from_holder_to_holder,
    multi_key_locks_are_all_or_nothing,
    a_waiter_in_another_thread_is_woken_by_the_release,
    keep_alive_renews_while_the_callers_thread_is_busy,
    a_lease_whose_key_expires_is_lost_loudly,
    a_key_another_owner_took_is_lost,
    a_dropped_guard_is_released_before_the_drop_returns,
    semaphores_count_permits,
    fair_locks_serve_threads_in_arrival_order,
    read_write_locks_share_reads_and_exclude_writes,
    an_election_has_one_leader_and_observers_see_it_change,
    many_threads_contend_without_two_holders,
);

fn a_lock_is_exclusive_until_released<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let lock = a.acquire("job", TTL).metadata("host=a").call().unwrap();
    assert!(b.acquire("job", TTL).call().unwrap_err().is_not_obtained());
    let info = b.inspect("job").unwrap();
    assert!(
        info.held && info.metadata.as_deref() == Some("host=a"),
        "{info:?}"
    );
    lock.release().unwrap();
    b.acquire("job", TTL).call().unwrap().release().unwrap();
    no_lock_keys_left(world);
}

fn only_the_owner_releases_or_refreshes<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let lock = a.acquire("job", TTL).call().unwrap();
    let other = b.acquire("other", TTL).call().unwrap();
    assert!(b
        .release_with_token(["job"], &other.token())
        .unwrap_err()
        .is_not_held());
    let refused = b
        .refresh_with_token(["job"], &other.token(), TTL)
        .unwrap_err();
    assert!(refused.is_not_held());
    b.release_with_token(["job"], &lock.token()).unwrap();
    assert!(lock.release().unwrap_err().is_not_held());
    other.release().unwrap();
    no_lock_keys_left(world);
}

fn an_unrenewed_lock_expires_and_its_holder_finds_it_lost<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let mut lock = a.acquire("job", SHORT_TTL).call().unwrap();
    thread::sleep(SHORT_TTL + ms(150));
    let taken = b.acquire("job", TTL).call().unwrap();
    assert!(lock.refresh(TTL).unwrap_err().is_not_held());
    assert!(lock.release().unwrap_err().is_not_held());
    taken.release().unwrap();
    no_lock_keys_left(world);
}

fn fences_grow_from_holder_to_holder<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let mut fences = Vec::new();
    for locker in [&a, &b, &a] {
        let lock = locker.acquire("job", TTL).with_fence().call().unwrap();
        assert_eq!(lock.fence().unwrap(), lock.fence_if_taken().unwrap());
        fences.push(lock.fence().unwrap());
        lock.release().unwrap();
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

fn multi_key_locks_are_all_or_nothing<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let held = a.acquire("b", TTL).call().unwrap();
    assert!(b
        .acquire_all(["a", "b"], TTL)
        .call()
        .unwrap_err()
        .is_not_obtained());
    assert!(!a.inspect("a").unwrap().held);
    held.release().unwrap();
    b.acquire_all(["a", "b"], TTL)
        .call()
        .unwrap()
        .release()
        .unwrap();
    no_lock_keys_left(world);
}

fn a_waiter_in_another_thread_is_woken_by_the_release<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let lock = a.acquire("job", TTL).call().unwrap();
    let waiter = thread::spawn(move || {
        // It would poll only after 30 s; the deadline ends it after 10 s unless woken.
        let lock = b
            .acquire("job", TTL)
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(10))
            .call();
        lock.map(|lock| lock.release())
    });
    thread::sleep(ms(300));
    lock.release().unwrap();
    waiter
        .join()
        .unwrap()
        .expect("woken by the release")
        .unwrap();
    no_lock_keys_left(world);
}

fn keep_alive_renews_while_the_callers_thread_is_busy<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let lease = a
        .acquire("job", SHORT_TTL)
        .call()
        .unwrap()
        .keep_alive()
        .unwrap();
    // A long computation: this thread makes no call at all.
    thread::sleep(SHORT_TTL * 4);
    assert!(!lease.is_lost());
    assert!(lease.renewals() >= 3, "{} renewals", lease.renewals());
    assert!(b.acquire("job", TTL).call().unwrap_err().is_not_obtained());
    lease.release().unwrap();
    no_lock_keys_left(world);
}

fn a_lease_whose_key_expires_is_lost_loudly<W: World>(world: &W) {
    let a = world.locker();
    let settings = KeepAlive::new().interval(ms(100));
    let lease = (a.acquire("job", Duration::from_secs(2)).call().unwrap())
        .keep_alive_with(settings)
        .unwrap();
    let signal = lease.signal();
    world.expire_now("job");
    let reason = lease.lost_within(Duration::from_secs(3)).unwrap();
    assert!(matches!(reason, Some(LostReason::NotHeld)), "{reason:?}");
    assert!(signal.is_lost() && lease.cancellation_token().is_cancelled());
    assert!(lease.release().unwrap_err().is_not_held());
}

fn a_key_another_owner_took_is_lost<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let mut lock = a.acquire("job", TTL).call().unwrap();
    world.take_over("job", SHORT_TTL);
    assert!(lock.refresh(TTL).unwrap_err().is_not_held());
    assert!(b.inspect("job").unwrap().foreign);
    let taken = (b.acquire("job", TTL))
        .retry(retry::constant(ms(50)))
        .deadline(Duration::from_secs(3))
        .call()
        .unwrap();
    taken.release().unwrap();
    drop(lock);
    no_lock_keys_left(world);
}

fn a_dropped_guard_is_released_before_the_drop_returns<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    drop(a.acquire("job", TTL).call().unwrap());
    // No retry: the release was confirmed before `drop` returned.
    b.acquire("job", TTL).call().unwrap().release().unwrap();
    let lease = a.acquire("job", TTL).call().unwrap().keep_alive().unwrap();
    drop(lease);
    b.acquire("job", TTL).call().unwrap().release().unwrap();
    no_lock_keys_left(world);
}

fn semaphores_count_permits<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    if world.is_redlock() {
        assert_eq!(
            blamed(&a.semaphore("pool", 2).unwrap_err()),
            Some(Argument::Nodes)
        );
        return;
    }
    let (pool_a, pool_b) = (
        a.semaphore("pool", 3).unwrap(),
        b.semaphore("pool", 3).unwrap(),
    );
    let two = pool_a.acquire(2, TTL).call().unwrap();
    let one = pool_b.acquire(1, TTL).call().unwrap();
    assert!(pool_b.acquire(1, TTL).call().unwrap_err().is_not_obtained());
    assert_eq!(crate::common::used(&pool_a.inspect().unwrap()), 3);
    two.release().unwrap();
    one.release().unwrap();
    assert_eq!(crate::common::used(&pool_a.inspect().unwrap()), 0);
    no_lock_keys_left(world);
}

fn fair_locks_serve_threads_in_arrival_order<W: World>(world: &W) {
    let a = world.locker();
    if world.is_redlock() {
        assert_eq!(
            blamed(&a.fair_lock("line").unwrap_err()),
            Some(Argument::Nodes)
        );
        return;
    }
    let fair = a.fair_lock("line").unwrap();
    let first = fair.acquire(TTL).call().unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for n in 0..3 {
        let (waiter, order) = (world.locker().fair_lock("line").unwrap(), order.clone());
        threads.push(thread::spawn(move || {
            let guard = (waiter.acquire(TTL))
                .retry(retry::constant(ms(50)))
                .deadline(Duration::from_secs(20))
                .call()
                .unwrap();
            order.lock().unwrap().push(n);
            guard.release().unwrap();
        }));
        let until = Instant::now() + Duration::from_secs(5);
        while crate::common::in_line(&fair.inspect().unwrap()) < n as u32 + 1 {
            assert!(Instant::now() < until, "waiter {n} not in line");
            thread::sleep(ms(10));
        }
    }
    first.release().unwrap();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
    no_lock_keys_left(world);
}

fn read_write_locks_share_reads_and_exclude_writes<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let (rw_a, rw_b) = (a.rw_lock("doc").unwrap(), b.rw_lock("doc").unwrap());
    let read_a = rw_a.read(TTL).call().unwrap();
    let read_b = rw_b.read(TTL).call().unwrap();
    assert!(rw_b.write(TTL).call().unwrap_err().is_not_obtained());
    read_a.release().unwrap();
    read_b.release().unwrap();
    let write = rw_b.write(TTL).call().unwrap();
    assert!(rw_a.read(TTL).call().unwrap_err().is_not_obtained());
    let read_b = write.downgrade().unwrap();
    let read_a = rw_a.read(TTL).call().unwrap();
    assert_eq!(crate::common::readers(&rw_a.inspect().unwrap()), 2);
    read_a.release().unwrap();
    read_b.release().unwrap();
    no_lock_keys_left(world);
}

fn an_election_has_one_leader_and_observers_see_it_change<W: World>(world: &W) {
    let (a, b) = (world.locker(), world.locker());
    let (vote_a, vote_b) = (a.election("leader").unwrap(), b.election("leader").unwrap());
    let mut changes = vote_b.observe();
    assert_eq!(changes.next().unwrap().unwrap(), None, "nobody leads yet");
    let mut first = vote_a.campaign("node-a").call().unwrap();
    let seen = changes.next().unwrap().unwrap().expect("a leader");
    assert_eq!(seen.value, "node-a");
    first.proclaim("node-a, busy").unwrap();
    let seen = changes.next().unwrap().unwrap().expect("a leader");
    assert_eq!(seen.value, "node-a, busy");
    let second = thread::spawn(move || vote_b.campaign("node-b").call());
    thread::sleep(ms(300));
    assert!(!second.is_finished(), "two leaders at once");
    let first_term = first.term();
    first.resign().unwrap();
    let second = second.join().unwrap().unwrap();
    assert!(second.term() > first_term);
    assert_eq!(vote_a.leader().unwrap().unwrap().value, "node-b");
    second.resign().unwrap();
    assert!(vote_a.leader().unwrap().is_none());
    no_lock_keys_left(world);
}

fn many_threads_contend_without_two_holders<W: World>(world: &W) {
    let inside = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for _ in 0..2 {
        let locker = world.locker();
        for _ in 0..4 {
            let (locker, inside) = (locker.clone(), inside.clone());
            threads.push(thread::spawn(move || {
                for _ in 0..5 {
                    let lock = (locker.acquire("counter", TTL))
                        .retry(retry::constant(Duration::from_secs(1)))
                        .deadline(Duration::from_secs(30))
                        .call()
                        .unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    thread::sleep(ms(1));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lock.release().unwrap();
                }
            }));
        }
    }
    for thread in threads {
        thread.join().unwrap();
    }
    no_lock_keys_left(world);
}

/// Inside an async runtime every call is refused with a typed error (nothing sent, no
/// panic, no stalled runtime); a guard dropped there is still released.
#[test]
fn calls_inside_an_async_runtime_are_refused() {
    let redis = MemoryRedis::new();
    let server = redis.clone();
    let locker =
        Locker::build(move || async move { Ok(redmutex::Locker::in_memory_on(&server)) }).unwrap();
    let held = locker.acquire("held", TTL).call().unwrap();
    // A locker's first acquire also has the server's eviction policy looked at, in the
    // background: let that finish before counting.
    let before = settled_requests(&redis);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (locker, held) = runtime.block_on(async move {
        let refused = locker.acquire("job", TTL).call().unwrap_err();
        assert!(matches!(refused, Error::InsideRuntime), "{refused}");
        assert!(!refused.is_transient());
        assert!(matches!(locker.inspect("held"), Err(Error::InsideRuntime)));
        assert!(matches!(held.ttl(), Err(Error::InsideRuntime)));
        let mut changes = locker.election("vote").unwrap().observe();
        assert!(matches!(changes.next(), Some(Err(Error::InsideRuntime))));
        assert!(changes.next().is_none(), "the refused iterator has ended");
        let built = Locker::build(|| async { Ok(redmutex::Locker::in_memory()) });
        assert!(matches!(built, Err(Error::InsideRuntime)));
        assert_eq!(redis.requests(), before, "nothing was sent");
        (locker, held)
    });
    // Dropped inside a runtime: the release is started, not waited for.
    runtime.block_on(async move { drop(held) });
    let until = Instant::now() + Duration::from_secs(5);
    while locker.inspect("held").unwrap().held {
        assert!(
            Instant::now() < until,
            "the dropped guard was never released"
        );
        thread::sleep(ms(10));
    }
}

/// `spawn_blocking` is where blocking belongs: the calls work there, on either runtime
/// flavour, while the runtime's own threads — an async task, the thread running a
/// multi-thread runtime's `block_on` — are refused.
#[test]
fn calls_inside_spawn_blocking_work_and_async_threads_are_refused() {
    let redis = MemoryRedis::new();
    let server = redis.clone();
    let locker =
        Locker::build(move || async move { Ok(redmutex::Locker::in_memory_on(&server)) }).unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (flavour, runtime) in [("multi-thread", &multi), ("current-thread", &current)] {
        let blocking = locker.clone();
        let held = runtime.block_on(async move {
            let refused = blocking.acquire("job", TTL).call();
            assert!(
                matches!(refused, Err(Error::InsideRuntime)),
                "{flavour}: block_on's thread"
            );
            let in_task = blocking.clone();
            let task = tokio::spawn(async move { in_task.inspect("job").map(|_| ()) });
            let refused = task.await.unwrap();
            assert!(
                matches!(refused, Err(Error::InsideRuntime)),
                "{flavour}: an async task"
            );
            tokio::task::spawn_blocking(move || {
                let lock = blocking.acquire("job", TTL).call().unwrap();
                assert!(blocking.inspect("job").unwrap().held);
                lock
            })
            .await
            .unwrap()
        });
        assert!(locker.inspect("job").unwrap().held, "{flavour}");
        held.release().unwrap();
    }
    assert!(redis.keys().is_empty());
}

/// The request count once nothing has been sent for 200 ms.
fn settled_requests(redis: &MemoryRedis) -> u64 {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = redis.requests();
        thread::sleep(ms(200));
        if redis.requests() == seen || Instant::now() > until {
            return redis.requests();
        }
    }
}

/// Bad input is refused before any request, as in the async API.
#[test]
fn bad_input_is_refused_before_any_request() {
    let redis = MemoryRedis::new();
    let server = redis.clone();
    let locker =
        Locker::build(move || async move { Ok(redmutex::Locker::in_memory_on(&server)) }).unwrap();
    let before = redis.requests();
    assert_eq!(
        blamed(&locker.acquire("", TTL).call().unwrap_err()),
        Some(Argument::Key)
    );
    assert_eq!(
        blamed(&locker.acquire("job", Duration::ZERO).call().unwrap_err()),
        Some(Argument::Ttl)
    );
    assert!(locker
        .semaphore("pool", 0)
        .unwrap_err()
        .is_invalid_argument());
    assert_eq!(redis.requests(), before);
}
