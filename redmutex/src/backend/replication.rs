//! Replica confirmation: an acquire, refresh, renewal or fence on one master counts only
//! once that many replicas have it (`WAIT`), or have it in their append-only file
//! (`WAITAOF`), within a timeout. What this narrows and what it leaves open is in
//! [`safety`](crate::safety), "Replica confirmation".

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::{Argument, Error, NotReplicated};

/// How many replicas must confirm each write of a lock before it counts: see
/// [`Locker::with_replication`](crate::Locker::with_replication).
///
/// ```
/// use std::time::Duration;
/// use redmutex::Replication;
/// // One replica must have the key in memory within 100 ms.
/// let in_memory = Replication::new(1, Duration::from_millis(100));
/// // The master and two replicas must have it fsynced to their append-only files.
/// let on_disk = Replication::new(2, Duration::from_millis(200)).on_disk();
/// assert_ne!(in_memory, on_disk);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    replicas: u32,
    timeout: Duration,
    on_disk: bool,
}

impl Replication {
    /// `replicas` replicas must acknowledge each write within `timeout` (`WAIT`).
    pub fn new(replicas: u32, timeout: Duration) -> Replication {
        Replication {
            replicas,
            timeout,
            on_disk: false,
        }
    }

    /// Also the master, and each of those replicas, must have fsynced the write to its
    /// append-only file (`WAITAOF 1 replicas timeout`; Redis 7.2+, Valkey 8; every one of
    /// them needs `appendonly yes`). On a server without `WAITAOF`, or without an
    /// append-only file, every acquire fails with the server's error.
    pub fn on_disk(mut self) -> Replication {
        self.on_disk = true;
        self
    }

    /// How many replicas must confirm.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long to wait for them.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the write must be on disk too ([`on_disk`](Replication::on_disk)).
    pub fn is_on_disk(&self) -> bool {
        self.on_disk
    }

    /// Checks the settings before any request.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero replicas, or a timeout below 1 ms or above 60 s
    /// (`WAIT` with no timeout would block the connection for good).
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.replicas == 0 {
            return Err(Error::invalid(
                Argument::Replication,
                "at least one replica must confirm (0 would confirm nothing)",
            ));
        }
        if !(Duration::from_millis(1)..=MAX_TIMEOUT).contains(&self.timeout) {
            return Err(Error::invalid(
                Argument::Replication,
                format!("timeout {:?} is not within 1ms..=60s", self.timeout),
            ));
        }
        Ok(())
    }

    /// Waits until the writes this connection sent so far reached the replicas.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] when fewer confirmed within the timeout; [`Error::Redis`]
    /// when the wait itself failed (e.g. `WAITAOF` unknown, or no append-only file).
    pub(crate) async fn confirm<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> Result<(), Error> {
        let timeout_ms = self.timeout.as_millis() as u64;
        let acked = match self.on_disk {
            false => {
                let mut wait = redis::cmd("WAIT");
                wait.arg(self.replicas).arg(timeout_ms);
                wait.query_async::<u32>(conn).await?
            }
            true => {
                let mut wait = redis::cmd("WAITAOF");
                wait.arg(1).arg(self.replicas).arg(timeout_ms);
                let (local, replicas) = wait.query_async::<(u32, u32)>(conn).await?;
                // The master's own file not fsynced counts as no confirmation at all.
                if local == 0 {
                    0
                } else {
                    replicas
                }
            }
        };
        match acked >= self.replicas {
            true => Ok(()),
            false => Err(Error::NotReplicated(NotReplicated {
                acked,
                wanted: self.replicas,
                timeout: self.timeout,
                on_disk: self.on_disk,
            })),
        }
    }
}

/// The longest wait for replicas accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
