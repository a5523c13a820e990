//! Which connections a locker works over, and conveniences to open one (Sentinel's is in
//! [`sentinel`](crate::sentinel), feature `sentinel`).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};

use crate::error::Error;

/// Any redis-rs async connection that can be cloned cheaply and shared between tasks:
/// [`ConnectionManager`] (reconnects by itself; recommended for long-lived lockers),
/// [`MultiplexedConnection`](redis::aio::MultiplexedConnection), the cluster connection
/// (feature `cluster`, see [`Locker::cluster`](crate::Locker::cluster)) and the in-memory
/// `memory::MemoryRedis` (feature `memory`). Implemented automatically.
///
/// redmutex clones the connection for each operation and never opens connections of its
/// own, so the connection's settings apply: in particular its *response timeout* (500 ms
/// by default in redis-rs) bounds how long one request to an unresponsive server waits.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{connection::Connection, Locker};
/// // Works over any connection: a ConnectionManager in production, MemoryRedis in tests.
/// async fn nightly<C: Connection>(locker: &Locker<C>) -> Result<bool, redmutex::Error> {
///     match locker.acquire("nightly", Duration::from_secs(60)).await {
///         Ok(lock) => lock.release().await.map(|()| true),
///         Err(e) if e.is_not_obtained() => Ok(false),
///         Err(e) => Err(e),
///     }
/// }
/// assert!(nightly(&Locker::in_memory()).await?);
/// # Ok(()) }
/// ```
pub trait Connection: ConnectionLike + Clone + Send + Sync + 'static {}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Connection for C {}

/// How long [`connect`] waits for the TCP connection (and TLS/AUTH) to be set up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a connection from [`connect`] waits for any one reply.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// Opens a [`ConnectionManager`] to `url` (`redis://[user:password@]host:port[/db]`) with
/// bounded timeouts ([`CONNECT_TIMEOUT`], [`RESPONSE_TIMEOUT`]) and a single connection
/// attempt, so that an unreachable server or a wrong password is reported promptly instead
/// of being retried in the background. After that, the manager reconnects on its own.
///
/// # Errors
/// [`Error::Redis`]: a malformed URL, connection refused, timeout, authentication failure.
///
/// # Cancel safety
/// Cancel safe: a dropped connect leaves nothing behind.
///
/// ```no_run
/// # async fn demo() -> Result<(), redmutex::Error> {
/// let conn = redmutex::connection::connect("redis://127.0.0.1:6379").await?;
/// let locker = redmutex::Locker::new(conn);
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<ConnectionManager, Error> {
    connect_client(redis::Client::open(url)?).await
}

/// [`connect`] for a [`redis::Client`] you built: one with a TLS configuration of your own
/// (see [`tls_client`]), or the same client you give [`Locker::with_wake_up`] so that
/// both connections go to the same server the same way.
///
/// [`Locker::with_wake_up`]: crate::Locker::with_wake_up
///
/// # Errors
/// [`Error::Redis`]: connection refused, timeout, TLS handshake or authentication failure.
///
/// # Cancel safety
/// Cancel safe: a dropped connect leaves nothing behind.
///
/// ```no_run
/// # async fn demo() -> Result<(), redmutex::Error> {
/// let client = redis::Client::open("redis://:s3cret@127.0.0.1:6379/2")?;
/// let conn = redmutex::connection::connect_client(client.clone()).await?;
/// let locker = redmutex::Locker::new(conn).with_wake_up([client])?; // the same server twice
/// assert!(locker.wakes_up());
/// # Ok(()) }
/// ```
pub async fn connect_client(client: redis::Client) -> Result<ConnectionManager, Error> {
    Ok(ConnectionManager::new_with_config(client, manager_config()).await?)
}

/// Like [`connect`], but without connecting now: the manager connects on its first
/// request, and after a failure tries again on the next one. For Redlock nodes, where one
/// node being down when the process starts must not stop it (the quorum covers for it);
/// its requests fail until it is back.
///
/// # Errors
/// [`Error::Redis`] for a malformed URL only.
///
/// # Panics
/// Outside a tokio runtime (the manager starts a task on it).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// let conn = redmutex::connection::connect_lazy("redis://127.0.0.1:6379")?; // nothing sent yet
/// # Ok(()) }
/// ```
pub fn connect_lazy(url: &str) -> Result<ConnectionManager, Error> {
    connect_lazy_client(redis::Client::open(url)?)
}

/// [`connect_lazy`] for a [`redis::Client`] you built (see [`connect_client`]).
///
/// # Errors
/// None in practice; [`Error::Redis`] is kept for future connection settings.
///
/// # Panics
/// Outside a tokio runtime (the manager starts a task on it).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// let nodes = ["redis://127.0.0.1:6379", "redis://127.0.0.1:6380", "redis://127.0.0.1:6381"]
///     .into_iter()
///     .map(|url| redmutex::connection::connect_lazy_client(redis::Client::open(url)?))
///     .collect::<Result<Vec<_>, redmutex::Error>>()?;
/// let locker = redmutex::Locker::redlock(nodes)?; // nothing sent yet: nodes may be down
/// assert_eq!(locker.nodes().len(), 3);
/// # Ok(()) }
/// ```
pub fn connect_lazy_client(client: redis::Client) -> Result<ConnectionManager, Error> {
    Ok(ConnectionManager::new_lazy_with_config(
        client,
        manager_config(),
    )?)
}

/// A client for a `rediss://` URL that trusts the certificate authority in `ca_pem` (PEM,
/// one or more certificates) instead of the system's roots — for servers whose
/// certificates your own CA signed. Give it to [`connect_client`] and
/// [`Locker::with_wake_up`](crate::Locker::with_wake_up). (For servers with publicly
/// trusted certificates, [`connect`] with a `rediss://` URL is enough.)
///
/// A server whose certificate the CA did not sign fails the connect with
/// [`Error::Redis`], saying `invalid peer certificate`; that is not transient.
///
/// # Errors
/// [`Error::Redis`] for a malformed URL or unreadable PEM.
///
/// ```no_run
/// # async fn demo() -> Result<(), redmutex::Error> {
/// let ca = std::fs::read("/etc/redis/ca.crt").expect("the CA file");
/// let client = redmutex::connection::tls_client("rediss://redis.internal:6380", &ca)?;
/// let locker = redmutex::Locker::new(redmutex::connection::connect_client(client.clone()).await?)
///     .with_wake_up([client])?;
/// # Ok(()) }
/// ```
#[cfg(feature = "tls")]
pub fn tls_client(url: &str, ca_pem: &[u8]) -> Result<redis::Client, Error> {
    Ok(redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca_pem.to_vec()),
        },
    )?)
}

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(0)
}
