//! # redmutex — distributed locks on Redis
//!
//! Make sure only one process in a fleet runs a job, touches a row or holds a resource at a
//! time, over the redis-rs async connection you already have.
//!
//! - **Owner-checked**: each lock holds a fresh 128-bit random [`Token`]; release, refresh
//!   and TTL queries compare it atomically in Lua, on every key, and never touch a lock
//!   that another owner holds. A lost lock is a distinct error, [`Error::NotHeld`].
//! - **Multi-key, all or nothing**: [`Locker::acquire_all`] sets every key or none.
//! - **Metadata** stored with the token and readable by anyone through [`Locker::inspect`].
//! - **Retry strategies** that are plain iterators of delays ([`retry`]): none,
//!   immediate, constant, linear, exponential with cap, fixed ticks, jitter, a limit on
//!   tries, or your own — bounded by a deadline (default: the TTL).
//! - **Keep-alive with a loud "lost" signal**: [`Lock::keep_alive`] turns a lock into a
//!   [`Lease`] renewed in the background; [`Lease::lost`], [`Lease::is_lost`], a
//!   cancellation token and [`Lease::run`] stop the work in time when the lock is lost.
//!   All leases of a locker are renewed by one task, in batches.
//! - **One round trip per operation**; scripts go by SHA.
//! - **Cancel safe**: an acquire dropped mid-flight (e.g. by `tokio::time::timeout`) cleans
//!   up after itself; a dropped [`Lock`] is released in the background.
//!
//! ## Quick tour
//!
//! ```no_run
//! use std::time::Duration;
//! use redmutex::{retry, Locker};
//! use redmutex::retry::{Jitter, RetryExt};
//!
//! # async fn demo() -> Result<(), redmutex::Error> {
//! let locker = Locker::new(redmutex::connect("redis://127.0.0.1:6379").await?);
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
//! ## Guarantees and limits
//! A lock on a single Redis node is as safe as that node: if it restarts without
//! persistence, or fails over to a replica that had not yet received the key, another
//! client can acquire the same lock. [`Lock::valid_until`] tells how long this client may
//! safely assume it holds the lock (measured from the moment the request was sent, on the
//! monotonic clock); past it, stop the guarded work or [`refresh`](Lock::refresh).

mod acquire;
mod args;
mod connection;
mod error;
mod keepalive;
mod lock;
mod locker;
pub mod quorum;
mod redlock;
mod renewer;
pub mod retry;
mod scripts;
mod store;
mod token;

pub use acquire::{Acquire, FailedTry, TryFailure};
pub use args::{MAX_KEY_LEN, MAX_METADATA_LEN, MAX_TTL, MIN_TTL};
pub use connection::{connect, connect_lazy, Connection, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
pub use error::{Argument, Error, InvalidArgument, NotObtained};
pub use keepalive::{KeepAlive, Lease, LostReason, LostSignal};
pub use lock::Lock;
pub use locker::{LockInfo, Locker, NodeInfo};
pub use quorum::{NodeError, NodeFailure, QuorumFailure, QuorumSettings};
pub use token::{Token, TOKEN_LEN};
