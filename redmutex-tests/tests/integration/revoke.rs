//! Polite revocation (`Locker::request_release`): another process asks the holder to let
//! go; the holder's lease learns it at its next renewal, as a signal distinct from loss,
//! and keeps the lock until it lets go — against real servers, for every primitive, on
//! one node, Redlock and (with the feature) a cluster.

use std::time::Duration;

use redmutex::{error::Argument, state::LockKind, Error, Locker};
use testkit::RedisServer;

use crate::common::{self, ms, multiplexed, multiplexed_all, Raw};

/// A renewal of a 600 ms lease comes every 200 ms: the request is heard within that.
const TTL: Duration = Duration::from_millis(600);

/// Waits for `lease` to hear a request, at most `within`; whether it did.
async fn hears<C: redmutex::connection::Connection, P: redmutex::claim::Held>(
    lease: &redmutex::Lease<C, P>,
    within: Duration,
) -> bool {
    tokio::time::timeout(within, lease.release_requested())
        .await
        .is_ok()
}

#[tokio::test]
async fn the_holder_hears_the_request_at_its_next_renewal_and_keeps_the_lock() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let holder = common::own_locker(&server, false).await;
    let asker = common::own_locker(&server, false).await;
    let lease = (holder.acquire("job", TTL).metadata("host=a").await.unwrap())
        .keep_alive()
        .unwrap();
    let signal = lease.signal();
    assert!(!lease.is_release_requested());

    let held = asker.request_release("job").await.unwrap().expect("held");
    assert_eq!(held.kind, LockKind::Lock);
    assert_eq!(held.holders[0].metadata.as_deref(), Some("host=a"));
    // Kept as long as the holder's TTL at the time: its next renewal comes before.
    let kept = raw.pttl("{job}:ask").await;
    assert!(kept > 0 && kept <= TTL.as_millis() as i64, "{kept}");
    assert!(hears(&lease, ms(1_000)).await, "no renewal brought it");
    assert!(lease.is_release_requested() && signal.is_release_requested());

    // A request, not a loss: the holder keeps the key, renewed, and nobody else gets in.
    tokio::time::sleep(ms(700)).await;
    assert!(!lease.is_lost() && !signal.is_lost());
    let once = asker
        .acquire("job", TTL)
        .retry(redmutex::retry::none())
        .await;
    assert!(once.unwrap_err().is_not_obtained());
    assert!(raw.exists("job").await);

    // Let go; the next holder is not asked (the request named the one before).
    lease.release().await.unwrap();
    let next = (asker.acquire("job", TTL).await.unwrap())
        .keep_alive()
        .unwrap();
    assert!(!hears(&next, ms(700)).await, "a later holder was asked");
    next.release().await.unwrap();

    // Nobody holds it: nothing to ask, nothing written.
    assert!(asker.request_release("job").await.unwrap().is_none());
    tokio::time::sleep(TTL).await;
    assert!(
        !raw.exists("{job}:ask").await,
        "the request outlived its holder"
    );
}

/// A semaphore's holders and a read-write lock's readers are all asked; a writer, a fair
/// lock's holder, a leader, and a multi-key lock's holder (asked through any of its keys)
/// too.
#[tokio::test]
async fn every_primitive_hears_it() {
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, false).await;
    let asker = common::own_locker(&server, false).await;

    let pool = holder.semaphore("pool", 3).unwrap();
    let one = pool.acquire(1, TTL).await.unwrap().keep_alive().unwrap();
    let two = pool.acquire(2, TTL).await.unwrap().keep_alive().unwrap();
    let held = asker.request_release("pool").await.unwrap().expect("held");
    assert_eq!((held.kind, held.holder_count), (LockKind::Semaphore, 2));
    assert!(hears(&one, ms(1_000)).await && hears(&two, ms(1_000)).await);
    one.release().await.unwrap();
    two.release().await.unwrap();

    let table = holder.rw_lock("table").unwrap();
    let r1 = table.read(TTL).await.unwrap().keep_alive().unwrap();
    let r2 = table.read(TTL).await.unwrap().keep_alive().unwrap();
    asker.request_release("table").await.unwrap().expect("read");
    assert!(hears(&r1, ms(1_000)).await && hears(&r2, ms(1_000)).await);
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let writer = table.write(TTL).await.unwrap().keep_alive().unwrap();
    asker
        .request_release("table")
        .await
        .unwrap()
        .expect("written");
    assert!(hears(&writer, ms(1_000)).await);
    writer.release().await.unwrap();

    let fair = holder
        .fair_lock("ledger")
        .unwrap()
        .acquire(TTL)
        .await
        .unwrap();
    let fair = fair.keep_alive().unwrap();
    asker
        .request_release("ledger")
        .await
        .unwrap()
        .expect("held");
    assert!(hears(&fair, ms(1_000)).await);
    fair.release().await.unwrap();

    let election = holder.election("leader").unwrap().with_ttl(TTL).unwrap();
    let leadership = election.campaign("node-1").await.unwrap();
    asker.request_release("leader").await.unwrap().expect("led");
    let heard = tokio::time::timeout(ms(1_000), leadership.release_requested()).await;
    assert!(heard.is_ok() && !leadership.is_lost());
    leadership.resign().await.unwrap();

    let both = holder.acquire_all(["a", "b"], TTL).await.unwrap();
    let both = both.keep_alive().unwrap();
    asker.request_release("b").await.unwrap().expect("held");
    assert!(hears(&both, ms(1_000)).await);
    assert!(!both.is_lost());
    both.release().await.unwrap();
}

/// What has no holder to ask is not asked: a foreign value, a tombstone of a forced
/// release. The request's own key is no lock key, and data of another kind there is an
/// error for the asker, never a loss for the holder.
#[tokio::test]
async fn nothing_without_a_holder_is_asked_and_the_companion_is_guarded() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);

    raw.set("theirs", "not ours").await;
    let foreign = locker
        .request_release("theirs")
        .await
        .unwrap()
        .expect("a key");
    assert_eq!(foreign.kind, LockKind::Foreign);
    assert!(!raw.exists("{theirs}:ask").await);

    // A lock's value copied by hand to a key without a TTL: redmutex never writes one, so
    // nobody holds it. Not asked, not made a tombstone (which would never expire), and
    // described as someone else's data.
    let original = locker.acquire("original", ms(30_000)).await.unwrap();
    let value = raw.get("original").await.expect("the lock's value");
    original.release().await.unwrap();
    let copy = String::from_utf8(value).unwrap();
    raw.set("copy", &copy).await;
    let asked = locker
        .request_release("copy")
        .await
        .unwrap()
        .expect("a key");
    assert_eq!(asked.kind, LockKind::Foreign);
    assert!(!raw.exists("{copy}:ask").await);
    let forced = locker.force_release("copy").await.unwrap().expect("a key");
    assert_eq!(forced.kind, LockKind::Foreign);
    assert_eq!(raw.get("copy").await, Some(copy.clone().into_bytes()));
    assert_eq!(raw.pttl("copy").await, -1);
    let described = locker.describe("copy").await.unwrap().expect("a key");
    assert_eq!(described.kind, LockKind::Foreign);
    let inspected = locker.inspect("copy").await.unwrap();
    assert!(
        inspected.foreign && inspected.metadata.is_none(),
        "{inspected:?}"
    );

    // The same for a semaphore's holders and details copied without a TTL.
    let permit = (locker.semaphore("sem", 3).unwrap())
        .acquire(1, ms(30_000))
        .await
        .unwrap();
    for (from, to) in [("sem", "fsem"), ("{sem}:permits", "{fsem}:permits")] {
        let dump: Vec<u8> = raw.run(redis::cmd("DUMP").arg(from)).await;
        let _: () = raw
            .run(redis::cmd("RESTORE").arg(to).arg(0).arg(dump))
            .await;
    }
    permit.release().await.unwrap();
    let mut zrange = redis::cmd("ZRANGE");
    zrange.arg("fsem").arg(0).arg(-1);
    let before: Vec<String> = raw.run(&mut zrange).await;
    assert_eq!(before.len(), 1);
    let asked = locker
        .request_release("fsem")
        .await
        .unwrap()
        .expect("a key");
    assert_eq!(asked.kind, LockKind::Foreign);
    assert!(!raw.exists("{fsem}:ask").await);
    let forced = locker.force_release("fsem").await.unwrap().expect("a key");
    assert_eq!(forced.kind, LockKind::Foreign);
    let after: Vec<String> = raw.run(&mut zrange).await;
    assert_eq!(after, before, "left as it was");
    assert_eq!(raw.pttl("fsem").await, -1);

    let lock = locker.acquire("gone", ms(30_000)).await.unwrap();
    locker.force_release("gone").await.unwrap();
    let tomb = locker
        .request_release("gone")
        .await
        .unwrap()
        .expect("a tombstone");
    assert_eq!(tomb.forced, 1);
    assert!(!raw.exists("{gone}:ask").await);
    drop(lock);

    let error = locker.request_release("{job}:ask").await.unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(ref e) if e.argument == Argument::Key));

    let lease = (locker.acquire("job", TTL).await.unwrap())
        .keep_alive()
        .unwrap();
    raw.set("{job}:ask", "someone else's").await;
    let refused = locker.request_release("job").await.unwrap_err();
    assert!(refused.to_string().contains("another kind"), "{refused}");
    assert!(matches!(refused, Error::InvalidArgument(ref e) if e.argument == Argument::Key));
    tokio::time::sleep(ms(700)).await;
    assert!(!lease.is_lost() && !lease.is_release_requested());
    lease.release().await.unwrap();
}

/// Redlock: the request goes to every node that answers; with one of three down, the
/// holder still hears it, and keeps its lock.
#[tokio::test]
async fn redlock_holders_hear_it_with_a_node_down() {
    let servers = RedisServer::spawn_many(3);
    let holder = Locker::redlock(multiplexed_all(&servers).await).unwrap();
    let asker = Locker::redlock(multiplexed_all(&servers).await).unwrap();
    let lease = (holder.acquire("job", ms(1_500)).await.unwrap())
        .keep_alive()
        .unwrap();
    servers[2].kill();
    let held = asker.request_release("job").await.unwrap().expect("held");
    assert_eq!(held.kind, LockKind::Lock);
    assert!(hears(&lease, ms(2_000)).await);
    assert!(!lease.is_lost());
    lease.release().await.unwrap();
}

/// Redlock: a request that failed for want of a quorum (one node emptied, one frozen) is
/// not heard, though the one node that answered stored it: the asker was told it failed,
/// and the holder keeps working. Before, one node's word was enough.
#[tokio::test]
async fn a_redlock_request_without_a_quorum_is_not_heard() {
    let servers = RedisServer::spawn_many(3);
    let holder = Locker::redlock(multiplexed_all(&servers).await).unwrap();
    let asker = Locker::redlock(multiplexed_all(&servers).await).unwrap();
    let lease = (holder.acquire("job", ms(3_000)).await.unwrap())
        .keep_alive()
        .unwrap();
    assert_eq!(servers[1].command(&["DEL", "job"]), ":1\r\n");
    servers[2].pause();
    let failed = asker.request_release("job").await;
    servers[2].resume();
    assert!(matches!(failed, Err(Error::NoQuorum(_))), "{failed:?}");
    assert_eq!(servers[0].command(&["EXISTS", "{job}:ask"]), ":1\r\n");
    assert!(
        !hears(&lease, ms(2_500)).await,
        "a failed request was heard"
    );
    assert!(!lease.is_lost());
    lease.release().await.unwrap();
}

/// Waits until `channel` on `server` has `count` subscribers, at most `within`.
async fn until_subscribers(server: &RedisServer, channel: &str, count: u32, within: Duration) {
    let until = std::time::Instant::now() + within;
    let want = format!(":{count}\r\n");
    while !server
        .command(&["PUBSUB", "NUMSUB", channel])
        .ends_with(&want)
    {
        assert!(
            std::time::Instant::now() < until,
            "{channel}: {:?}",
            server.command(&["PUBSUB", "NUMSUB", channel])
        );
        tokio::time::sleep(ms(20)).await;
    }
}

/// On Redlock over `servers`: an asker, and a 30 s lease on `job` (renewed every 10 s)
/// whose locker has wake-up, once every node has its subscription to the ask channel.
async fn listening_redlock_holder(
    servers: &[RedisServer],
) -> (
    Locker<redis::aio::MultiplexedConnection>,
    redmutex::Lease<redis::aio::MultiplexedConnection>,
) {
    let holder = common::waking_redlock(multiplexed_all(servers).await, servers);
    let asker = Locker::redlock(multiplexed_all(servers).await).unwrap();
    let lease = (holder.acquire("job", ms(30_000)).await.unwrap())
        .keep_alive()
        .unwrap();
    for server in servers {
        until_subscribers(server, "job:~a", 1, ms(2_000)).await;
    }
    (asker, lease)
}

/// With wake-up, a request reaches a kept-alive holder at once, long before its next
/// renewal (a 30 s lease renews every 10 s): its announcement prompts a renewal, which
/// finds the request where it is kept. A message on the channel from anyone else costs a
/// renewal and is not taken for a request. The subscription ends once no lease of the key
/// is kept.
#[tokio::test]
async fn with_wake_up_the_holder_hears_a_request_at_once() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let holder = common::own_locker(&server, true).await;
    let asker = common::own_locker(&server, false).await;
    let long = ms(30_000);
    let lease = (holder.acquire("job", long).await.unwrap())
        .keep_alive()
        .unwrap();
    until_subscribers(&server, "job:~a", 1, ms(2_000)).await;

    let before = lease.renewals();
    let heard: i64 = raw
        .run(redis::cmd("PUBLISH").arg("job:~a").arg("ask"))
        .await;
    assert_eq!(heard, 1);
    let until = std::time::Instant::now() + ms(1_000);
    while lease.renewals() == before {
        assert!(
            std::time::Instant::now() < until,
            "the message prompted no renewal"
        );
        tokio::time::sleep(ms(10)).await;
    }
    assert!(
        !lease.is_release_requested(),
        "a bare message taken for a request"
    );

    asker.request_release("job").await.unwrap().expect("held");
    assert!(
        hears(&lease, ms(1_000)).await,
        "heard only at the next renewal"
    );
    assert!(!lease.is_lost());

    // A semaphore's holder, through the same subscriber connection.
    let pool = holder.semaphore("pool", 2).unwrap();
    let permit = (pool.acquire(1, long).await.unwrap()).keep_alive().unwrap();
    until_subscribers(&server, "pool:~a", 1, ms(2_000)).await;
    asker.request_release("pool").await.unwrap().expect("held");
    assert!(
        hears(&permit, ms(1_000)).await,
        "heard only at the next renewal"
    );

    lease.release().await.unwrap();
    permit.release().await.unwrap();
    // Kept a moment for a key held again soon (as a waiters' channel is), then dropped.
    until_subscribers(&server, "job:~a", 0, ms(5_000)).await;
    until_subscribers(&server, "pool:~a", 0, ms(5_000)).await;
}

/// Redlock with wake-up: every node announces the request, and the renewal it prompts
/// counts the nodes. A request stored on one node of three (one emptied, one frozen) is
/// not heard; one stored on a quorum is, at once.
#[tokio::test]
async fn a_redlock_holder_with_wake_up_hears_at_once_only_a_quorums_request() {
    let servers = RedisServer::spawn_many(3);
    let (asker, lease) = listening_redlock_holder(&servers).await;
    assert_eq!(servers[1].command(&["DEL", "job"]), ":1\r\n");
    servers[2].pause();
    let failed = asker.request_release("job").await;
    servers[2].resume();
    assert!(matches!(failed, Err(Error::NoQuorum(_))), "{failed:?}");
    assert!(
        !hears(&lease, ms(1_000)).await,
        "one node's request was heard"
    );

    asker.request_release("job").await.unwrap().expect("held");
    assert!(
        hears(&lease, ms(1_000)).await,
        "heard only at the next renewal"
    );
    assert!(!lease.is_lost());
    lease.release().await.unwrap();
}

/// Redlock: each request counts on its own. Two requests that each reached one node of
/// three (the others swallowed them: never run) failed, and stored the holder's token on
/// two nodes between them; the holder hears neither. Before, the two added up to a quorum
/// and the holder heard a request nobody had made.
#[tokio::test]
async fn redlock_requests_that_each_failed_on_a_minority_do_not_add_up() {
    let servers = RedisServer::spawn_many(3);
    let proxies: Vec<testkit::Proxy> = (servers.iter())
        .map(|s| testkit::Proxy::start(s.addr()))
        .collect();
    let holder = Locker::redlock(multiplexed_all(&servers).await).unwrap();
    // Renewed every second: the requests (kept as long as its TTL) outlive the two tries.
    let lease = (holder.acquire("job", ms(3_000)).await.unwrap())
        .keep_alive()
        .unwrap();
    for reached in [0, 1] {
        let mut conns = Vec::new();
        for proxy in &proxies {
            let client = redis::Client::open(proxy.url()).unwrap();
            conns.push(client.get_multiplexed_async_connection().await.unwrap());
        }
        let asker = Locker::redlock(conns).unwrap();
        for (node, proxy) in proxies.iter().enumerate() {
            proxy.blackhole(node != reached);
        }
        let failed = asker.request_release("job").await;
        assert!(matches!(failed, Err(Error::NoQuorum(_))), "{failed:?}");
        for proxy in &proxies {
            proxy.blackhole(false);
        }
        let asks = servers[reached].command(&["ZCARD", "{job}:ask"]);
        assert_eq!(
            asks, ":1\r\n",
            "node {reached} stored the request: {failed:?}"
        );
    }
    // Two renewals, and neither hears a request.
    assert!(!hears(&lease, ms(2_200)).await, "two minorities added up");
    assert!(!lease.is_lost());

    let asker = Locker::redlock(multiplexed_all(&servers).await).unwrap();
    asker.request_release("job").await.unwrap().expect("held");
    assert!(hears(&lease, ms(1_500)).await);
    lease.release().await.unwrap();
}

/// The announcement only prompts a renewal, and prompts are coalesced: a flood of
/// messages on a holder's ask channel renews it at most once per 100 ms, and is never
/// taken for a request. A request announced while the holder's subscriber connection was
/// down is heard once it is subscribed again, not at the next renewal 10 s later.
#[tokio::test]
async fn prompts_are_coalesced_and_a_resubscribed_holder_catches_up() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let holder = common::own_locker(&server, true).await;
    let asker = common::own_locker(&server, false).await;
    let lease = (holder.acquire("job", ms(30_000)).await.unwrap())
        .keep_alive()
        .unwrap();
    until_subscribers(&server, "job:~a", 1, ms(2_000)).await;

    let before = lease.renewals();
    let flooded = std::time::Instant::now();
    // A message every millisecond or so, as fast as a renewal comes back.
    for _ in 0..300 {
        let _: i64 = raw
            .run(redis::cmd("PUBLISH").arg("job:~a").arg("ask"))
            .await;
        tokio::time::sleep(ms(1)).await;
    }
    tokio::time::sleep(ms(200)).await;
    let renewed = lease.renewals() - before;
    let allowed = flooded.elapsed().as_millis() as u64 / 100 + 2;
    assert!(
        renewed >= 1 && renewed <= allowed,
        "{renewed} renewals, {allowed} allowed"
    );
    assert!(!lease.is_release_requested() && !lease.is_lost());

    // The subscriber connection cut, and the request made before it is back.
    let killed: i64 = raw
        .run(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"))
        .await;
    assert_eq!(killed, 1);
    asker.request_release("job").await.unwrap().expect("held");
    assert!(
        hears(&lease, ms(2_000)).await,
        "heard only at the next renewal"
    );
    lease.release().await.unwrap();
}

/// A request announced while a renewal is on the way (which read the key before the
/// request was stored) is heard by the renewal after it, not at the next one 10 s later:
/// Redlock, one node frozen, so that a renewal waits for it half a second.
#[tokio::test]
async fn a_request_announced_during_a_renewal_is_heard_by_the_next() {
    let servers = RedisServer::spawn_many(3);
    let (asker, lease) = listening_redlock_holder(&servers).await;
    servers[2].pause();
    let before = lease.renewals();
    // A bare message: a renewal now, which waits for the frozen node.
    assert_eq!(servers[0].command(&["PUBLISH", "job:~a", "x"]), ":1\r\n");
    tokio::time::sleep(ms(50)).await;
    asker.request_release("job").await.unwrap().expect("held");
    let heard = hears(&lease, ms(3_000)).await;
    servers[2].resume();
    assert!(heard, "heard only at the next renewal");
    assert!(
        lease.renewals() >= before + 2,
        "the prompted renewal, then one more"
    );
    lease.release().await.unwrap();
}

/// With wake-up, a kept-alive holder whose key an operator forced away is told "lost" at
/// once (the force is announced where requests to let go are), long before its next
/// renewal (a 30 s lease renews every 10 s): with the lock-delay (a tombstone), at once
/// (the key gone) — and then its locker's waiter for the key, which a lease's own locker
/// wakes only when it learns the lease is gone, gets the key at once rather than at its
/// 10 s poll (the simulator found it waiting, seed 19844). A semaphore's holder too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wake_up_a_forced_holder_is_told_at_once_and_its_lockers_waiter_served() {
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, true).await;
    let operator = common::own_locker(&server, false).await;
    let long = ms(30_000);
    let told_within = ms(2_000);

    let lease = (holder.acquire("job", long).await.unwrap())
        .keep_alive()
        .unwrap();
    until_subscribers(&server, "job:~a", 1, ms(2_000)).await;
    operator.force_release("job").await.unwrap().expect("held");
    let reason = tokio::time::timeout(told_within, lease.lost())
        .await
        .expect("told at its next renewal only");
    assert!(
        matches!(reason, redmutex::LostReason::NotHeld),
        "{reason:?}"
    );

    let pool = holder.semaphore("pool", 2).unwrap();
    let permit = (pool.acquire(1, long).await.unwrap()).keep_alive().unwrap();
    until_subscribers(&server, "pool:~a", 1, ms(2_000)).await;
    operator.force_release("pool").await.unwrap().expect("held");
    tokio::time::timeout(told_within, permit.lost())
        .await
        .expect("a permit told at its next renewal only");

    let lease = (holder.acquire("task", long).await.unwrap())
        .keep_alive()
        .unwrap();
    until_subscribers(&server, "task:~a", 1, ms(2_000)).await;
    let waiting = common::waiting_for(&holder, &["task"]);
    // Its first try found the key held, with half a minute left.
    tokio::time::sleep(ms(300)).await;
    operator
        .force_release_now("task")
        .await
        .unwrap()
        .expect("held");
    let forced = std::time::Instant::now();
    let (got_at, lock) = tokio::time::timeout(ms(15_000), waiting)
        .await
        .expect("the waiter ended")
        .unwrap();
    let waited = got_at - forced;
    assert!(
        waited < told_within,
        "got the key {waited:?} after the force"
    );
    lock.unwrap().release().await.unwrap();
    tokio::time::timeout(told_within, lease.lost())
        .await
        .expect("the forced lease told");
}

/// A kept-alive holder that was asked to let go and has not yet (it finishes its work
/// first) is still told at once when an operator then forces the release: the force's
/// announcement prompts a renewal like the request's did (the simulator found such
/// holders told only at their next renewal, seed 87).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_asked_to_let_go_then_forced_is_told_at_once() {
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, true).await;
    let operator = common::own_locker(&server, false).await;
    let told_within = ms(2_000);
    let lease = (holder.acquire("job", ms(30_000)).await.unwrap())
        .keep_alive()
        .unwrap();
    until_subscribers(&server, "job:~a", 1, ms(2_000)).await;
    operator
        .request_release("job")
        .await
        .unwrap()
        .expect("held");
    tokio::time::timeout(told_within, lease.release_requested())
        .await
        .expect("the request heard at once");
    // (Past the gap a lease keeps between prompted renewals.)
    tokio::time::sleep(ms(200)).await;
    operator.force_release("job").await.unwrap().expect("held");
    let reason = tokio::time::timeout(told_within, lease.lost())
        .await
        .expect("the force heard at once, not at the next renewal (10 s)");
    assert!(
        matches!(reason, redmutex::LostReason::NotHeld),
        "{reason:?}"
    );
}
