//! TLS (`rediss://` with a CA made for the test; a client that does not trust it) and ACL
//! users (the minimal rule in docs/OPERATIONS.md works for everything; a user without it gets a
//! clear "no permission" error and nothing is written).

use std::future::IntoFuture;
use std::time::Duration;

use crate::common::ms;
use redmutex::{retry, Locker};
use testkit::{RedisServer, ServerOptions, TestCa};

/// `redis-server` arguments that define an ACL user (each word its own argument).
/// A user with the rule docs/OPERATIONS.md prints ([`redmutex::check::acl_rule`]) for the prefix
/// `app:`.
fn minimal_rule(user: &str, password: &str) -> String {
    format!(
        "{user} on >{password} {}",
        redmutex::check::acl_rule("app:")
    )
}

#[test]
fn the_operations_guide_prints_the_rule() {
    let readme = include_str!("../../../docs/OPERATIONS.md");
    let line = format!(
        "ACL SETUSER locker on >PASSWORD {}",
        redmutex::check::acl_rule("app:")
    );
    assert!(readme.contains(&line), "docs/OPERATIONS.md lacks: {line}");
}

/// A server listening for TLS too; `None`, with the reason printed, when the server binary
/// under test was built without TLS (the test then checks nothing and says so — or fails,
/// where the test command says the server has TLS: [`testkit::lacks`]).
fn tls_server() -> Option<RedisServer> {
    if let Err(reason) = testkit::tls_support() {
        testkit::lacks("tls", &reason);
        return None;
    }
    Some(RedisServer::spawn_with(ServerOptions {
        tls: true,
        ..ServerOptions::default()
    }))
}

/// Everything works over TLS: acquire with wake-up, keep-alive, fences, inspect, release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_over_tls_with_the_tests_own_ca() {
    let Some(server) = tls_server() else { return };
    let ca = std::fs::read(server.tls_ca()).unwrap();
    let client = redmutex::connection::tls_client(&server.tls_url(), &ca).unwrap();
    let conn = redmutex::connection::connect_client(client.clone())
        .await
        .unwrap();
    let locker = Locker::new(conn).with_wake_up([client]).unwrap();

    let holder = locker.acquire("tls-job", ms(10_000)).await.unwrap();
    let first = holder.fence().await.unwrap();
    let waiter = tokio::spawn(
        locker
            .acquire("tls-job", ms(10_000))
            .with_fence()
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(20))
            .into_future(),
    );
    // The waiter marks the holder once subscribed (over TLS too).
    let until = tokio::time::Instant::now() + ms(3_000);
    while !locker.inspect("tls-job").await.unwrap().awaited {
        assert!(tokio::time::Instant::now() < until, "never marked");
        tokio::time::sleep(ms(10)).await;
    }
    let released = tokio::time::Instant::now();
    holder.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(released.elapsed() < ms(2_000), "woken, not polled");
    assert!(next.fence_if_taken().unwrap() > first);
    let lease = next.keep_alive().unwrap();
    tokio::time::sleep(ms(50)).await;
    assert!(!lease.is_lost());
    lease.release().await.unwrap();
    assert!(!locker.inspect("tls-job").await.unwrap().held);
    // The data went through the TLS port to the same server.
    assert_eq!(server.command(&["EXISTS", "{tls-job}:fence"]), ":1\r\n");
}

/// A client that trusts another CA (or only the system's roots) fails at connect with an
/// error that names the certificate problem, promptly, and is not called transient.
#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_fails_clearly() {
    let Some(server) = tls_server() else { return };
    let elsewhere = std::env::temp_dir().join(format!("redmutex-other-ca-{}", std::process::id()));
    let other = TestCa::generate(&elsewhere, "other-ca");
    let other_pem = std::fs::read(&other.cert).unwrap();
    let _ = std::fs::remove_dir_all(&elsewhere);

    let client = redmutex::connection::tls_client(&server.tls_url(), &other_pem).unwrap();
    let started = std::time::Instant::now();
    let error = redmutex::connection::connect_client(client)
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    let text = error.to_string();
    assert!(text.contains("certificate"), "{text}");
    assert!(!error.is_transient(), "{text}");

    let error = redmutex::connection::connect(&server.tls_url())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("certificate"), "{error}");
    assert!(!error.is_transient(), "{error}");
    // A plain-text client on the TLS port gets no lock either (and no hang).
    let plain = server.tls_url().replacen("rediss://", "redis://", 1);
    assert!(redmutex::connection::connect(&plain).await.is_err());
}

/// A server with a user who has only the minimal rule for `app:`, and a locker with
/// wake-up logged in as that user.
async fn minimal_acl_locker() -> (RedisServer, Locker<redis::aio::ConnectionManager>) {
    let server = RedisServer::spawn_with(ServerOptions {
        extra_args: testkit::acl_user(&minimal_rule("locker", "s3cret")),
        ..ServerOptions::default()
    });
    let url = format!("redis://locker:s3cret@127.0.0.1:{}", server.port());
    let client = redis::Client::open(url.as_str()).unwrap();
    let locker = Locker::new(redmutex::connection::connect(&url).await.unwrap())
        .with_prefix("app:")
        .with_wake_up([client])
        .unwrap();
    (server, locker)
}

/// The minimal ACL rule ([`redmutex::check::acl_rule`]) is enough for every operation: acquire
/// (single and multi-key, fenced), wake-up, refresh, keep-alive, inspect, release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_rule_is_enough() {
    let (_server, locker) = minimal_acl_locker().await;

    let mut lock = locker.acquire("job", ms(10_000)).await.unwrap();
    let first = lock.fence().await.unwrap();
    lock.refresh(ms(20_000)).await.unwrap();
    assert!(lock.ttl().await.unwrap() > ms(15_000));
    let waiter = tokio::spawn(
        locker
            .acquire("job", ms(10_000))
            .with_fence()
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(20))
            .into_future(),
    );
    let until = tokio::time::Instant::now() + ms(3_000);
    while !locker.inspect("job").await.unwrap().awaited {
        assert!(tokio::time::Instant::now() < until, "never marked");
        tokio::time::sleep(ms(10)).await;
    }
    lock.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    let second = next.fence_if_taken().expect("taken with the keys");
    assert!(second > first);
    let lease = next.keep_alive().unwrap();
    lease.release().await.unwrap();

    let both = locker
        .acquire_all(["a", "b"], ms(5_000))
        .with_fence()
        .await
        .unwrap();
    let fence = both.fence().await.unwrap();
    both.release().await.unwrap();
    assert_eq!(locker.inspect("a").await.unwrap().fence, Some(fence));
    let info = locker.inspect("job").await.unwrap();
    assert_eq!(info.fence, Some(second));
    // Keys whose fence counter is named by a hash tag (or a chosen tag, for a `}`).
    for key in ["{order-7}:payment", "a}b"] {
        let lock = locker.acquire(key, ms(5_000)).await.unwrap();
        let fence = lock.fence().await.unwrap();
        assert_eq!(
            locker.inspect(key).await.unwrap().fence,
            Some(fence),
            "{key}"
        );
        lock.release().await.unwrap();
    }
}

/// The same rule is enough for a semaphore and a fair lock: their companion keys (details,
/// queue) and the scripts' sorted-set and hash commands; a fair waiter's own
/// wake-up channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_rule_is_enough_for_every_primitive() {
    let (_server, locker) = minimal_acl_locker().await;

    let permits = locker.semaphore("{tagged}:pool", 2).unwrap();
    let mut permit = permits.acquire(2, ms(10_000)).with_fence().await.unwrap();
    let waiting = tokio::spawn(
        (permits.acquire(1, ms(10_000)))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(20))
            .into_future(),
    );
    permit.refresh(ms(10_000)).await.unwrap();
    assert_eq!(crate::common::used(&permits.inspect().await.unwrap()), 2);
    permit.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();

    let fair = (locker.fair_lock("line").unwrap())
        .with_heartbeat(ms(60_000))
        .unwrap();
    let held = fair.acquire(ms(10_000)).with_fence().await.unwrap();
    let waiting = tokio::spawn(
        (fair.acquire(ms(10_000)))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(20))
            .into_future(),
    );
    let until = tokio::time::Instant::now() + ms(3_000);
    while crate::common::in_line(&fair.inspect().await.unwrap()) == 0 {
        assert!(tokio::time::Instant::now() < until, "never in line");
        tokio::time::sleep(ms(10)).await;
    }
    // Woken on its own channel (it tries again only after 20 s): the channel is allowed.
    tokio::time::sleep(ms(300)).await;
    held.release().await.unwrap();
    let next = tokio::time::timeout(ms(900), waiting).await.unwrap();
    next.unwrap().unwrap().release().await.unwrap();

    // A read-write lock: readers, a waiting writer's intent, downgrade, inspect, and the
    // readers' channel.
    let rw = (locker.rw_lock("{tagged}:doc").unwrap())
        .with_heartbeat(ms(60_000))
        .unwrap();
    let reader = rw.read(ms(10_000)).with_fence().await.unwrap();
    let writer = tokio::spawn(
        (rw.write(ms(10_000)))
            .with_fence()
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(20))
            .into_future(),
    );
    let until = tokio::time::Instant::now() + ms(3_000);
    while crate::common::in_line(&rw.inspect().await.unwrap()) == 0 {
        assert!(tokio::time::Instant::now() < until, "no intent");
        tokio::time::sleep(ms(10)).await;
    }
    tokio::time::sleep(ms(300)).await;
    reader.release().await.unwrap();
    let writer = tokio::time::timeout(ms(900), writer).await.unwrap();
    let mut writer = writer.unwrap().unwrap();
    writer.refresh(ms(10_000)).await.unwrap();
    let waiting_reader = tokio::spawn(
        (rw.read(ms(10_000)))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(20))
            .into_future(),
    );
    tokio::time::sleep(ms(300)).await;
    let downgraded = writer.downgrade().await.unwrap();
    let other = tokio::time::timeout(ms(900), waiting_reader).await.unwrap();
    other.unwrap().unwrap().release().await.unwrap();
    downgraded.keep_alive().unwrap().release().await.unwrap();

    // An election: campaign, proclaim (its announcement on the observers' channel), the
    // leader read and observed, resign.
    let election = locker.election("{tagged}:leader").unwrap();
    let mut changes = Box::pin(election.observe());
    use futures_util::StreamExt;
    assert_eq!(changes.next().await.unwrap().unwrap(), None);
    let mut leadership = election.campaign("one").await.unwrap();
    leadership.proclaim("two").await.unwrap();
    let until = tokio::time::Instant::now() + ms(3_000);
    loop {
        let change = tokio::time::timeout(ms(3_000), changes.next())
            .await
            .unwrap();
        if change
            .unwrap()
            .unwrap()
            .is_some_and(|leader| leader.value == "two")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "never saw the proclamation"
        );
    }
    leadership.resign().await.unwrap();

    // A request to let go (its key beside the lock's, `ZADD`), heard by a kept-alive
    // holder's renewal (`ZRANGEBYLEX`), for a key with a hash tag too.
    for key in ["asked", "{tagged}:asked"] {
        let lease = locker.acquire(key, ms(600)).await.unwrap();
        let lease = lease.keep_alive().unwrap();
        assert!(locker.request_release(key).await.unwrap().is_some());
        tokio::time::timeout(ms(1_000), lease.release_requested())
            .await
            .expect("heard at its next renewal");
        assert!(!lease.is_lost());
        lease.release().await.unwrap();
    }
}

/// A user without the rule's commands gets an error that says "no permission", not
/// transient, and nothing is written; a key outside the user's pattern likewise.
#[tokio::test]
async fn a_user_without_permission_gets_a_clear_error_and_nothing_is_written() {
    let server = RedisServer::spawn_with(ServerOptions {
        extra_args: [
            testkit::acl_user("reader on >pw ~* +@read +ping"),
            testkit::acl_user(&minimal_rule("locker", "pw")),
        ]
        .concat(),
        ..ServerOptions::default()
    });
    let reader = format!("redis://reader:pw@127.0.0.1:{}", server.port());
    let locker =
        Locker::new(redmutex::connection::connect(&reader).await.unwrap()).with_prefix("app:");
    for fenced in [true, false] {
        let error = match fenced {
            true => locker.acquire("job", ms(5_000)).with_fence().await,
            false => locker.acquire("job", ms(5_000)).await,
        }
        .unwrap_err();
        let text = error.to_string();
        assert!(error.is_permission_denied(), "{text}");
        assert!(text.contains("no permission"), "{text}");
        assert!(!error.is_transient(), "{text}");
    }

    // The right commands, but a key outside the user's pattern.
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    let locker =
        Locker::new(redmutex::connection::connect(&url).await.unwrap()).with_prefix("other:");
    let error = locker.acquire("job", ms(5_000)).await.unwrap_err();
    assert!(error.is_permission_denied(), "{error}");
    assert_eq!(server.command(&["DBSIZE"]), ":0\r\n", "nothing written");
}
