//! What redmutex tells the application about itself, against real servers: the tracing
//! spans and events (caught by a subscriber of the test's own), the metrics (with the
//! `metrics` feature, caught by a recorder of the test's own), and `Locker::stats`.

#[path = "common/capture.rs"]
mod capture;
mod common;

use std::time::Duration;

use common::{ms, multiplexed, multiplexed_with_timeout, Raw};
use redmutex::retry;
use redmutex::{Locker, LostReason};
use testkit::Proxy;
use testkit::RedisServer;
use tracing::Level;

/// Installs the test's subscriber and recorder before any locker is built (a locker
/// describes its metrics once per process, to the recorder installed then).
fn setup() {
    capture::capture_traces();
    #[cfg(feature = "metrics")]
    capture::recorded::install();
}

#[tokio::test]
async fn acquire_and_release_spans_say_what_happened_and_never_the_token() {
    setup();
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await);

    let lock = locker
        .acquire("obs:span", Duration::from_secs(5))
        .with_fence()
        .await
        .unwrap();
    let token = lock.token();
    let fence = lock.fence().await.unwrap();
    lock.release().await.unwrap();

    let other = Locker::new(multiplexed(&server).await);
    let held = other
        .acquire("obs:held", Duration::from_secs(5))
        .await
        .unwrap();
    let refused = locker
        .acquire("obs:held", Duration::from_secs(5))
        .retry(retry::constant(ms(20)))
        .deadline(ms(100))
        .await
        .unwrap_err();
    assert!(refused.is_not_obtained());
    let held_token = held.token();
    held.release().await.unwrap();

    let acquired = capture::spans("redmutex.acquire", "obs:span");
    assert_eq!(acquired.len(), 1, "{acquired:?}");
    let span = &acquired[0];
    assert_eq!(span["kind"], "lock");
    assert_eq!(span["lock.keys"], "1");
    assert_eq!(span["ttl_ms"], "5000");
    assert_eq!(span["attempts"], "1");
    assert_eq!(span["outcome"], "acquired");
    assert_eq!(span["fence"], fence.to_string());
    assert!(span.contains_key("wait_ms"));
    let released = capture::spans("redmutex.release", "obs:span");
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0]["outcome"], "released");

    let failed = capture::spans("redmutex.acquire", "obs:held");
    let failed: Vec<_> = failed
        .iter()
        .filter(|s| s["outcome"] != "acquired")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["outcome"], "not_obtained");
    assert!(failed[0]["attempts"].parse::<u32>().unwrap() >= 2);
    let why = capture::events("obs:held");
    assert!(
        why.iter()
            .any(|e| e.level == Level::DEBUG && e.message == "acquire failed"),
        "{why:?}"
    );

    let text = capture::all_trace_text();
    for token in [token, held_token] {
        assert!(
            !text.contains(token.as_str()),
            "a token was recorded: {text}"
        );
    }
}

#[tokio::test]
async fn failed_renewals_and_lost_leases_are_warnings_with_the_reason_and_validity_left() {
    setup();
    let server = RedisServer::spawn();
    let proxy = Proxy::start(server.addr());
    let client = redis::Client::open(proxy.url()).unwrap();
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(ms(150)));
    let conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let locker = Locker::new(conn);

    // A lease whose key is deleted under it: lost, "not held".
    let deleted = locker
        .acquire("obs:deleted", ms(900))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    Raw::new(&server)
        .await
        .run::<i64>(redis::cmd("DEL").arg("obs:deleted"))
        .await;
    let reason = tokio::time::timeout(Duration::from_secs(3), deleted.lost())
        .await
        .unwrap();
    assert!(matches!(reason, LostReason::NotHeld), "{reason:?}");

    // A lease whose server stops answering: renewals fail, then it is lost.
    let cut = locker
        .acquire("obs:cut", ms(900))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    proxy.blackhole(true);
    let reason = tokio::time::timeout(Duration::from_secs(3), cut.lost())
        .await
        .unwrap();
    assert!(
        matches!(reason, LostReason::Unreachable { .. }),
        "{reason:?}"
    );
    proxy.blackhole(false);

    let warned = |lock: &str, message: &str| -> Vec<capture::EventRecord> {
        (capture::events(lock).into_iter())
            .filter(|e| e.level == Level::WARN && e.message == message)
            .collect()
    };
    let lost = warned("obs:deleted", "redmutex: lease lost");
    assert_eq!(lost.len(), 1, "{:?}", capture::events("obs:deleted"));
    assert!(lost[0].fields["reason"].contains("another owner took it"));
    assert_eq!(lost[0].fields["kind"], "lock");
    let left: u64 = lost[0].fields["validity_left_ms"].parse().unwrap();
    assert!(left > 0 && left <= 900, "{left}");

    let failed = warned(
        "obs:cut",
        "redmutex: renewal failed; retrying while the lease is valid",
    );
    assert!(!failed.is_empty(), "{:?}", capture::events("obs:cut"));
    assert!(failed[0].fields.contains_key("error"));
    assert_eq!(failed[0].fields["leases"], "1");
    let lost = warned("obs:cut", "redmutex: lease lost");
    assert_eq!(lost.len(), 1, "{:?}", capture::events("obs:cut"));
    assert!(lost[0].fields["reason"].contains("no renewal reached Redis"));
    let left: u64 = lost[0].fields["validity_left_ms"].parse().unwrap();
    assert!(
        left < 900,
        "a loss is declared before the validity ends: {left}"
    );
}

#[tokio::test]
async fn a_quorum_reached_without_a_node_is_a_warning_naming_the_node() {
    setup();
    let servers = RedisServer::spawn_many(3);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed_with_timeout(server, ms(300)).await);
    }
    let locker = Locker::redlock(conns).unwrap();
    servers[2].kill();

    let lock = locker
        .acquire("obs:quorum", Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();

    let partial: Vec<_> = (capture::events("obs:quorum").into_iter())
        .filter(|e| e.message == "redmutex: quorum reached without every node")
        .collect();
    assert!(!partial.is_empty(), "{:?}", capture::events("obs:quorum"));
    assert_eq!(partial[0].level, Level::WARN);
    assert_eq!(partial[0].fields["agreed"], "2");
    assert_eq!(partial[0].fields["nodes"], "3");
    assert!(
        partial[0].fields["errors"].starts_with("node 2: "),
        "{partial:?}"
    );
}

#[tokio::test]
async fn a_node_decided_without_and_then_silent_is_a_warning_naming_the_lock() {
    setup();
    let servers = RedisServer::spawn_many(3);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed_with_timeout(server, ms(2000)).await);
    }
    let settings =
        (redmutex::QuorumSettings::new().node_timeout(ms(200))).wait_for_every_node(false);
    let locker = Locker::redlock(conns)
        .unwrap()
        .with_quorum_settings(settings);
    servers[2].pause();
    // Decided by the two nodes that answer, without waiting for the frozen one...
    let lock = locker
        .acquire("obs:late", Duration::from_secs(5))
        .await
        .unwrap();
    lock.release().await.unwrap();
    // ... which is reported once its node timeout has passed, for the acquire and the
    // release alike.
    tokio::time::sleep(ms(600)).await;
    servers[2].resume();
    let late: Vec<_> = (capture::events("obs:late").into_iter())
        .filter(|e| e.message == "redmutex: quorum reached without every node")
        .collect();
    assert_eq!(late.len(), 2, "{:?}", capture::events("obs:late"));
    for event in &late {
        assert_eq!(event.level, Level::WARN);
        assert_eq!(event.fields["agreed"], "2");
        assert_eq!(event.fields["nodes"], "3");
        assert!(
            event.fields["errors"].starts_with("node 2: no answer within"),
            "{late:?}"
        );
    }
}

#[test]
fn a_healthy_quorum_never_warns_of_nodes_that_answered() {
    setup();
    let servers = RedisServer::spawn_many(5);
    // Two worker threads: the task that hears the slower nodes of a release decided by the
    // first three may run at once, beside the release itself.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let conns = servers
            .iter()
            .map(|s| redmutex::connection::connect_lazy(&s.url()).unwrap());
        let settings =
            (redmutex::QuorumSettings::new().node_timeout(ms(2000))).wait_for_every_node(false);
        let locker = Locker::redlock(conns)
            .unwrap()
            .with_quorum_settings(settings);
        for _ in 0..1500 {
            let lock = locker.acquire("obs:healthy", Duration::from_secs(10)).await;
            lock.unwrap().release().await.unwrap();
        }
        tokio::time::sleep(ms(300)).await;
    });
    let warned: Vec<_> = (capture::events("obs:healthy").into_iter())
        .filter(|e| e.message == "redmutex: quorum reached without every node")
        .collect();
    assert!(
        warned.is_empty(),
        "{} warnings, first {:?}",
        warned.len(),
        warned.first()
    );
}

#[tokio::test]
async fn a_waiter_woken_by_a_release_is_traced_in_its_acquire() {
    setup();
    let server = RedisServer::spawn();
    let holder = common::own_locker(&server, false).await;
    let waiter = common::own_locker(&server, true).await;

    let held = holder
        .acquire("obs:wake", Duration::from_secs(10))
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let lock = waiter
            .acquire("obs:wake", Duration::from_secs(10))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(8))
            .await
            .unwrap();
        lock.release().await.unwrap();
    });
    tokio::time::sleep(ms(300)).await;
    held.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();

    let woken: Vec<_> = (capture::events("obs:wake").into_iter())
        .filter(|e| e.message == "redmutex: waiter woken")
        .collect();
    assert!(!woken.is_empty(), "{:?}", capture::events("obs:wake"));
    assert_eq!(woken[0].level, Level::TRACE);
    assert_eq!(woken[0].span_fields["kind"], "lock");
    let heard = capture::events_saying("redmutex: release heard");
    assert!(
        // The locker's own channel for the key: the key, `:~` and 16 hex digits.
        heard
            .iter()
            .any(|e| e.fields["channel"].starts_with("obs:wake:~")),
        "{heard:?}"
    );
}

#[tokio::test]
async fn stats_count_what_a_locker_holds_waits_for_renews_and_loses() {
    setup();
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await);
    let clone = locker.clone();
    assert_eq!(locker.stats(), redmutex::LockerStats::default());

    let first = locker
        .acquire("stats:a", Duration::from_secs(10))
        .await
        .unwrap();
    let permit = (locker.semaphore("stats:sem", 2).unwrap())
        .acquire(1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!((clone.stats().held, clone.stats().acquired), (2, 2));

    // A waiting acquire counts as waiting until it ends — here cancelled.
    let waiter = clone.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire("stats:a", Duration::from_secs(10))
            .retry(retry::constant(ms(50)))
            .await
    });
    let mut saw_waiting = false;
    for _ in 0..100 {
        if locker.stats().waiting == 1 {
            saw_waiting = true;
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    assert!(saw_waiting);
    waiting.abort();
    let _ = waiting.await;
    assert_eq!(locker.stats().waiting, 0);

    // One that gives up, after waiting at least 100 ms.
    let refused = locker
        .acquire("stats:a", Duration::from_secs(10))
        .retry(retry::constant(ms(20)))
        .deadline(ms(100))
        .await
        .unwrap_err();
    assert!(refused.is_not_obtained());
    first.release().await.unwrap();
    drop(permit);
    let stats = locker.stats();
    assert_eq!((stats.held, stats.waiting), (0, 0));
    assert_eq!(
        (stats.acquired, stats.not_obtained, stats.failed),
        (2, 1, 0)
    );
    assert_eq!(
        stats.released, 1,
        "the dropped permit's release is not counted"
    );
    assert!(stats.longest_wait >= ms(100), "{stats:?}");
    assert!(stats.wait_time >= stats.longest_wait);

    // A kept-alive lease renews, then is lost when its key is deleted.
    let lease = (locker.acquire("stats:lease", ms(300)).await.unwrap())
        .keep_alive()
        .unwrap();
    tokio::time::sleep(ms(350)).await;
    assert!(locker.stats().renewals >= 2, "{:?}", locker.stats());
    Raw::new(&server)
        .await
        .run::<i64>(redis::cmd("DEL").arg("stats:lease"))
        .await;
    tokio::time::timeout(Duration::from_secs(2), lease.lost())
        .await
        .unwrap();
    let stats = locker.stats();
    assert_eq!(
        (stats.lost, stats.held),
        (1, 1),
        "a lost lease counts until dropped"
    );
    drop(lease);
    assert_eq!(locker.stats().held, 0);

    // A bad argument is refused before any request, and not counted as an acquire; a
    // renamed locker counts afresh.
    let bad = locker
        .acquire("", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(bad.is_invalid_argument());
    assert_eq!(locker.stats().failed, 0);
    let renamed = locker.with_name("renamed");
    assert_eq!(renamed.name(), Some("renamed"));
    assert_eq!(renamed.stats(), redmutex::LockerStats::default());
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn metrics_are_labelled_by_locker_and_kind_never_by_key() {
    use capture::recorded;
    setup();
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await).with_name("metered");
    let other = Locker::new(multiplexed(&server).await);

    let lock = locker
        .acquire("metrics:a", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        recorded::gauge("redmutex_held{kind=lock,locker=metered}"),
        1.0
    );
    lock.release().await.unwrap();
    let held = other
        .acquire("metrics:b", Duration::from_secs(5))
        .await
        .unwrap();
    let refused = locker
        .acquire("metrics:b", Duration::from_secs(5))
        .retry(retry::constant(ms(10)))
        .deadline(ms(50))
        .await
        .unwrap_err();
    assert!(refused.is_not_obtained());
    held.release().await.unwrap();
    let permit = (locker.semaphore("metrics:sem", 3).unwrap())
        .acquire(1, Duration::from_secs(5))
        .await
        .unwrap();
    permit.release().await.unwrap();
    let lease = (locker.acquire("metrics:lease", ms(300)).await.unwrap())
        .keep_alive()
        .unwrap();
    tokio::time::sleep(ms(250)).await;
    Raw::new(&server)
        .await
        .run::<i64>(redis::cmd("DEL").arg("metrics:lease"))
        .await;
    tokio::time::timeout(Duration::from_secs(2), lease.lost())
        .await
        .unwrap();
    drop(lease);

    let counter = recorded::counter;
    assert_eq!(
        counter("redmutex_acquisitions_total{kind=lock,locker=metered,outcome=acquired}"),
        2
    );
    assert_eq!(
        counter("redmutex_acquisitions_total{kind=lock,locker=metered,outcome=not_obtained}"),
        1
    );
    assert_eq!(
        counter("redmutex_acquisitions_total{kind=semaphore,locker=metered,outcome=acquired}"),
        1
    );
    assert!(counter("redmutex_renewals_total{locker=metered,outcome=renewed}") >= 1);
    assert_eq!(
        counter("redmutex_losses_total{locker=metered,reason=not_held}"),
        1
    );
    let waits = recorded::histogram("redmutex_wait_seconds{kind=lock,locker=metered}");
    assert_eq!(waits.len(), 3);
    assert!(waits.iter().any(|w| *w >= 0.05), "{waits:?}");
    let holds = recorded::histogram("redmutex_hold_seconds{kind=lock,locker=metered}");
    assert_eq!(holds.len(), 2);
    assert!(holds.iter().any(|h| *h >= 0.2), "{holds:?}");
    assert_eq!(
        recorded::gauge("redmutex_held{kind=lock,locker=metered}"),
        0.0
    );
    assert_eq!(
        recorded::gauge("redmutex_waiting{kind=lock,locker=metered}"),
        0.0
    );
    // An unnamed locker's series have an empty locker label; no series names a key.
    assert!(counter("redmutex_acquisitions_total{kind=lock,locker=,outcome=acquired}") >= 1);
    for key in recorded::keys() {
        assert!(!key.contains("metrics:"), "a key in a metric: {key}");
    }
    let described = recorded::described();
    for name in [
        "redmutex_acquisitions_total",
        "redmutex_hold_seconds",
        "redmutex_held",
    ] {
        assert!(described.iter().any(|d| d == name), "{described:?}");
    }
}
