//! The library's behaviour against real servers (and the in-memory one): one test
//! program with a module per subject, rather than a program per file, so that the
//! library's generic code is compiled and linked once for all of them.
//!
//! Three subjects stay programs of their own because they need the whole process:
//! `eviction.rs` and `observability.rs` install process-wide tracing subscribers and
//! metrics recorders, and `shutdown.rs` runs its own executable as a child.
//!
//! Run one subject with a filter: `cargo test --all-features --test integration
//! conformance::`.

#[path = "../common/mod.rs"]
mod common;

mod check;
mod contention;
mod election;
mod failures;
mod fair;
mod fencing;
mod guarded;
mod hostile;
mod keepalive;
mod listing;
mod margins;
mod mixed_holders;
mod operations;
mod quorum_return;
mod redlock;
mod replication;
mod revoke;
mod rwlock;
mod semaphore;
mod semaphore_faults;
mod wait_and_min_hold;
mod wakeup;

// Over the in-memory server (and, for the blocking API, its own runtime): the features
// that provide them.
#[cfg(all(feature = "blocking", feature = "memory"))]
mod blocking;
#[cfg(feature = "memory")]
mod conformance;
#[cfg(feature = "memory")]
mod differential;
#[cfg(feature = "memory")]
mod memory;

// The topologies and transports behind features.
#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "sentinel")]
mod sentinel;
#[cfg(feature = "cluster")]
mod sharded;
#[cfg(feature = "tls")]
mod tls_acl;
