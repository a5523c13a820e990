//! Bad input, unreachable servers, wrong passwords, restarts: typed errors, promptly, and
//! nothing left behind.

use crate::common;
use std::time::{Duration, Instant};

use crate::common::{manager, ms, multiplexed, Raw};
use redmutex::retry::{self, RetryExt};
use redmutex::{error::Argument, Error, Locker};
use testkit::{RedisServer, ServerOptions};

fn argument(err: Error) -> Argument {
    match err {
        Error::InvalidArgument(a) => {
            assert!(!a.reason.is_empty());
            a.argument
        }
        e => panic!("expected an invalid argument, got {e}"),
    }
}

/// Bad input is rejected before any Redis call: the server is gone, yet the error is
/// about the argument, not the connection.
#[tokio::test]
async fn bad_input_is_rejected_before_any_redis_call() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    server.kill();
    let ttl = Duration::from_secs(1);
    let long_key = vec![b'k'; redmutex::limits::MAX_KEY_LEN + 1];
    let cases: Vec<(&str, Result<redmutex::Lock<_>, Error>, Argument)> = vec![
        ("empty key", locker.acquire("", ttl).await, Argument::Key),
        (
            "zero ttl",
            locker.acquire("k", Duration::ZERO).await,
            Argument::Ttl,
        ),
        (
            "ttl below 1ms",
            locker.acquire("k", Duration::from_micros(999)).await,
            Argument::Ttl,
        ),
        (
            "ttl above max",
            locker.acquire("k", redmutex::limits::MAX_TTL + ms(1)).await,
            Argument::Ttl,
        ),
        (
            "absurd ttl",
            locker.acquire("k", Duration::MAX).await,
            Argument::Ttl,
        ),
        (
            "duplicate keys",
            locker.acquire_all(["a", "b", "a"], ttl).await,
            Argument::Keys,
        ),
        (
            "empty key list",
            locker.acquire_all(Vec::<String>::new(), ttl).await,
            Argument::Keys,
        ),
        (
            "empty key in list",
            locker.acquire_all(["a", ""], ttl).await,
            Argument::Key,
        ),
        (
            "oversized key",
            locker.acquire(&long_key, ttl).await,
            Argument::Key,
        ),
        (
            "oversized metadata",
            locker
                .acquire("k", ttl)
                .metadata("m".repeat(redmutex::limits::MAX_METADATA_LEN + 1))
                .await,
            Argument::Metadata,
        ),
    ];
    for (name, result, expected) in cases {
        let err = result.expect_err(name);
        assert!(!err.is_transient(), "{name}");
        assert_eq!(argument(err), expected, "{name}");
    }
    assert_eq!(
        argument(locker.inspect("").await.unwrap_err()),
        Argument::Key
    );
    let token = redmutex::Token::generate().unwrap();
    assert_eq!(
        argument(locker.release_with_token([""], &token).await.unwrap_err()),
        Argument::Key
    );
    assert_eq!(
        argument(
            locker
                .refresh_with_token(["k"], &token, Duration::ZERO)
                .await
                .unwrap_err()
        ),
        Argument::Ttl
    );
    assert_eq!(
        argument("not-a-token".parse::<redmutex::Token>().unwrap_err()),
        Argument::Token
    );
}

#[tokio::test]
async fn invalid_refresh_ttl_changes_nothing() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    let mut lock = locker.acquire("k", Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        argument(lock.refresh(Duration::ZERO).await.unwrap_err()),
        Argument::Ttl
    );
    assert_eq!(
        argument(lock.refresh(Duration::MAX).await.unwrap_err()),
        Argument::Ttl
    );
    assert!(raw.pttl("k").await > 9000);
    assert_eq!(lock.lease_ttl(), Duration::from_secs(10));
    lock.release().await.unwrap();
}

#[tokio::test]
async fn unreachable_server_fails_promptly() {
    // A port nobody listens on.
    let port = testkit::free_port();
    let started = Instant::now();
    let err = redmutex::connection::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(&err, Error::Redis(e) if e.is_io_error()), "{err}");
    assert!(err.is_transient());

    // A server that dies under an existing connection: acquire reports a Redis error (it
    // never saw the lock held), quickly, with or without retries.
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await);
    server.kill();
    let started = Instant::now();
    let err = locker
        .acquire("k", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err}");
    assert!(err.is_transient());
    let err = locker
        .acquire("k", Duration::from_secs(10))
        .retry(retry::constant(ms(50)).max_tries(3))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn wrong_password_is_a_prompt_non_transient_error() {
    let server = RedisServer::spawn_with(ServerOptions {
        password: Some("right-password".into()),
        ..ServerOptions::default()
    });
    let started = Instant::now();
    let url = format!("redis://:wrong-password@127.0.0.1:{}", server.port());
    let err = redmutex::connection::connect(&url).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match &err {
        Error::Redis(e) => assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e}"),
        e => panic!("{e}"),
    }
    assert!(!err.is_transient());
    assert!(
        !err.to_string().contains("wrong-password"),
        "password echoed: {err}"
    );

    // No password at all: the first command is refused, not retried.
    let client = redis::Client::open(format!("redis://127.0.0.1:{}", server.port())).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let locker = Locker::new(conn);
    let err = locker
        .acquire("k", Duration::from_secs(1))
        .retry(retry::constant(ms(10)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Redis(_)) && !err.is_transient(),
        "{err}"
    );

    // The right password works.
    let locker = Locker::new(redmutex::connection::connect(&server.url()).await.unwrap());
    locker
        .acquire("k", Duration::from_secs(1))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn restart_between_acquire_and_release() {
    let server = RedisServer::spawn();
    let locker = Locker::new(manager(&server).await);
    let mut lock = locker.acquire("k", Duration::from_secs(30)).await.unwrap();
    server.restart(); // no persistence: the lock is gone
    assert!(lock.ttl().await.unwrap_err().is_not_held());
    assert!(lock
        .refresh(Duration::from_secs(30))
        .await
        .unwrap_err()
        .is_not_held());
    assert!(lock.release().await.unwrap_err().is_not_held());
    // And the locker keeps working on the new server.
    let again = locker.acquire("k", Duration::from_secs(30)).await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn restart_under_a_plain_multiplexed_connection_is_an_error_not_a_panic() {
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await);
    let lock = locker.acquire("k", Duration::from_secs(30)).await.unwrap();
    server.restart();
    // A multiplexed connection does not reconnect; whatever it says, it is typed.
    let err = lock.release().await.unwrap_err();
    assert!(err.is_not_held() || matches!(err, Error::Redis(_)), "{err}");
}

#[tokio::test]
async fn paused_server_is_a_timeout_not_a_hang() {
    let server = RedisServer::spawn();
    let locker = Locker::new(common::multiplexed_with_timeout(&server, ms(200)).await);
    let mut lock = locker.acquire("k", Duration::from_secs(30)).await.unwrap();
    server.pause();
    let started = Instant::now();
    let err = lock.refresh(Duration::from_secs(30)).await.unwrap_err();
    assert!(matches!(&err, Error::Redis(e) if e.is_timeout()), "{err}");
    let err = locker.acquire("other", ms(300)).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.resume();
    lock.release().await.unwrap();
}

/// Someone else's data under a lock key is never overwritten or deleted.
#[tokio::test]
async fn foreign_data_is_never_touched() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = common::locker(&server).await;
    raw.run::<()>(redis::cmd("RPUSH").arg("list").arg("x"))
        .await;
    raw.set("string", "not a lock").await;
    // Multi-key acquire over a wrong-type key: not obtained, nothing set.
    let err = locker
        .acquire_all(["free", "list"], ms(1000))
        .await
        .unwrap_err();
    assert!(err.is_not_obtained(), "{err}");
    assert!(!raw.exists("free").await);
    let token = redmutex::Token::generate().unwrap();
    for key in ["list", "string"] {
        assert!(locker
            .release_with_token([key], &token)
            .await
            .unwrap_err()
            .is_not_held());
        assert!(locker
            .refresh_with_token([key], &token, ms(10))
            .await
            .unwrap_err()
            .is_not_held());
    }
    assert_eq!(raw.run::<i64>(redis::cmd("LLEN").arg("list")).await, 1);
    assert_eq!(raw.get("string").await.unwrap(), b"not a lock");
    assert_eq!(raw.pttl("string").await, -1);
}

/// A reply that arrives after the lock's TTL is worthless: the key has expired by then. With
/// a TTL longer than the client's own per-try timer covers, the connection's (here long)
/// response timeout lets the late reply in, and the acquire must still refuse it rather
/// than hand out a lock that has already run out — and leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_after_the_ttl_never_yields_a_lock() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let proxy = testkit::Proxy::start(server.addr());
    let client = redis::Client::open(proxy.url()).unwrap();
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(ms(20_000)));
    let conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let locker = Locker::new(conn);
    // Load the scripts first, so that the slow try is one round trip (not NOSCRIPT, LOAD,
    // and the call again).
    let warm = locker.acquire("warm", ms(5_000)).await.unwrap();
    warm.release().await.unwrap();
    proxy.set_latency(ms(3_000)); // each way
    let started = Instant::now();
    let error = locker
        .acquire("late", ms(5_500))
        .await
        .expect_err("a lock whose reply came after its TTL");
    assert!(started.elapsed() >= ms(5_500), "{:?}", started.elapsed());
    assert!(error.is_transient(), "{error}");
    proxy.set_latency(Duration::ZERO);
    assert!(
        raw.wait_until_gone("late", ms(8_000)).await,
        "key left behind"
    );
}
