//! [`SentinelConnection`]: a connection to the master that Redis Sentinel names, which
//! follows failovers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use crate::connection::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use crate::error::Error;
use crate::sync::lock;

/// A connection to the current master of a Sentinel-monitored group, for any
/// [`Locker`](crate::Locker). It asks the sentinels for the master on first use, and again
/// after any request that suggests the master is gone or no longer a master (connection
/// lost, timeout, `READONLY` from a demoted master, `MASTERDOWN`): that request fails — a
/// transient error, so an acquire retries per its strategy and keep-alive retries until
/// the lease runs out — and the next one goes to whichever master the sentinels name then.
/// Cheap to clone; clones share the connection.
///
/// What a failover does to locks: a lock the replica had already received survives it
/// (kept-alive leases go on being renewed on the new master); a lock it had not received
/// is gone, and the lease is reported lost at its next renewal — never assumed held while
/// someone else can take it. Waiters' wake-up is tied to one server: on Sentinel they
/// rely on their polling.
///
/// ```no_run
/// # async fn demo() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{retry, Locker, sentinel::SentinelConnection};
/// let sentinels = ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"];
/// let conn: SentinelConnection = redmutex::sentinel::connect(&sentinels, "mymaster").await?;
/// let locker = Locker::new(conn);
/// // A try that meets the failover fails, transiently; the retry goes to the new master.
/// let lock = (locker.acquire("nightly", Duration::from_secs(30)))
///     .retry(retry::constant(Duration::from_millis(200)))
///     .await?;
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SentinelConnection {
    inner: Arc<Inner>,
}

struct Inner {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// The master connection in use and its generation (bumped on every new one), so that
    /// a failure on an old connection does not discard a newer one.
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    generation: AtomicU64,
    config: AsyncConnectionConfig,
}

/// Connects through the sentinels at `sentinel_urls` (`redis://host:26379`, as many as you
/// have) to the master of the group `master_name`, with redmutex's bounded timeouts
/// ([`CONNECT_TIMEOUT`], [`RESPONSE_TIMEOUT`]). Asks the sentinels now, so that a wrong
/// name or unreachable sentinels are reported at once. For a master that needs a password,
/// TLS or a database, build the [`SentinelClient`] yourself and use
/// [`SentinelConnection::new`].
///
/// # Errors
/// [`Error::Redis`]: malformed URLs, no sentinel reachable, unknown master name, master
/// unreachable.
///
/// # Cancel safety
/// Cancel safe.
///
/// ```no_run
/// # async fn demo() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let conn = redmutex::sentinel::connect(
///     &["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
///     "mymaster",
/// )
/// .await?;
/// let locker = redmutex::Locker::new(conn);
/// let lease = locker.acquire("nightly", Duration::from_secs(10)).await?.keep_alive()?;
/// // ... a failover here: the lease is kept on the new master, or reported lost ...
/// lease.release().await?;
/// # Ok(()) }
/// ```
pub async fn connect(
    sentinel_urls: &[impl AsRef<str>],
    master_name: &str,
) -> Result<SentinelConnection, Error> {
    let urls: Vec<&str> = sentinel_urls.iter().map(AsRef::as_ref).collect();
    // redis-rs takes the name as `String` without its TLS feature and as `impl AsRef<str>`
    // with it: an owned `String` suits both.
    #[allow(clippy::unnecessary_to_owned)]
    let client = SentinelClient::build(
        urls,
        master_name.to_owned(),
        None,
        SentinelServerType::Master,
    )?;
    let conn = SentinelConnection::new(client);
    conn.master().await?;
    Ok(conn)
}

impl SentinelConnection {
    /// Wraps a [`SentinelClient`] built for [`SentinelServerType::Master`] (with the
    /// master's credentials, TLS or database as you need). Nothing is sent until the first
    /// request.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    /// use redis::ConnectionAddr;
    /// let sentinels = [26379, 26380].map(|port| ConnectionAddr::Tcp("127.0.0.1".into(), port));
    /// let client = SentinelClientBuilder::new(sentinels, "mymaster", SentinelServerType::Master)?
    ///     .set_client_to_redis_password("s3cret")
    ///     .set_client_to_redis_db(2)
    ///     .build()?;
    /// let locker = redmutex::Locker::new(redmutex::sentinel::SentinelConnection::new(client));
    /// assert!(format!("{:?}", locker.connection()).contains("connected: false")); // nothing sent
    /// # Ok(()) }
    /// ```
    pub fn new(client: SentinelClient) -> SentinelConnection {
        SentinelConnection {
            inner: Arc::new(Inner {
                sentinel: tokio::sync::Mutex::new(client),
                current: Mutex::new(None),
                generation: AtomicU64::new(0),
                config: AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT)),
            }),
        }
    }

    /// The connection to the current master: the one in use, or a new one to whichever
    /// master the sentinels name now.
    async fn master(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        // One task asks the sentinels; the others wait for its answer.
        let mut sentinel = self.inner.sentinel.lock().await;
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let conn = sentinel
            .get_async_connection_with_config(&self.inner.config)
            .await?;
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *self.lock_current() = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.lock_current().clone()
    }

    fn lock_current(&self) -> std::sync::MutexGuard<'_, Option<(u64, MultiplexedConnection)>> {
        lock(&self.inner.current)
    }

    /// After `error` on the connection of `generation`: forget it if the master may have
    /// changed, so that the next request asks the sentinels again.
    fn after_error(&self, generation: u64, error: &RedisError) {
        if master_may_have_changed(error) {
            let mut current = self.lock_current();
            if current.as_ref().is_some_and(|(g, _)| *g == generation) {
                *current = None;
            }
        }
    }
}

/// The errors after which the master must be looked up again.
fn master_may_have_changed(e: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind as S};
    e.is_unrecoverable_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_io_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(S::ReadOnly | S::MasterDown | S::BusyLoading)
        )
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.master().await?;
            let reply = conn.req_packed_command(cmd).await;
            if let Err(e) = &reply {
                self.after_error(generation, e);
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.master().await?;
            let reply = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &reply {
                self.after_error(generation, e);
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.current().map_or(0, |(_, conn)| conn.get_db())
    }
}

impl std::fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("connected", &self.current().is_some())
            .finish_non_exhaustive()
    }
}
