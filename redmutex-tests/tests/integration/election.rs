//! Leader election against real servers: one leader at a time among candidates of separate
//! lockers, terms that only go up, proclaim, resign, leader(), observe() driven by
//! announcements and noticing an expiry; a leader cut off loses its leadership loudly and
//! is replaced; a campaign ends at once when its connection dies; Redlock; bad input.

use std::time::Duration;

use crate::common::{self, blamed, ms, multiplexed, Raw};
use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redmutex::{error::Argument, Election, Error, Leader, Locker};
use testkit::{Proxy, RedisServer};
use tokio::time::{timeout, Instant};

/// A candidate of its own (as another process would be), with wake-up, on `url`.
async fn candidate(url: &str, ttl: Duration) -> Election<MultiplexedConnection> {
    let client = redis::Client::open(url).unwrap();
    Locker::new(common::multiplexed_url(url, ms(300)).await)
        .with_wake_up([client])
        .unwrap()
        .election("leader")
        .unwrap()
        .with_ttl(ttl)
        .unwrap()
}

/// Takes the next item of an observer within `within`.
async fn next_change<S>(changes: &mut S, within: Duration) -> Option<Leader>
where
    S: futures_util::Stream<Item = Result<Option<Leader>, Error>> + Unpin,
{
    let item = timeout(within, changes.next()).await;
    item.expect("no change observed in time").unwrap().unwrap()
}

/// Three candidates: one leads; the others wait; each resignation hands over to the next,
/// with a higher term; observers see each change at once (they poll only every 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_rising_terms_and_observers_told_at_once() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let ttl = ms(30_000);
    let watcher = candidate(&server.url(), ttl).await;
    let mut changes = Box::pin(watcher.observe());
    assert_eq!(next_change(&mut changes, ms(2_000)).await, None);
    let first = candidate(&server.url(), ttl)
        .await
        .campaign("a")
        .await
        .unwrap();
    let seen = next_change(&mut changes, ms(1_500)).await.unwrap();
    assert_eq!((seen.value.as_str(), seen.term), ("a", Some(first.term())));
    let waiting: Vec<_> = ["b", "c"]
        .into_iter()
        .map(|value| {
            let url = server.url();
            tokio::spawn(async move { candidate(&url, ttl).await.campaign(value).await })
        })
        .collect();
    tokio::time::sleep(ms(300)).await;
    assert!(waiting.iter().all(|w| !w.is_finished()), "a second leader");
    let leader = watcher.leader().await.unwrap().unwrap();
    assert_eq!(leader.value, "a");
    assert!(leader.ttl.unwrap() > ms(20_000));

    let mut term = first.term();
    first.resign().await.unwrap();
    let mut values = Vec::new();
    let mut waiting = waiting;
    for _ in 0..2 {
        // Whoever won next is seen by the observer, possibly after a moment with none.
        let mut seen = next_change(&mut changes, ms(1_500)).await;
        if seen.is_none() {
            seen = next_change(&mut changes, ms(1_500)).await;
        }
        let seen = seen.expect("a new leader");
        assert!(seen.term.unwrap() > term, "terms go up");
        term = seen.term.unwrap();
        let index = loop {
            if let Some(i) = waiting.iter().position(|w| w.is_finished()) {
                break i;
            }
            tokio::time::sleep(ms(5)).await;
        };
        let leadership = waiting.remove(index).await.unwrap().unwrap();
        assert_eq!(leadership.term(), term);
        assert_eq!(leadership.value(), seen.value);
        values.push(seen.value.clone());
        leadership.resign().await.unwrap();
    }
    values.sort();
    assert_eq!(values, ["b", "c"]);
    assert_eq!(next_change(&mut changes, ms(1_500)).await, None);
    assert_eq!(raw.dbsize().await, 0);
}

/// A leader proclaims a new value: everyone reads it at once, the TTL is not extended; a
/// deposed leader's proclamation is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proclaim_sets_the_value_keeps_the_ttl_and_is_refused_once_deposed() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let election = candidate(&server.url(), ms(30_000)).await;
    let mut changes = Box::pin(election.observe());
    assert_eq!(next_change(&mut changes, ms(2_000)).await, None);
    let mut leadership = election.campaign("v1").await.unwrap();
    assert_eq!(
        next_change(&mut changes, ms(1_500)).await.unwrap().value,
        "v1"
    );
    let _: () = raw
        .run(redis::cmd("PEXPIRE").arg("leader").arg(20_000))
        .await;
    leadership.proclaim("v2").await.unwrap();
    assert_eq!(leadership.value(), "v2");
    let seen = next_change(&mut changes, ms(1_500)).await.unwrap();
    assert_eq!(
        (seen.value.as_str(), seen.term),
        ("v2", Some(leadership.term()))
    );
    assert!(
        raw.pttl("leader").await <= 20_000,
        "proclaim extended the TTL"
    );
    let too_long = "x".repeat(redmutex::limits::MAX_METADATA_LEN + 1);
    let refused = leadership.proclaim(too_long).await.unwrap_err();
    assert_eq!(blamed(&refused), Some(Argument::Metadata));
    // Deposed (its key deleted, another leader in): refused, nothing changed.
    let _: () = raw.run(redis::cmd("DEL").arg("leader")).await;
    let other = candidate(&server.url(), ms(30_000))
        .await
        .campaign("other")
        .await
        .unwrap();
    let deposed = leadership.proclaim("v3").await.unwrap_err();
    assert!(deposed.is_not_held(), "{deposed}");
    assert_eq!(election.leader().await.unwrap().unwrap().value, "other");
    assert!(other.term() > leadership.term());
    other.resign().await.unwrap();
    drop(leadership);
    tokio::time::sleep(ms(100)).await;
    assert_eq!(raw.dbsize().await, 0);
}

/// A leader cut off from Redis is told it lost the leadership before its lease runs out;
/// its key expires, which the observer notices with nobody announcing it, and a waiting
/// candidate takes over with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_loses_loudly_and_is_replaced_after_its_ttl() {
    let server = RedisServer::spawn();
    let proxy = Proxy::start(server.addr());
    let ttl = ms(900);
    let cut_off = candidate(&proxy.url(), ttl).await;
    let leadership = cut_off.campaign("doomed").await.unwrap();
    let observer = candidate(&server.url(), ms(30_000)).await;
    let mut changes = Box::pin(observer.observe());
    assert_eq!(
        next_change(&mut changes, ms(2_000)).await.unwrap().value,
        "doomed"
    );
    let next_candidate = candidate(&server.url(), ttl).await;
    let next = tokio::spawn(async move { next_candidate.campaign("next").await });
    proxy.blackhole(true);
    let valid_until = leadership.valid_until();
    let reason = timeout(ms(3_000), leadership.lost()).await.unwrap();
    assert!(Instant::now() <= valid_until + ms(50), "{reason}");
    // The observer's poll is 10 s: the expiry itself wakes it.
    let started = Instant::now();
    let mut seen = next_change(&mut changes, ms(3_000)).await;
    if seen.is_none() {
        seen = next_change(&mut changes, ms(3_000)).await;
    }
    assert!(started.elapsed() < ms(3_000));
    let seen = seen.expect("the next leader");
    let next = next.await.unwrap().unwrap();
    assert_eq!(seen.value, "next");
    assert!(next.term() > leadership.term());
    proxy.blackhole(false);
    next.resign().await.unwrap();
}

/// A campaign never outlives its connection: when the server goes away while it waits,
/// the campaign ends with the error at once instead of retrying into a later win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_ends_at_once_when_its_connection_dies() {
    let server = RedisServer::spawn();
    let proxy = Proxy::start(server.addr());
    let leader = candidate(&server.url(), ms(30_000))
        .await
        .campaign("a")
        .await
        .unwrap();
    let waiting = candidate(&proxy.url(), ms(30_000)).await;
    let campaign = tokio::spawn(async move { waiting.campaign("b").await });
    tokio::time::sleep(ms(300)).await;
    assert!(!campaign.is_finished());
    proxy.refuse(true);
    proxy.cut();
    let ended = timeout(ms(5_000), campaign)
        .await
        .expect("still campaigning");
    let error = ended.unwrap().unwrap_err();
    assert!(!error.is_not_obtained(), "{error}");
    assert!(matches!(error, Error::Redis(_)), "{error}");
    leader.resign().await.unwrap();
}

/// Over Redlock: one leader, terms from the quorum's fences, a resignation hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_over_redlock() {
    let servers = RedisServer::spawn_many(3);
    let locker = |_: usize| async {
        let conns = common::multiplexed_all(&servers).await;
        (common::waking_redlock(conns, &servers))
            .election("leader")
            .unwrap()
    };
    let a = locker(0).await.campaign("a").await.unwrap();
    let b = locker(1).await;
    let b = tokio::spawn(async move { b.campaign("b").await });
    tokio::time::sleep(ms(300)).await;
    assert!(!b.is_finished());
    let observer = locker(2).await;
    assert_eq!(observer.leader().await.unwrap().unwrap().value, "a");
    servers[2].kill();
    let term = a.term();
    a.resign().await.unwrap();
    let b = timeout(ms(5_000), b).await.unwrap().unwrap().unwrap();
    assert!(b.term() > term);
    assert_eq!(observer.leader().await.unwrap().unwrap().value, "b");
    b.resign().await.unwrap();
    assert!(observer.leader().await.unwrap().is_none());
}

/// Over Redlock, observers are told of a resignation at once (they read the leader again
/// only every 10 s): the release announces itself on every node that released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_resignation_is_announced_to_observers_at_once() {
    let servers = RedisServer::spawn_many(3);
    let ttl = ms(30_000);
    let observer = redlock_candidate(&servers).await.with_ttl(ttl).unwrap();
    let mut changes = Box::pin(observer.observe());
    assert_eq!(next_change(&mut changes, ms(2_000)).await, None);
    let leader = (redlock_candidate(&servers).await.with_ttl(ttl).unwrap())
        .campaign("a")
        .await
        .unwrap();
    let seen = next_change(&mut changes, ms(1_500)).await.unwrap();
    assert_eq!(seen.value, "a");
    // The observer read the leader and waits (the stream reads only while polled).
    assert!(timeout(ms(300), changes.next()).await.is_err());
    let started = Instant::now();
    leader.resign().await.unwrap();
    assert_eq!(next_change(&mut changes, ms(1_500)).await, None);
    assert!(started.elapsed() < ms(1_500), "{:?}", started.elapsed());
}

/// A candidate of its own (as another process would be), with wake-up, on Redlock over
/// `servers`.
async fn redlock_candidate(servers: &[RedisServer]) -> Election<MultiplexedConnection> {
    let conns = common::multiplexed_all(servers).await;
    (common::waking_redlock(conns, servers))
        .election("leader")
        .unwrap()
}

/// The election's key and its fence counter's, as the servers name them.
fn key_and_counter(election: &Election<MultiplexedConnection>) -> (String, String) {
    let key = String::from_utf8(election.key().to_vec()).unwrap();
    let counter = format!("{{{key}}}:fence");
    (key, counter)
}

/// On Redlock, the leader's term is what the nodes that hold its key say: a counter raised
/// elsewhere (a rival's failed try on a node where the leader's key was lost) is no term
/// anyone holds, and observers must not report it.
#[tokio::test]
async fn a_redlock_leaders_term_is_its_own_whatever_a_minority_counter_says() {
    let servers = RedisServer::spawn_many(3);
    let leadership = redlock_candidate(&servers)
        .await
        .campaign("a")
        .await
        .unwrap();
    let election = redlock_candidate(&servers).await;
    let (key, counter) = key_and_counter(&election);
    // Node 2 lost the leader's key; a rival's try got it there, raised the counter, and
    // was undone.
    servers[2].command(&["DEL", &key]);
    let raised = (leadership.term() + 1_000_000).to_string();
    assert_eq!(servers[2].command(&["SET", &counter, &raised]), "+OK\r\n");
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.value, "a");
    assert_eq!(leader.term, Some(leadership.term()));
    leadership.resign().await.unwrap();
    assert!(election.leader().await.unwrap().is_none());
}

/// On Redlock, two nodes agreed on the leader's fence and the third answered a lower one
/// (nodes' counters differ). Its term is still its own when a node that agreed is down:
/// every node that took the claim now stores the fence handed out, not only a quorum of
/// them (found by the simulator: an observer read the lower fence as the leader's term).
#[tokio::test]
async fn a_redlock_leaders_term_is_its_own_while_a_node_that_holds_it_is_down() {
    let servers = RedisServer::spawn_many(3);
    let election = redlock_candidate(&servers).await;
    let (_, counter) = key_and_counter(&election);
    // Far above any server clock in microseconds: nodes 1 and 2 hand out the same fence.
    for server in &servers[1..] {
        server.command(&["SET", &counter, "5000000000000000", "PX", "600000"]);
    }
    let leadership = redlock_candidate(&servers)
        .await
        .campaign("a")
        .await
        .unwrap();
    assert_eq!(leadership.term(), 5_000_000_000_000_001);
    servers[1].kill();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("a", Some(leadership.term()))
    );
}

/// On Redlock, a holder that took no fence — a plain lock on the election's name — is
/// reported with the latest term handed out, not with the older counters its own nodes
/// kept: node 0 missed the last leader's term, and the lock holds nodes 0 and 1 (node 2
/// holds foreign data). Found by the simulator (seed 20265): an observer was told the
/// lock's "term" was an older leader's, after that leader's.
#[tokio::test]
async fn a_redlock_holder_without_a_fence_is_reported_with_the_latest_term() {
    let servers = RedisServer::spawn_many(3);
    let leadership = redlock_candidate(&servers)
        .await
        .campaign("a")
        .await
        .unwrap();
    let term = leadership.term();
    leadership.resign().await.unwrap();
    let election = redlock_candidate(&servers).await;
    let (key, counter) = key_and_counter(&election);
    let older = (term - 1_000).to_string();
    assert_eq!(servers[0].command(&["SET", &counter, &older]), "+OK\r\n");
    servers[2].command(&["SET", &key, "foreign", "PX", "60000"]);
    let locker = common::waking_redlock(common::multiplexed_all(&servers).await, &servers);
    let lock = locker
        .acquire("leader", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(locker.inspect("leader").await.unwrap().fence, Some(term));
    let holder = election
        .leader()
        .await
        .unwrap()
        .expect("the lock holds a quorum");
    assert_eq!((holder.value.as_str(), holder.term), ("", Some(term)));
    lock.release().await.unwrap();
    servers[2].command(&["DEL", &key]);
}

/// A Redlock locker over `urls`, its connections answering within 300 ms.
async fn redlock_over(urls: &[String]) -> Locker<MultiplexedConnection> {
    let mut conns = Vec::new();
    for url in urls {
        conns.push(common::multiplexed_url(url, ms(300)).await);
    }
    Locker::redlock(conns).unwrap()
}

/// On Redlock, the latest fence is stored on a quorum; a holder that took no fence, on
/// nodes that kept older counters, cannot say it. With node 0 silent, the nodes that
/// answer hold the latest fence on one node and an older one on the other: `inspect` and
/// `leader()` say nobody can tell, rather than the older term (they did, after reporting
/// the latest one: found by an adversarial review). Once the holder takes a fence of its
/// own, it is on every node the holder reaches, and told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_holder_without_a_fence_is_not_given_an_older_term_with_a_node_silent() {
    let servers = RedisServer::spawn_many(3);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let direct = redlock_over(&urls).await;
    let first = direct.acquire("e", ms(10_000)).with_fence().await.unwrap();
    let older = first.fence().await.unwrap();
    first.release().await.unwrap();
    // The next fence reaches nodes 0 and 1 only.
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.addr())).collect();
    let proxied: Vec<String> = proxies.iter().map(|p| p.url()).collect();
    let partial = redlock_over(&proxied).await;
    proxies[2].blackhole(true);
    let second = partial.acquire("e", ms(10_000)).with_fence().await.unwrap();
    let latest = second.fence().await.unwrap();
    assert!(latest > older);
    second.release().await.unwrap();
    // A plain lock on all three nodes, read by all of them, then without node 0.
    let held = direct.acquire("e", ms(30_000)).await.unwrap();
    assert_eq!(direct.inspect("e").await.unwrap().fence, Some(latest));
    let term = direct
        .election("e")
        .unwrap()
        .leader()
        .await
        .unwrap()
        .unwrap()
        .term;
    assert_eq!(term, Some(latest));
    proxies[2].blackhole(false);
    let reader = redlock_over(&proxied).await;
    proxies[0].blackhole(true);
    let cannot_tell = reader.inspect("e").await;
    assert!(
        matches!(cannot_tell, Err(Error::NoQuorum(_))),
        "{cannot_tell:?}"
    );
    let cannot_tell = reader.election("e").unwrap().leader().await;
    assert!(
        matches!(cannot_tell, Err(Error::NoQuorum(_))),
        "{cannot_tell:?}"
    );
    let own = held.fence().await.unwrap();
    assert!(own > latest);
    assert_eq!(reader.inspect("e").await.unwrap().fence, Some(own));
    held.release().await.unwrap();
}

/// On Redlock, who leads is what a quorum says: foreign data on one node does not unseat
/// the leader holding the others — and when one of those is down, the answers (the
/// leader on one node, foreign data on another) cannot tell who leads: an error, never
/// "nobody leads" (found by the simulator, with a rival's claim on a minority).
#[tokio::test]
async fn a_redlock_election_says_nobody_can_tell_rather_than_nobody_leads() {
    let servers = RedisServer::spawn_many(3);
    let leadership = redlock_candidate(&servers)
        .await
        .campaign("a")
        .await
        .unwrap();
    let election = redlock_candidate(&servers).await;
    let key = String::from_utf8(election.key().to_vec()).unwrap();
    servers[2].command(&["SET", &key, "not a lock", "PX", "60000"]);
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("a", Some(leadership.term()))
    );
    servers[1].kill();
    let unknown = election.leader().await.unwrap_err();
    assert!(matches!(unknown, Error::NoQuorum(_)), "{unknown:?}");
    drop(leadership);
}

/// On Redlock, a forced release that reached one node (an operator's, pointed at that node
/// alone) leaves a tombstone there, the leader's key on another, and nothing on the third
/// (it restarted empty): the leader may still lead, and the tombstone keeps its place.
/// Nobody can tell who leads — an error, never "nobody leads" (found by the simulator,
/// seeds 18963 and 59331, with a force under way).
#[tokio::test]
async fn a_redlock_election_half_forced_says_nobody_can_tell() {
    let servers = RedisServer::spawn_many(3);
    // Without wake-up: it hears of the force only at its next renewal, in 5 s.
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let leadership = (redlock_over(&urls).await.election("leader").unwrap())
        .campaign("a")
        .await
        .unwrap();
    let election = redlock_candidate(&servers).await;
    let key = String::from_utf8(election.key().to_vec()).unwrap();
    let operator = Locker::new(multiplexed(&servers[0]).await);
    let was = operator.force_release(&key).await.unwrap().unwrap();
    assert_eq!(was.holders[0].metadata.as_deref(), Some("a"));
    assert!(servers[0].command(&["GET", &key]).contains("~forced~"));
    assert_eq!(servers[2].command(&["DEL", &key]), ":1\r\n");
    let started = Instant::now();
    let unknown = election.leader().await.unwrap_err();
    assert!(matches!(unknown, Error::NoQuorum(_)), "{unknown:?}");
    // It asked again for a while (a force under way completes within a round trip).
    assert!(started.elapsed() >= ms(500), "{:?}", started.elapsed());
    // The force completed on the leader's other node: the tombstones hold a quorum, and
    // the leader is reported until they end, as on one node.
    Locker::new(multiplexed(&servers[1]).await)
        .force_release(&key)
        .await
        .unwrap()
        .unwrap();
    let leader = election.leader().await.unwrap().expect("still reported");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("a", Some(leadership.term()))
    );
    drop(leadership);
}

/// A campaign can be bounded and watched as any acquire: a deadline ends it with "not
/// obtained", each look that found another leader is reported, and its pauses follow the
/// strategy given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_takes_a_deadline_a_strategy_and_a_failed_try_callback() {
    let server = RedisServer::spawn();
    let leader = candidate(&server.url(), ms(30_000))
        .await
        .campaign("a")
        .await
        .unwrap();
    let looks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = looks.clone();
    let started = Instant::now();
    // Two pauses, then one that would end past the deadline: it ends at the deadline, for
    // a last look sent there — a look sent at the deadline waits for its reply (up to the
    // TTL), so the answer is "not obtained" however slow the machine; a look sent just
    // before the deadline and unanswered at it would rightly be "unknown".
    let refused = (candidate(&server.url(), ms(30_000)).await.campaign("b"))
        .retry([ms(50), ms(50), ms(60_000)])
        .deadline(ms(400))
        .on_failed_try(move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert!(refused.is_not_obtained(), "{refused}");
    assert!(started.elapsed() >= ms(400));
    let looks = looks.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(looks, 4, "looks at 0, 50 and 100 ms, and at the deadline");
    assert_eq!(leader.value(), "a");
    leader.resign().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    assert_eq!(
        blamed(&locker.election("").unwrap_err()),
        Some(Argument::Key)
    );
    assert_eq!(
        blamed(&locker.election("{x}:fence").unwrap_err()),
        Some(Argument::Key)
    );
    let unfenced = Locker::new(multiplexed(&server).await).without_fences();
    assert_eq!(
        blamed(&unfenced.election("e").unwrap_err()),
        Some(Argument::Fences)
    );
    let election = locker.election("e").unwrap();
    assert_eq!(
        blamed(&election.clone().with_ttl(Duration::ZERO).unwrap_err()),
        Some(Argument::Ttl)
    );
    let too_long = "x".repeat(redmutex::limits::MAX_METADATA_LEN + 1);
    let refused = election.campaign(too_long).await.unwrap_err();
    assert_eq!(blamed(&refused), Some(Argument::Metadata));
    assert_eq!(raw.dbsize().await, 0);
    // A key holding something else: no leader, and a campaign is refused.
    raw.set("e", "not a redmutex value").await;
    assert!(election.leader().await.unwrap().is_none());
}

/// Over Redlock, a campaign takes its claim with each node's own next fence, then makes
/// the highest durable on its nodes. A reader caught in between (woken by the claim's
/// announcement) must not report the previous leader's term for the new leader: it reads
/// again until the nodes agree. Found by running `leader --watch`: each new leader was
/// printed twice, first with a lower term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_leader_is_reported_with_its_own_term_even_between_claim_and_term() {
    let servers = RedisServer::spawn_many(3);
    let leadership = redlock_candidate(&servers)
        .await
        .campaign("a")
        .await
        .unwrap();
    let term = leadership.term();
    let election = redlock_candidate(&servers).await;
    let (_, counter) = key_and_counter(&election);
    // As a reader sees the nodes between the claim and the raise of the fence.
    let lower = |by: u64| (term - by).to_string();
    servers[1].command(&["SET", &counter, &lower(1)]);
    servers[2].command(&["SET", &counter, &lower(2)]);
    let raise = {
        let (one, two) = (servers[1].url(), servers[2].url());
        let counter = counter.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(150)).await;
            for url in [one, two] {
                let mut conn = common::multiplexed_url(&url, ms(1_000)).await;
                let mut set = redis::cmd("SET");
                set.arg(&counter).arg(term);
                set.query_async::<()>(&mut conn).await.unwrap();
            }
        })
    };
    let started = Instant::now();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!((leader.value.as_str(), leader.term), ("a", Some(term)));
    assert!(started.elapsed() >= ms(140), "{:?}", started.elapsed());
    raise.await.unwrap();

    // A candidate that never makes its term durable (it died in between): the reader
    // waits a bounded while, then says what the nodes tell.
    servers[1].command(&["SET", &counter, &lower(1)]);
    servers[2].command(&["SET", &counter, &lower(2)]);
    let started = Instant::now();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.value, "a");
    assert!(started.elapsed() < ms(1_500), "{:?}", started.elapsed());
    drop(leadership);
}

/// An observer whose reads fail yields the errors, and the first read that works again
/// is yielded even though the leader did not change: a consumer (`leader --watch`) sees
/// the outage end instead of waiting for a change that never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_yields_the_leader_again_once_redis_answers_after_an_outage() {
    let server = RedisServer::spawn();
    let proxy = Proxy::start(server.addr());
    let leadership = candidate(&server.url(), ms(30_000))
        .await
        .campaign("steady")
        .await
        .unwrap();
    // Through a connection that reconnects, as the command line's.
    let conn = redmutex::connection::connect(&proxy.url()).await.unwrap();
    let client = redis::Client::open(proxy.url()).unwrap();
    let observer = (Locker::new(conn).with_wake_up([client]).unwrap())
        .election("leader")
        .unwrap();
    let mut changes = Box::pin(observer.observe());
    let first = next_change(&mut changes, ms(2_000)).await.unwrap();
    assert_eq!(first.value, "steady");
    proxy.refuse(true);
    proxy.cut();
    // Its next read (after the lost subscription wakes it, or at its 10 s poll) fails.
    let failed = timeout(ms(12_000), changes.next()).await.unwrap().unwrap();
    assert!(failed.is_err(), "{failed:?}");
    proxy.refuse(false);
    let mut again = timeout(ms(5_000), changes.next()).await.unwrap().unwrap();
    // (A reconnection still under way may fail a read or two more.)
    for _ in 0..10 {
        if again.is_ok() {
            break;
        }
        again = timeout(ms(5_000), changes.next()).await.unwrap().unwrap();
    }
    let again = again.unwrap().expect("the same leader");
    assert_eq!((again.value, again.term), (first.value, first.term));
    leadership.resign().await.unwrap();
}

/// A leader released by force (lock-delay) is still reported as the leader until its
/// tombstone ends — it may still believe it leads — and is told it lost at its next
/// renewal; a candidate of another process wins only once the tombstone ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_released_by_force_is_reported_until_its_tombstone_ends() {
    let server = RedisServer::spawn();
    let ttl = ms(1_500);
    let leadership = candidate(&server.url(), ttl)
        .await
        .campaign("a")
        .await
        .unwrap();
    let operator = Locker::new(multiplexed(&server).await);
    let observer = candidate(&server.url(), ttl).await;
    let key = String::from_utf8(observer.key().to_vec()).unwrap();
    let was = operator.force_release(&key).await.unwrap().unwrap();
    let forced_at = Instant::now();
    assert_eq!(was.holders[0].metadata.as_deref(), Some("a"));
    assert!(operator.inspect(&key).await.unwrap().forced);
    let leader = observer.leader().await.unwrap().expect("still reported");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("a", Some(leadership.term()))
    );
    let next = tokio::spawn(async move {
        let next = candidate(&server.url(), ttl).await;
        let won = next.campaign("b").await.unwrap();
        (Instant::now(), won, server)
    });
    let reason = timeout(ms(2_000), leadership.lost()).await.unwrap();
    assert!(
        matches!(reason, redmutex::LostReason::NotHeld),
        "{reason:?}"
    );
    let (won_at, won, _server) = timeout(ms(5_000), next).await.unwrap().unwrap();
    assert!(
        won_at - forced_at + ms(20) >= leader.ttl.unwrap(),
        "{:?}",
        won_at - forced_at
    );
    assert!(won.term() > leadership.term());
    won.resign().await.unwrap();
}

/// A leader released by force at once (`force_release_now`) is announced to observers as
/// a resignation is: they see nobody lead at once, not at their next poll (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_released_by_force_at_once_is_announced_to_observers() {
    let server = RedisServer::spawn();
    let leadership = candidate(&server.url(), ms(30_000))
        .await
        .campaign("a")
        .await
        .unwrap();
    let observer = candidate(&server.url(), ms(30_000)).await;
    let mut changes = Box::pin(observer.observe());
    assert_eq!(
        next_change(&mut changes, ms(2_000)).await.unwrap().value,
        "a"
    );
    let key = String::from_utf8(observer.key().to_vec()).unwrap();
    let operator = Locker::new(multiplexed(&server).await);
    operator.force_release_now(&key).await.unwrap().unwrap();
    assert_eq!(next_change(&mut changes, ms(1_500)).await, None);
    drop(leadership);
}
