//! [`Locker::list`](crate::Locker::list): every lock under the locker's prefix — its kind,
//! holders, TTL, fence and waiters — found with `SCAN` (never `KEYS`) and read a page at a
//! time, so that a hundred thousand locks never block the server for long.

use std::collections::HashSet;
use std::time::Duration;

use redis::{RedisError, ScriptInvocation, Value};

use crate::backend::common::{Reply, StateReader};
use crate::backend::Backend;
use crate::connection::Connection;
use crate::engine::inspect::{Holding, KeyState};
use crate::error::{Argument, Error};
use crate::fence::{self, Companion};
use crate::locker::Locker;
use crate::primitives::fair::FairLock;
use crate::primitives::rwlock::RwLock;
use crate::primitives::semaphore::Semaphore;
use crate::quorum::{NodeError, NodeFailure, QuorumFailure};
use crate::scripts::{operations, Operation};
use crate::token::{watched_outside_line, Channels};

operations!("ops/listing.lua"; DESCRIBE = "describe", FORCE = "force", ASK = "ask");

/// Keys described per script call, the most a page holds: each call stays short on the
/// server (100 keys cost it about half a millisecond) whatever the total.
pub const LIST_PAGE: usize = 100;

/// Redlock: the TTL whose node timeout bounds a node's answer to a `SCAN` (as for the
/// other reads of every node).
const SCAN_TTL_FOR_TIMEOUT: Duration = Duration::from_secs(10);

/// Keys asked of each `SCAN` call (a hint the server may exceed a little; about 0.2 ms of
/// its time per call).
const SCAN_COUNT: usize = 250;

/// What kind of lock a listed key holds.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// use redmutex::state::LockKind;
/// let ttl = Duration::from_secs(30);
/// let _lock = locker.acquire("report", ttl).await?;
/// let _permit = locker.semaphore("uploads", 4)?.acquire(1, ttl).await?;
/// let _reader = locker.rw_lock("config")?.read(ttl).await?;
/// locker.connection().take_over("legacy", ttl); // a key someone else wrote
/// for (key, kind) in [("report", LockKind::Lock), ("uploads", LockKind::Semaphore),
///     ("config", LockKind::Readers), ("legacy", LockKind::Foreign)] {
///     assert_eq!(locker.describe(key).await?.unwrap().kind, kind);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// A lock ([`Locker::acquire`](crate::Locker::acquire)), or an election's leader.
    Lock,
    /// A key held while waiters stand in a fair lock's line beside it. (A fair lock held
    /// with nobody in line is a lock's key like any other, and reads as
    /// [`Lock`](LockKind::Lock).)
    FairLock,
    /// A read-write lock held by its writer while other writers wait. (A writer's key is
    /// a lock's, excluding everyone as a lock does; with nobody else in line it reads as
    /// [`Lock`](LockKind::Lock).)
    Writer,
    /// A read-write lock held by readers.
    Readers,
    /// A semaphore with permits held.
    Semaphore,
    /// Something redmutex did not write.
    Foreign,
}

impl LockKind {
    /// `lock`, `fair_lock`, `rw_lock_write`, `rw_lock_read`, `semaphore`, `foreign`: the
    /// names the CLI's `list --json` prints.
    ///
    /// ```
    /// use redmutex::state::LockKind;
    /// assert_eq!(LockKind::Lock.name(), "lock");
    /// assert_eq!(LockKind::Readers.name(), "rw_lock_read");
    /// assert_eq!(LockKind::FairLock.name(), "fair_lock");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::FairLock => "fair_lock",
            LockKind::Writer => "rw_lock_write",
            LockKind::Readers => "rw_lock_read",
            LockKind::Semaphore => "semaphore",
            LockKind::Foreign => "foreign",
        }
    }

    fn parse(name: &str) -> Option<LockKind> {
        Some(match name {
            "lock" => LockKind::Lock,
            "fair_lock" => LockKind::FairLock,
            "rw_lock_write" => LockKind::Writer,
            "rw_lock_read" => LockKind::Readers,
            "semaphore" => LockKind::Semaphore,
            "foreign" => LockKind::Foreign,
            _ => return None,
        })
    }
}

/// One holder of a listed lock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// let uploads = locker.semaphore("uploads", 4)?;
/// let _permits = uploads.acquire(3, Duration::from_secs(30)).metadata("host=web-3").await?;
/// let listed = locker.describe("uploads").await?.expect("held");
/// let holder = &listed.holders[0];
/// assert_eq!((holder.permits, holder.metadata.as_deref()), (Some(3), Some("host=web-3")));
/// assert!(holder.ttl.unwrap() <= Duration::from_secs(30));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedHolder {
    /// The metadata it stored, if any.
    pub metadata: Option<String>,
    /// How long it holds on unless renewed; `None` for a lock's single holder, whose TTL
    /// is the key's ([`ListedLock::ttl`]).
    pub ttl: Option<Duration>,
    /// A semaphore's holder: how many permits it holds.
    pub permits: Option<u32>,
    /// Released by force ([`Locker::force_release`](crate::Locker::force_release)): a
    /// tombstone keeps its place until its TTL ends, so that nobody else is let in while
    /// it may still believe it holds.
    pub released_by_force: bool,
}

/// A lock found by [`Locker::list`](crate::Locker::list).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// use redmutex::state::LockKind;
/// let lock = locker.acquire("report", Duration::from_secs(30))
///     .metadata("host=web-3")
///     .with_fence()
///     .await?;
/// let listed = locker.describe("report").await?.expect("held");
/// assert_eq!((listed.kind, listed.holder_count), (LockKind::Lock, 1));
/// assert_eq!(listed.holders[0].metadata.as_deref(), Some("host=web-3"));
/// assert_eq!(listed.holders[0].ttl, None); // a lock's holder has the key's TTL
/// assert!(listed.ttl.unwrap() <= Duration::from_secs(30));
/// assert_eq!(listed.fence, Some(lock.fence().await?));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedLock {
    /// The key, as stored (with the locker's prefix).
    pub key: Vec<u8>,
    /// What it holds.
    pub kind: LockKind,
    /// The key's remaining TTL; `None` without an expiry.
    pub ttl: Option<Duration>,
    /// The latest fence handed out for it, if any (Redlock: the highest among the nodes
    /// its holder has it on).
    pub fence: Option<u64>,
    /// How many hold it (readers, a semaphore's holders; 1 for a lock). Redlock: as many
    /// as a quorum of nodes count at least.
    pub holder_count: u32,
    /// Its holders — for readers and semaphores the 8 soonest to expire; for a lock the
    /// one, with its metadata.
    pub holders: Vec<ListedHolder>,
    /// How many wait, where the server keeps a line: a fair lock's queue (each waiting
    /// acquire), a read-write lock's waiting writers, a lock's or a semaphore's line (each
    /// waiting process: a locker's waiters take one place). `None` where waiters only ask
    /// to hear of releases (see [`awaited`](ListedLock::awaited)): on a cluster, on
    /// Redlock, or from lockers without wake-up, which poll.
    pub waiters: Option<u32>,
    /// Someone waits and asked to be woken by the release.
    pub awaited: bool,
    /// A semaphore: permits held, and the limit its holders agreed on.
    pub permits: Option<(u32, u32)>,
    /// How many of its holders were released by force and are tombstones until their
    /// TTLs end (see [`ListedHolder::released_by_force`]); for a lock's key, 1 when its
    /// value is one.
    pub forced: u32,
    /// Redlock: on how many nodes its holder has it — a quorum, or for
    /// [`force_release`](crate::Locker::force_release) the most nodes that held it alike
    /// (0 for a single node).
    pub nodes: usize,
}

impl ListedLock {
    /// The key as text (invalid UTF-8 replaced).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let _lock = locker.acquire("jobs:report", Duration::from_secs(30)).await?;
    /// let listed = locker.list("*")?.collect().await?;
    /// assert_eq!(listed[0].key_lossy(), "app:jobs:report");
    /// # Ok(()) }
    /// ```
    pub fn key_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.key)
    }
}

/// The locks under a prefix, a page at a time: see [`Locker::list`](crate::Locker::list).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// let ttl = Duration::from_secs(30);
/// let (_a, _b) = (locker.acquire("jobs:a", ttl).await?, locker.acquire("jobs:b", ttl).await?);
/// let _mail = locker.acquire("mail:c", ttl).await?;
/// let listing = locker.list("jobs:*")?;
/// let locks = listing.collect().await?;
/// let mut keys: Vec<String> = locks.iter().map(|l| l.key_lossy().into()).collect();
/// keys.sort();
/// assert_eq!(keys, ["jobs:a", "jobs:b"]);
/// # Ok(()) }
/// ```
pub struct Listing<C: Connection> {
    backend: Backend<C>,
    /// The `SCAN` pattern: the escaped prefix, then the caller's glob.
    pattern: Vec<u8>,
    /// The node being scanned, and where its scan stands (0 before it starts).
    node: usize,
    cursor: u64,
    /// Keys already listed, when several nodes are scanned (each may have them all).
    seen: Option<HashSet<Vec<u8>>>,
    /// Keys found and not described yet (`SCAN` may return more than it is asked for).
    pending: Vec<Vec<u8>>,
    done: bool,
    /// Redlock: the nodes whose scan failed, and why.
    unscanned: Vec<NodeFailure>,
}

impl<C: Connection> Listing<C> {
    /// A listing of `pattern` (a glob after the prefix, e.g. `jobs:*`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a cluster connection, whose `SCAN` would reach one
    /// master only.
    pub(crate) fn new(backend: Backend<C>, prefix: &[u8], pattern: &str) -> Result<Self, Error> {
        if backend.is_cluster() {
            return Err(Error::invalid(
                Argument::Nodes,
                "list is not supported on a cluster connection (SCAN reaches one master); \
                 list each master through a locker of its own",
            ));
        }
        let mut glob = crate::acl::escape_glob(&String::from_utf8_lossy(prefix)).into_bytes();
        glob.extend_from_slice(pattern.as_bytes());
        let several = backend.nodes().len() > 1;
        Ok(Listing {
            backend,
            pattern: glob,
            node: 0,
            cursor: 0,
            seen: several.then(HashSet::new),
            pending: Vec::new(),
            done: false,
            unscanned: Vec::new(),
        })
    }

    /// The next page of locks (at most [`LIST_PAGE`]); `None` once every key was seen. A
    /// key locked or released while the listing runs may or may not be listed (`SCAN`'s
    /// guarantee: every key present from start to end is listed once).
    ///
    /// # Errors
    /// [`Error::Redis`]; on Redlock [`Error::NoQuorum`] when fewer than a quorum of nodes
    /// can be scanned, or a key's state cannot be told (see
    /// [`Locker::list`](crate::Locker::list)). A node that does not answer is left out
    /// while the others are a quorum.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads; a page whose call failed or was cancelled is read again
    /// by the next call (so a caller may retry after [`Error::is_transient`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// # for n in 0..150 {
    /// #     let ttl = std::time::Duration::from_secs(30);
    /// #     locker.acquire(format!("jobs:{n}"), ttl).await?.detach();
    /// # }
    /// // 150 jobs hold locks.
    /// let mut listing = locker.list("jobs:*")?;
    /// let mut total = 0;
    /// while let Some(page) = listing.next_page().await? {
    ///     assert!(page.len() <= redmutex::limits::LIST_PAGE);
    ///     total += page.len();
    /// }
    /// assert_eq!(total, 150);
    /// # Ok(()) }
    /// ```
    pub async fn next_page(&mut self) -> Result<Option<Vec<ListedLock>>, Error> {
        loop {
            if self.pending.is_empty() {
                if self.done {
                    return Ok(None);
                }
                self.pending = self.scan().await?;
                continue;
            }
            // The page's keys leave `pending` only once described: a page whose call
            // failed or was cancelled is described again by the next call.
            let taken = self.pending.len().min(LIST_PAGE);
            let keys = &self.pending[..taken];
            let call = describe_call(keys, self.backend.channels());
            let view = PageReader {
                keys,
                quorum_only: true,
            };
            let page: Vec<ListedLock> = self.backend.inspect(&view, &call).await?;
            self.pending.drain(..taken);
            if !page.is_empty() {
                return Ok(Some(page));
            }
        }
    }

    /// Every lock left, in one vector.
    ///
    /// # Errors
    /// As [`next_page`](Listing::next_page).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// # for n in 0..150 {
    /// #     let ttl = std::time::Duration::from_secs(30);
    /// #     locker.acquire(format!("jobs:{n}"), ttl).await?.detach();
    /// # }
    /// // 150 jobs hold locks.
    /// let mut listing = locker.list("jobs:*")?;
    /// let first = listing.next_page().await?.expect("some locks");
    /// let rest = listing.collect().await?;
    /// assert_eq!(first.len() + rest.len(), 150);
    /// # Ok(()) }
    /// ```
    pub async fn collect(mut self) -> Result<Vec<ListedLock>, Error> {
        let mut all = Vec::new();
        while let Some(page) = self.next_page().await? {
            all.extend(page);
        }
        Ok(all)
    }

    /// One `SCAN` call: the lock keys it found (not companions, not listed before).
    ///
    /// Redlock: a node that does not answer (within the quorum's node timeout) is left
    /// out, as long as the others are a quorum: a key held on a quorum is on one of them,
    /// and the description of each key says whether the silent nodes leave it unknown.
    async fn scan(&mut self) -> Result<Vec<Vec<u8>>, Error> {
        let mut conn = self.backend.nodes()[self.node].clone();
        let mut scan = redis::cmd("SCAN");
        scan.arg(self.cursor)
            .arg("MATCH")
            .arg(&self.pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let reply = match self.backend.quorum_settings() {
            None => scan.query_async(&mut conn).await.map_err(Error::from),
            Some(settings) => {
                let timeout = settings.timeout_for(SCAN_TTL_FOR_TIMEOUT);
                let asked = tokio::time::timeout(timeout, scan.query_async(&mut conn)).await;
                let reply = asked
                    .map_err(|_| NodeError::TimedOut(timeout))
                    .and_then(|reply| reply.map_err(NodeError::Redis));
                match reply {
                    Ok(reply) => Ok(reply),
                    Err(error) => return self.skip_node(error),
                }
            }
        };
        let (cursor, keys): (u64, Vec<Vec<u8>>) = reply?;
        self.cursor = cursor;
        if cursor == 0 {
            self.next_node();
        }
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            if fence::reserved_as(&key).is_some() {
                continue;
            }
            if let Some(seen) = &mut self.seen
                && !seen.insert(key.clone())
            {
                continue;
            }
            found.push(key);
        }
        Ok(found)
    }

    /// The scan moves on to the next node (or ends).
    fn next_node(&mut self) {
        (self.node, self.cursor) = (self.node + 1, 0);
        self.done = self.node == self.backend.nodes().len();
    }

    /// Redlock: the node being scanned failed with `error`; the scan goes on without it
    /// while the nodes left can still be a quorum, and fails with `NoQuorum` otherwise.
    fn skip_node(&mut self, error: NodeError) -> Result<Vec<Vec<u8>>, Error> {
        self.unscanned.push(NodeFailure {
            node: self.node,
            error,
        });
        let nodes = self.backend.nodes().len();
        let needed = self.backend.needed();
        if nodes - self.unscanned.len() < needed {
            let failures = std::mem::take(&mut self.unscanned);
            let agreed = nodes - failures.len();
            let failure = QuorumFailure::undecided(agreed, needed, nodes, failures);
            return Err(Error::NoQuorum(failure));
        }
        self.next_node();
        Ok(Vec::new())
    }
}

impl<C: Connection> Locker<C> {
    /// Every lock under this locker's prefix whose key (after the prefix) matches
    /// `pattern`, a Redis glob (`*` for all, `jobs:*`): its kind, holders and their
    /// metadata, TTL, fence and waiters. Found with `SCAN` and described a page of
    /// [`LIST_PAGE`](crate::limits::LIST_PAGE) keys per call, so that no call blocks the server for
    /// long however many locks there are; read the pages with
    /// [`Listing::next_page`](crate::state::Listing::next_page) or all at once with
    /// [`Listing::collect`](crate::state::Listing::collect). Keys beside the locks (fence
    /// counters, queues) are not listed; with an empty prefix, keys redmutex did not write
    /// are listed as [`LockKind::Foreign`](crate::state::LockKind::Foreign). Redlock: each node is
    /// scanned, and a key is listed once, where one holder has it on a quorum of nodes — a
    /// minority's leftover (a rival's failed try, a holder that lost the other nodes) holds
    /// nothing, and is not listed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a cluster connection (`SCAN` reaches one master there:
    /// list each master through a locker of its own). Redlock: [`Error::NoQuorum`] when
    /// fewer than a quorum of nodes answered, or when the nodes that did not answer could
    /// complete a holder's quorum of a key (nobody can tell whether it is held).
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// let mut listing = locker.list("jobs:*")?;
    /// while let Some(page) = listing.next_page().await? {
    ///     for lock in page {
    ///         let who = lock.holders.first().and_then(|h| h.metadata.as_deref());
    ///         println!("{} {} held by {who:?}, ttl {:?}", lock.key_lossy(), lock.kind.name(), lock.ttl);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn list(&self, pattern: &str) -> Result<Listing<C>, Error> {
        Listing::new(self.context.backend.clone(), &self.prefix, pattern)
    }

    /// What `key` holds now, as [`list`](Locker::list) shows it — kind, holders and their
    /// metadata, TTL, fence, waiters — in one round trip; `None` when it is free (Redlock:
    /// when no holder has it on a quorum of nodes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key (before any request); [`Error::Redis`].
    /// Redlock: [`Error::NoQuorum`] when the nodes that answered cannot tell (as
    /// [`list`](Locker::list)).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// match locker.describe("jobs:nightly").await? {
    ///     Some(lock) => println!("{} holder(s), {:?} left", lock.holder_count, lock.ttl),
    ///     None => println!("free"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn describe(&self, key: impl AsRef<[u8]>) -> Result<Option<ListedLock>, Error> {
        let keys = self.keys([key])?;
        describe(&self.context.backend, keys.get(0).expect("one key")).await
    }
}

impl<C: Connection> Semaphore<C> {
    /// Who holds permits now — how many of the limit their holders agreed on, each holder's
    /// permits, TTL and metadata — as [`Locker::describe`] says it; `None` when nobody
    /// holds any.
    ///
    /// # Errors
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let exports = locker.semaphore("exports", 4)?;
    /// assert!(exports.inspect().await?.is_none());
    /// let permit = exports.acquire(3, Duration::from_secs(30)).metadata("job=export-17").await?;
    /// let seen = exports.inspect().await?.expect("held");
    /// assert_eq!(seen.permits, Some((3, 4))); // held, of the agreed limit
    /// assert_eq!(seen.holders[0].metadata.as_deref(), Some("job=export-17"));
    /// # drop(permit);
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<Option<ListedLock>, Error> {
        describe(&self.context.backend, self.key()).await
    }
}

impl<C: Connection> FairLock<C> {
    /// The lock as anyone sees it — holder, TTL, metadata, fence, how many wait in line —
    /// as [`Locker::describe`] says it; `None` while the key is free (waiters may still be
    /// in line: only the first of them may take it).
    ///
    /// # Errors
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// let ledger = locker.fair_lock("ledger")?;
    /// let _held = ledger.acquire(Duration::from_secs(10)).metadata("host=web-3").await?;
    /// let waiter = ledger.acquire(Duration::from_secs(10))
    ///     .retry(retry::constant(Duration::from_millis(100)));
    /// let _waiting = tokio::spawn(async move { waiter.await });
    /// tokio::time::sleep(Duration::from_millis(50)).await;
    /// let seen = ledger.inspect().await?.expect("held");
    /// assert_eq!(seen.holders[0].metadata.as_deref(), Some("host=web-3"));
    /// assert_eq!(seen.waiters, Some(1));
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<Option<ListedLock>, Error> {
        describe(&self.context.backend, self.key()).await
    }
}

impl<C: Connection> RwLock<C> {
    /// The lock as anyone sees it — its writer or its readers, how many writers wait, the
    /// latest fence — as [`Locker::describe`] says it; `None` while nobody holds it. A
    /// writer's key is a lock's: with no other writer waiting it reads as
    /// [`LockKind::Lock`].
    ///
    /// # Errors
    /// [`Error::Redis`]. Redlock: [`Error::NoQuorum`] when the nodes that answered cannot
    /// tell.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::state::LockKind;
    /// let config = locker.rw_lock("config")?;
    /// let write = config.write(Duration::from_secs(10)).metadata("deploy-42");
    /// let writer = write.with_fence().await?;
    /// let seen = config.inspect().await?.expect("held");
    /// assert_eq!(seen.kind, LockKind::Lock); // a writer, with no other writer waiting
    /// assert_eq!(seen.holders[0].metadata.as_deref(), Some("deploy-42"));
    /// assert!(seen.ttl.unwrap() <= Duration::from_secs(10));
    /// assert_eq!(seen.fence, writer.fence_if_taken());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self) -> Result<Option<ListedLock>, Error> {
        describe(&self.context.backend, self.key()).await
    }
}

/// What `key` (with the prefix) holds, as a listing would show it; `None` when free.
async fn describe<C: Connection>(
    backend: &Backend<C>,
    key: &[u8],
) -> Result<Option<ListedLock>, Error> {
    one_key(backend, &DESCRIBE, key, None).await
}

/// Runs `operation` of `listing.lua` for one key and its companions (`force`: the forced
/// release's mode).
pub(super) async fn one_key<C: Connection>(
    backend: &Backend<C>,
    operation: &'static Operation,
    key: &[u8],
    force: Option<&str>,
) -> Result<Option<ListedLock>, Error> {
    let keys = [key.to_vec()];
    let mut call = operation.script(backend.channels()).prepare_invoke();
    add_keys(&mut call, &keys[0]);
    if let Some(mode) = force {
        call.arg(mode);
    }
    let view = PageReader {
        keys: &keys,
        quorum_only: force.is_none(),
    };
    Ok(backend.inspect(&view, &call).await?.pop())
}

/// The describe call for a page of keys: each with its companions.
fn describe_call(keys: &[Vec<u8>], channels: Channels) -> ScriptInvocation<'static> {
    let mut call = DESCRIBE.script(channels).prepare_invoke();
    for key in keys {
        add_keys(&mut call, key);
    }
    call
}

/// A key and its companions, as `listing.lua` takes them.
pub(super) fn add_keys(call: &mut ScriptInvocation<'static>, key: &[u8]) {
    call.key(key);
    call.key(fence::counter_key(key));
    for companion in [
        Companion::Queue,
        Companion::Permits,
        Companion::Readers,
        Companion::Intents,
        Companion::Line,
    ] {
        call.key(fence::companion_key(key, companion));
    }
}

/// Reads a page of descriptions (see [`StateReader`]).
pub(super) struct PageReader<'k> {
    pub(super) keys: &'k [Vec<u8>],
    /// Redlock: what counts as found. `describe` and `list` show a key only where one
    /// holder has it on a quorum of nodes (a minority's leftover — a rival's failed try, a
    /// holder that lost the others — holds nothing: the next acquire takes the key).
    /// `force` reports whatever it removed: the largest group of nodes that held alike.
    pub(super) quorum_only: bool,
}

/// One key as one node described it, with who holds it there (nodes agree on a holder
/// when they store the same identity); `None` when it is gone.
type Described = Option<(ListedLock, Identity)>;

/// Who holds a key on one node: the owner's token (a forced release's tombstone: its
/// stand-in), or the kind of a key many hold at once or of something else's data.
type Identity = Vec<u8>;

impl PageReader<'_> {
    /// Each key of one node's reply, in order.
    fn parse(&self, reply: Value) -> Result<Vec<Described>, RedisError> {
        let entries: Vec<Value> = redis::from_redis_value(reply)?;
        let described = (entries.into_iter().zip(self.keys))
            .map(|(entry, key)| entry_of(key, entry))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(described)
    }
}

impl StateReader for PageReader<'_> {
    type Info = Vec<ListedLock>;

    fn one(&self, reply: Value) -> Result<Vec<ListedLock>, RedisError> {
        let described = self.parse(reply)?.into_iter().flatten();
        Ok(described.map(|(listed, _)| listed).collect())
    }

    /// Redlock: each key one holder has on a quorum of nodes (see
    /// [`quorum_only`](PageReader::quorum_only)), as a quorum of them describes it (see
    /// [`quorum_view`]), with their count and the highest fence among them.
    /// [`Error::NoQuorum`] when the nodes that did not answer could complete a holder's
    /// quorum: nobody can tell.
    fn each(&self, replies: Vec<Reply<Value>>, needed: usize) -> Result<Vec<ListedLock>, Error> {
        let mut failures = Vec::new();
        let mut parsed: Vec<Vec<Described>> = Vec::with_capacity(replies.len());
        for (node, reply) in replies.into_iter().enumerate() {
            match reply.and_then(|value| self.parse(value).map_err(NodeError::Redis)) {
                Ok(described) => parsed.push(described),
                Err(error) => failures.push(NodeFailure { node, error }),
            }
        }
        let silent = failures.len();
        let mut page = Vec::new();
        for index in 0..self.keys.len() {
            let found = (parsed.iter()).filter_map(|described| described.get(index)?.as_ref());
            let groups = group_by_holder(found);
            let largest = groups.into_iter().max_by_key(|group| group.len());
            let Some(group) = largest else {
                continue;
            };
            if self.quorum_only && group.len() < needed {
                if group.len() + silent >= needed {
                    let nodes = parsed.len() + silent;
                    let failure = QuorumFailure::undecided(group.len(), needed, nodes, failures);
                    return Err(Error::NoQuorum(failure));
                }
                continue;
            }
            let mut listed = quorum_view(&group, needed).clone();
            listed.nodes = group.len();
            listed.fence = group.iter().filter_map(|l| l.fence).max();
            page.push(listed);
        }
        Ok(page)
    }
}

/// The description of a key many hold (readers, a semaphore's holders) that a quorum of
/// its nodes agrees with: from the node where as many nodes as the quorum count at least
/// as many holders (and permits). An acquire returns once a quorum has it, so the other
/// nodes may not have heard of it yet: the first node's count could be short of it.
fn quorum_view<'a>(group: &[&'a ListedLock], needed: usize) -> &'a ListedLock {
    let mut by_count = group.to_vec();
    by_count.sort_by_key(|listed| {
        let used = listed.permits.map_or(0, |(used, _)| used);
        std::cmp::Reverse((listed.holder_count, used))
    });
    by_count[needed.clamp(1, by_count.len()) - 1]
}

/// The nodes' descriptions of one key, grouped by who holds it there.
fn group_by_holder<'a>(
    found: impl Iterator<Item = &'a (ListedLock, Identity)>,
) -> Vec<Vec<&'a ListedLock>> {
    let mut groups: Vec<(&Identity, Vec<&ListedLock>)> = Vec::new();
    for (listed, identity) in found {
        match groups.iter_mut().find(|(held_by, _)| *held_by == identity) {
            Some((_, group)) => group.push(listed),
            None => groups.push((identity, vec![listed])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// One key's entry of the describe reply (see `listing.lua`): the key's state, parsed as
/// every read of it is ([`KeyState`]), then what the listing counts beside it.
fn entry_of(key: &[u8], entry: Value) -> Result<Described, RedisError> {
    let mut fields = redis::from_redis_value::<Vec<Value>>(entry)?.into_iter();
    let state = KeyState::take(&mut fields)?;
    let mut next = || fields.next().unwrap_or(Value::Nil);
    let kind: String = redis::from_redis_value(next())?;
    let holder_count: u32 = redis::from_redis_value(next())?;
    let waiters: i64 = redis::from_redis_value(next())?;
    let awaited: i64 = redis::from_redis_value(next())?;
    let sample: Vec<(i64, Vec<u8>, i64)> = redis::from_redis_value(next())?;
    let used: u32 = redis::from_redis_value(next())?;
    let limit: u32 = redis::from_redis_value(next())?;
    let forced: u32 = redis::from_redis_value(next())?;
    let Some(mut kind) = LockKind::parse(&kind) else {
        return Ok(None);
    };
    let mut awaited = awaited == 1;
    // Readers and a semaphore's holders are many on each node: their key is one group.
    let mut identity = kind.name().as_bytes().to_vec();
    let mut holders: Vec<ListedHolder> = (sample.into_iter())
        .map(|(left, details, grave)| holder(kind, left, &details, grave == 1))
        .collect();
    match state.holding() {
        Holding::Held {
            owner,
            metadata,
            awaited: marked,
            tombstone,
        } => {
            // Nodes agree on a holder when they hold the same owner's token (a tombstone's
            // stand-in: the same on every node the forced release reached).
            identity = owner.as_str().as_bytes().to_vec();
            // Where the server counted the line, it says who waits in it; the flag says
            // the rest (and outlives the line's lockers, who do not unflag it).
            if !tombstone {
                let watched = (state.value.as_deref()).is_some_and(watched_outside_line);
                awaited = match waiters {
                    0.. => waiters > 0 || watched,
                    _ => marked,
                };
            }
            holders.push(ListedHolder {
                metadata,
                ttl: None,
                permits: None,
                released_by_force: tombstone,
            });
        }
        Holding::Foreign => {
            kind = LockKind::Foreign;
            identity = kind.name().as_bytes().to_vec();
        }
        _ => {}
    }
    let foreign = kind == LockKind::Foreign;
    let listed = ListedLock {
        key: key.to_vec(),
        kind,
        ttl: state.ttl(),
        fence: state.fence,
        holder_count: if foreign { 0 } else { holder_count },
        holders: if foreign { Vec::new() } else { holders },
        waiters: u32::try_from(waiters).ok(),
        awaited,
        permits: (kind == LockKind::Semaphore).then_some((used, limit)),
        forced,
        nodes: 0,
    };
    Ok(Some((listed, identity)))
}

/// A sampled holder: a semaphore's details are `<permits>:<metadata>`, a reader's its
/// metadata.
fn holder(kind: LockKind, left_ms: i64, details: &[u8], forced: bool) -> ListedHolder {
    let details = String::from_utf8_lossy(details);
    let (permits, metadata) = match (kind, details.split_once(':')) {
        (LockKind::Semaphore, Some((permits, metadata))) => (permits.parse().ok(), metadata),
        _ => (None, &details[..]),
    };
    ListedHolder {
        metadata: (!metadata.is_empty()).then(|| metadata.to_owned()),
        ttl: u64::try_from(left_ms).ok().map(Duration::from_millis),
        permits,
        released_by_force: forced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readers(count: u32) -> ListedLock {
        ListedLock {
            key: b"doc".to_vec(),
            kind: LockKind::Readers,
            ttl: None,
            fence: None,
            holder_count: count,
            holders: Vec::new(),
            waiters: None,
            awaited: false,
            permits: None,
            forced: 0,
            nodes: 0,
        }
    }

    #[test]
    fn a_quorum_counts_as_many_holders_as_its_nodes_have_at_least() {
        // A second reader whose acquire a quorum decided has not reached every node yet.
        let nodes: Vec<ListedLock> = [1, 2, 1, 2, 2].into_iter().map(readers).collect();
        let group: Vec<&ListedLock> = nodes.iter().collect();
        assert_eq!(quorum_view(&group, 3).holder_count, 2);
        let nodes: Vec<ListedLock> = [1, 2, 1, 3, 2].into_iter().map(readers).collect();
        let group: Vec<&ListedLock> = nodes.iter().collect();
        assert_eq!(
            quorum_view(&group, 3).holder_count,
            2,
            "only one node has 3"
        );
        assert_eq!(quorum_view(&group, 4).holder_count, 1);
        assert_eq!(
            quorum_view(&group[..1], 3).holder_count,
            1,
            "fewer than a quorum"
        );
    }
}
