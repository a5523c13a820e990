//! # redmutex — distributed locks on Redis
//!
//! Make sure only one process in a fleet runs a job, touches a row or holds a resource at a
//! time, over the redis-rs async connection you already have.
//!
//! - **Owner-checked**: each lock holds a fresh 128-bit random [`Token`]; release, refresh
//!   and TTL queries compare it atomically in Lua, on every key, and never touch a lock
//!   that another owner holds. A lost lock is a distinct error, [`Error::NotHeld`].
//! - **Multi-key, all or nothing**: [`Locker::acquire_all`] sets every key or none.
//! - **Counting semaphores** ([`Locker::semaphore`]): at most N permits held at once
//!   across all processes, with everything a lock has; expiries on the server's clock.
//! - **Fair locks** ([`Locker::fair_lock`]): waiters in every process served in arrival
//!   order, each with a heartbeat on the server's clock.
//! - **Read-write locks** ([`Locker::rw_lock`]): many readers or one writer, a waiting
//!   writer keeping new readers out; downgrade; on every topology.
//! - **Leader election** ([`Locker::election`]): campaign, a term that is a fence,
//!   proclaim, resign, and a stream of leader changes for everyone.
//! - **Metadata** stored with the token and readable by anyone through [`Locker::inspect`].
//! - **Retry strategies** that are plain iterators of delays ([`retry`]): none,
//!   immediate, constant, linear, exponential with cap, fixed ticks, jitter, a limit on
//!   tries, or your own — bounded by a deadline (default: the TTL).
//! - **Push wake-up** ([`Locker::with_wake_up`]): waiting acquires are woken by the
//!   holder's release (the waiters of one locker taking turns, and no locker starved by
//!   others: a release hands the key to the locker that has waited longest), and poll only
//!   as a fallback; releases nobody waits for publish nothing.
//! - **Keep-alive with a loud "lost" signal**: [`Lock::keep_alive`] turns a lock into a
//!   [`Lease`] renewed in the background; [`Lease::lost`], [`Lease::is_lost`], a
//!   cancellation token and [`Lease::run`] stop the work in time when the lock is lost.
//!   All leases of a locker are renewed by one task, in batches.
//! - **Fencing tokens**: a holder that asks ([`Lock::fence`]) gets a number greater than
//!   every earlier holder's of the same key, for storage to refuse writes from a holder
//!   that was paused past its TTL; locks whose fence nobody reads cost nothing; see
//!   [below](#fencing-tokens).
//! - **Redlock** over N independent masters: [`Locker::redlock`]; see [below](#redlock).
//! - **Redis Cluster** ([`Locker::cluster`], feature `cluster`), **Sentinel** ([`sentinel`],
//!   feature `sentinel`), **TLS** (`tls_client`, feature `tls`) and ACL users with a minimal
//!   rule ([`acl_rule`](check::acl_rule); [`Error::is_permission_denied`] when it is missing).
//! - **Operations**: [`Locker::list`] (every lock under the prefix: kind, holders, TTL,
//!   fence, waiters; by `SCAN`, a bounded page per call), [`Locker::describe`],
//!   [`Locker::force_release`] for a stuck holder.
//! - **Observability**: `tracing` spans for each acquire and release and WARN events for
//!   failed renewals, lost leases and partial quorums (never a token);
//!   [`Locker::stats`]; with the feature `metrics`, counters, gauges and histograms through
//!   the `metrics` facade, labelled by [`Locker::with_name`] and kind, never by key.
//! - **Replica confirmation** ([`Locker::with_replication`]): a write counts only once
//!   replicas have it (`WAIT` / `WAITAOF`), narrowing the failover window.
//! - **Blocking API** ([`blocking`], feature `blocking`): the same locker, primitives and
//!   guards for programs that are not async, over a runtime of the locker's own.
//! - **An in-memory server for your tests** ([`memory`], feature `memory`): every
//!   primitive without Redis, on tokio's clock, with faults on demand.
//! - **One round trip per operation**; scripts go by SHA.
//! - **Cancel safe**: an acquire dropped mid-flight (e.g. by `tokio::time::timeout`) cleans
//!   up after itself; a dropped [`Lock`] is released in the background, also when it is
//!   dropped as the program ends (see [`Lock`]).
//!
//! ## Quick tour
//!
//! ```no_run
//! use std::time::Duration;
//! use redmutex::{retry, Locker};
//! use redmutex::retry::{Jitter, RetryExt};
//!
//! # async fn demo() -> Result<(), redmutex::Error> {
//! let locker = Locker::new(redmutex::connection::connect("redis://127.0.0.1:6379").await?);
//!
//! // One try: is anyone else running the nightly job?
//! match locker.acquire("job:nightly", Duration::from_secs(30)).await {
//!     Ok(lock) => {
//!         // ... run the job, refreshing if it takes longer than planned ...
//!         lock.release().await?;
//!     }
//!     Err(e) if e.is_not_obtained() => println!("someone else runs it"),
//!     Err(e) => return Err(e),
//! }
//!
//! // Wait for a busy lock: exponential backoff 20 ms .. 1 s with full jitter, at most
//! // 10 tries, and never longer than 5 s in all.
//! let mut lock = locker
//!     .acquire("row:42", Duration::from_secs(10))
//!     .metadata("host=web-3 pid=4121")
//!     .retry(retry::exponential(Duration::from_millis(20), Duration::from_secs(1))
//!         .jitter(Jitter::full())
//!         .max_tries(10))
//!     .deadline(Duration::from_secs(5))
//!     .await?;
//! lock.refresh(Duration::from_secs(10)).await?;
//! println!("{:?} left", lock.ttl().await?);
//! lock.release().await?;
//!
//! // Who holds it?
//! let info = locker.inspect("job:nightly").await?;
//! println!("held={} ttl={:?} metadata={:?}", info.held, info.ttl, info.metadata);
//! # Ok(()) }
//! ```
//!
//! ## Guarantees
//! What a lock guarantees, under which conditions — the server keeping its data, clocks,
//! process pauses, networks — and which deployment fits which need is stated once, in
//! [`safety`] (the repository's `docs/SAFETY.md`); the rest of these docs describe how,
//! and link there. In practice: [`Lock::valid_until`] tells how long this client may
//! assume it holds the lock (from the moment the request was sent, on the monotonic
//! clock); past it, stop the guarded work or [`refresh`](Lock::refresh).
//!
//! Input is checked before any Redis call: keys up to [`MAX_KEY_LEN`](limits::MAX_KEY_LEN)
//! bytes (before the prefix), metadata up to [`MAX_METADATA_LEN`](limits::MAX_METADATA_LEN),
//! TTLs within [`MIN_TTL`](limits::MIN_TTL)..=[`MAX_TTL`](limits::MAX_TTL).
//!
//! ## Feature flags
//! None is on by default.
//!
//! | feature | what it adds |
//! |---|---|
//! | `tls` | `rediss://` URLs and `tls_client` (rustls with the ring provider; the system's roots or your CA) |
//! | `cluster` | [`Locker::cluster`] over redis-rs's async cluster connection |
//! | `sentinel` | [`sentinel::connect`]: a connection that follows the master through failovers |
//! | `metrics` | counters, gauges and histograms through the `metrics` facade ([`Locker::with_name`]) |
//! | `blocking` | `blocking`: the same locks with blocking calls, for programs that are not async |
//! | `memory` | `memory` and `Locker::in_memory`: an in-process server for your tests (not for production) |
//!
//! ## Fencing tokens
//! No lock can stop a holder that was paused (GC, swap, SIGSTOP, a slow network) past its
//! TTL from carrying on as if it still held the lock, while the next holder works too.
//! Fences let the guarded resource tell them apart: every acquisition gets a fence
//! ([`Lock::fence`]), the holder sends it with each write, and the resource refuses a write
//! whose fence is lower than the highest it has accepted.
//!
//! **Taken when asked for.** [`Lock::fence`] takes the fence in one owner-checked round
//! trip while this owner still holds every key (later calls answer at once); an acquire
//! [`with_fence`](Acquire::with_fence) takes it with the keys, in the same round trip. A
//! lock whose fence is never read costs what a plain lock costs (`SET NX PX`, then the
//! release script) and writes no counter. A holder that lost its lock gets
//! [`Error::NotHeld`], never a fence.
//!
//! **How they grow.** A fence is one more than the highest counter of the lock's keys, or the
//! server's clock in microseconds if that is greater (so a counter lost or set back with the
//! node's data is passed by the clock), taken while the keys are held and stored in all of
//! them; multi-key locks get one fence. On Redlock the candidate (the highest next fence among
//! the nodes that hold the keys) is handed out only once a quorum of nodes stores it while the
//! keys are still held there; usually the nodes agree and this costs nothing, otherwise one
//! more round trip raises the lower ones. (Taking the maximum over the answering quorum alone
//! is not enough: failed tries raise counters on minorities, and a later quorum without those
//! nodes would count from lower.) Fences skip numbers (compare them; never count on
//! `fence + 1`); they are below 2⁵³. What this guarantees, and under which conditions:
//! [`safety`], "What redmutex guarantees" (4) and "Fence counters".
//!
//! **Where they live.** Each key's counter is a key in the same Redis Cluster hash slot —
//! `{KEY}:fence` (or `{TAG}:fence:KEY` for keys with a hash tag or a `}`) — kept for
//! [`DEFAULT_FENCE_RETENTION`](limits::DEFAULT_FENCE_RETENTION) (a day) after its last use
//! ([`Locker::with_fence_retention`]). A counter that expired counts on from the server's clock
//! in microseconds, which has passed every fence it handed out: a key would need more than one
//! fence per microsecond, far beyond what a Redis node serves. Lock keys of those two forms are
//! refused ([`Error::InvalidArgument`]), so no lock key can be a counter. [`Locker::inspect`]
//! shows the latest fence ([`LockInfo::fence`](state::LockInfo::fence));
//! [`Locker::without_fences`] forbids fences on a locker.
//!
//! **Checking them** is the storage's job, atomically with the write. For example, in SQL
//! (a row holds the highest fence that wrote it):
//!
//! ```text
//! UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
//! -- 0 rows updated: a holder with a greater fence wrote since; this holder has lost the lock
//! ```
//!
//! and with Redis as the storage (`examples/fenced_storage.rs` runs this):
//!
//! ```no_run
//! # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>,
//! #               mut storage: redis::aio::MultiplexedConnection) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! // KEYS[1]: the data, KEYS[2]: the highest fence seen; ARGV: the value, the writer's fence.
//! let fenced_write = redis::Script::new(r"
//!     local highest = tonumber(redis.call('get', KEYS[2]) or '0')
//!     if tonumber(ARGV[2]) < highest then return 0 end
//!     redis.call('set', KEYS[2], ARGV[2])
//!     redis.call('set', KEYS[1], ARGV[1])
//!     return 1");
//! let lock = locker.acquire("report", Duration::from_secs(10)).await?;
//! let fence = lock.fence().await?;
//! let accepted: bool = fenced_write
//!     .key("report:data").key("report:fence")
//!     .arg("new contents").arg(fence)
//!     .invoke_async(&mut storage).await?;
//! if !accepted {
//!     // A later holder wrote first: this one lost the lock (e.g. it was paused).
//! }
//! lock.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Redlock
//! [`Locker::redlock`] takes locks on a quorum of N independent Redis masters, so that a
//! lock survives the loss of any minority of them. Every operation goes to all nodes at
//! once, each request bounded by the node timeout ([`QuorumSettings::node_timeout`];
//! default a twentieth of the TTL, 10–500 ms):
//!
//! - an acquire succeeds when `N / 2 + 1` nodes agreed **and** the validity
//!   `TTL − elapsed − (TTL × drift_factor + fixed_drift)` is positive (and at least
//!   [`QuorumSettings::min_validity`]); the lock is then valid until *send time + TTL −
//!   drift* on this client's monotonic clock ([`Lock::valid_until`]);
//! - a failed acquire try deletes its keys on every node — including those that did not
//!   answer in time, where the request may still land — before the next try;
//! - a refresh counts only if a quorum extended the lock before its current validity ran
//!   out; too many nodes without the lock is [`Error::NotHeld`], too few answers is
//!   [`Error::NoQuorum`];
//! - release deletes on every node; keep-alive and the lost signal work as on one node.
//!
//! ```no_run
//! # async fn demo() -> Result<(), redmutex::Error> {
//! use std::time::Duration;
//! use redmutex::{Locker, QuorumSettings};
//!
//! let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
//!              "redis://10.0.0.4:6379", "redis://10.0.0.5:6379"]
//!     .into_iter()
//!     .map(redmutex::connection::connect_lazy)
//!     .collect::<Result<Vec<_>, _>>()?;
//! let locker = Locker::redlock(nodes)?
//!     .with_quorum_settings(QuorumSettings::new().min_validity(Duration::from_secs(5)));
//! match locker.acquire("billing", Duration::from_secs(30)).await {
//!     Ok(lock) => { /* work, within lock.remaining_validity() */ lock.release().await?; }
//!     Err(redmutex::Error::NoQuorum(failure)) => {
//!         eprintln!("{} of {} nodes agreed; {} unreachable", failure.agreed, failure.nodes,
//!                   failure.unreachable());
//!     }
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
//!
//! What Redlock does not protect against — a node restarted empty while a lock is held,
//! clock jumps on a node, a holder paused past its validity — and the mitigations are in
//! [`safety`], "What no Redis lock can guarantee".

mod acl;
mod args;
mod backend;
mod background;
#[cfg(feature = "blocking")]
pub mod blocking;
pub mod check;
mod classify;
pub mod connection;
mod engine;
pub mod error;
mod fence;
mod locker;
#[doc = include_str!("../SAFETY.md")]
pub mod safety {}
/// An in-process stand-in for a Redis server, for your tests (feature `memory`; the crate
/// `redmutex-memory`): see [`Locker::in_memory`].
#[cfg(feature = "memory")]
pub use redmutex_memory as memory;
mod ops;
mod primitives;
mod pubsub;
mod quorum;
pub mod retry;
mod scripts;
#[cfg(feature = "sentinel")]
pub mod sentinel;
#[cfg(feature = "simulation")]
#[doc(hidden)]
pub mod simulation;
mod splitmix;
mod sync;
mod token;
mod writes;

/// What a held [`Lock`] holds, named by its type parameter: a mutex's keys, a fair lock's
/// key, a read-write lock's read or write side, a semaphore's permits, an election's key.
/// Most code names the guards instead ([`FairGuard`], [`ReadGuard`], [`WriteGuard`],
/// [`Permit`], [`Leadership`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{claim::Keys, Lock, memory::MemoryRedis};
/// # let locker = redmutex::Locker::in_memory();
/// let lock: Lock<MemoryRedis, Keys> = locker.acquire("job", Duration::from_secs(30)).await?;
/// # lock.release().await?;
/// # Ok(()) }
/// ```
pub mod claim {
    pub use crate::args::Keys;
    pub use crate::primitives::election::ElectionKey;
    pub use crate::primitives::fair::FairKey;
    pub use crate::primitives::rwlock::{ReadKey, WriteKey};
    pub use crate::primitives::semaphore::Permits;
    pub use crate::scripts::Held;
}

/// The limits every argument is checked against before any request, and the defaults.
///
/// ```
/// use redmutex::limits;
/// assert!(limits::check_keys("app:", ["job"]).is_ok());
/// let long = "k".repeat(limits::MAX_KEY_LEN + 1);
/// assert!(limits::check_keys("app:", [long]).unwrap_err().is_invalid_argument());
/// ```
pub mod limits {
    pub use crate::args::{
        check_keys, check_metadata, DEFAULT_HEARTBEAT, MAX_KEY_LEN, MAX_METADATA_LEN, MAX_TTL,
        MIN_HEARTBEAT, MIN_TTL,
    };
    pub use crate::fence::DEFAULT_FENCE_RETENTION;
    pub use crate::ops::listing::LIST_PAGE;
    pub use crate::primitives::election::DEFAULT_ELECTION_TTL;
    pub use crate::primitives::semaphore::MAX_PERMITS;
    pub use crate::token::TOKEN_LEN;
}

/// What a key holds, as [`Locker::inspect`], the primitives' `inspect` and
/// [`Locker::list`] read it: one family of plain values, one per kind of lock, and the
/// holders in them.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::state::LockInfo;
/// # let locker = redmutex::Locker::in_memory();
/// let lock = locker.acquire("job", Duration::from_secs(30)).await?;
/// let info: LockInfo = locker.inspect("job").await?;
/// assert!(info.held);
/// # lock.release().await?;
/// # Ok(()) }
/// ```
pub mod state {
    pub use crate::engine::inspect::{LockInfo, NodeInfo};
    pub use crate::ops::listing::{ListedHolder, ListedLock, Listing, LockKind};
}

pub use backend::replication::Replication;
pub use engine::acquire::Acquire;
pub use engine::guard::Lock;
pub use engine::lease::{KeepAlive, Lease};
pub use engine::lost::{LostReason, LostSignal};
pub use engine::meter::LockerStats;
pub use engine::tally::{FailedTry, TryFailure};
pub use engine::wakeup::WakeUpState;
pub use error::Error;
pub use locker::Locker;
pub use primitives::election::{Campaign, Election, Leader, Leadership};
pub use primitives::fair::{FairGuard, FairLock};
pub use primitives::rwlock::{ReadGuard, RwLock, WriteGuard};
pub use primitives::semaphore::{Permit, Semaphore};
pub use pubsub::WakeUpSource;
pub use quorum::QuorumSettings;
pub use token::Token;
pub use writes::Writes;
