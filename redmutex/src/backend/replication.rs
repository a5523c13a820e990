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
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::{error::Argument, Error, Replication};
    /// let one = Replication::new(1, Duration::from_millis(50));
    /// assert_eq!((one.replicas(), one.timeout()), (1, Duration::from_millis(50)));
    /// // Checked when given to a locker: none would confirm nothing.
    /// let none = locker.with_replication(Replication::new(0, Duration::from_millis(50)));
    /// let Err(Error::InvalidArgument(bad)) = none else { panic!("0 replicas accepted") };
    /// assert_eq!(bad.argument, Argument::Replication);
    /// # Ok(()) }
    /// ```
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
    ///
    /// Give it a timeout of a second or more, and a connection whose response timeout is
    /// longer still (the wait holds the reply up). A replica reports what it has fsynced
    /// in its acknowledgements; when the master's request for one reaches it before its
    /// fsync, its next one comes with its once-a-second report. Most confirmations take a
    /// few milliseconds, but some take up to a second on a healthy pair (Valkey 8.1,
    /// `appendfsync always`: 1 wait in 8 exceeded 300 ms), and a shorter timeout
    /// refuses those acquires with [`Error::NotReplicated`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use redmutex::Replication;
    /// let durable = Replication::new(2, Duration::from_millis(1500)).on_disk();
    /// assert!(durable.is_on_disk());
    /// assert_eq!(durable.replicas(), 2); // plus the master's own file
    /// ```
    pub fn on_disk(mut self) -> Replication {
        self.on_disk = true;
        self
    }

    /// How many replicas must confirm.
    ///
    /// ```
    /// use std::time::Duration;
    /// let replication = redmutex::Replication::new(2, Duration::from_millis(100));
    /// assert_eq!(replication.replicas(), 2);
    /// ```
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long to wait for them.
    ///
    /// ```
    /// use std::time::Duration;
    /// let replication = redmutex::Replication::new(1, Duration::from_millis(100));
    /// assert_eq!(replication.timeout(), Duration::from_millis(100));
    /// // Short, and below the connection's response timeout, which the wait holds up.
    /// assert!(replication.timeout() < redmutex::connection::RESPONSE_TIMEOUT);
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the write must be on disk too ([`on_disk`](Replication::on_disk)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redmutex::Replication;
    /// let in_memory = Replication::new(1, Duration::from_millis(100));
    /// assert!(!in_memory.is_on_disk());
    /// assert!(in_memory.on_disk().is_on_disk());
    /// ```
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
