//! The seam between the engine and the primitives: what a primitive's Lua script does on
//! one Redis node ([`Claim`]), and the plumbing every script shares.
//!
//! Each primitive (`primitives/`) is one Rust file and one Lua file. Its Rust file
//! implements [`Claim`] — the keys it occupies and one method per operation, each a single
//! round trip to one node — and everything above (the acquire loop, the held guard, the
//! lease and its renewer, wake-up, fences) and below (one node, a Redlock quorum, a
//! cluster) is written once against this trait. The Lua rules every primitive needs (the
//! owner check, fence counters) live in `scripts/helpers.lua`; each script starts with
//! those it uses ([`Operation`]).
//!
//! Each primitive has one Lua file with a section per operation, each run as a script of
//! its own ([`Operation`]); a semaphore's holders and a read-write lock's readers share
//! the operations of one holder (`scripts/holders.lua`). Scripts are sent by SHA
//! (`EVALSHA`), and whole to a node that does not know them yet ([`ScriptConn`]);
//! releases nobody waits for send the whole source ([`eval_whole`]).
//!
//! Three files, one job each: `claim.rs`, the trait and the values its operations take and
//! give; `lua.rs`, how a primitive's Lua file becomes one script per operation; `send.rs`,
//! how a script reaches a node that may not know it yet.

mod claim;
mod lua;
mod send;

pub(crate) use claim::{
    add_holder_renewal, held, holder_keys, AcquireTerms, Call, ChangeViaRefresh, Claim, FenceRaise,
    Obtain, ObtainTry, Operations, Place, Queue, Remaining, Waiter, Waits,
};
pub use claim::{ClaimRef, Held, SharedClaim};
pub(crate) use lua::{Operation, LINE_HEARTBEAT};
pub(crate) use send::{eval_whole, evalsha, send_notice, Conn, ScriptConn};

/// Runs an idempotent request once more if the first try found the connection broken
/// (e.g. the server restarted since the last request): a [`ConnectionManager`] reconnects
/// on that error, and the second try goes over the new connection. Only for requests that
/// are safe to repeat — release, refresh and reads.
///
/// [`ConnectionManager`]: redis::aio::ConnectionManager
macro_rules! idempotent {
    ($request:expr) => {
        match $request.await {
            Err(e) if e.is_unrecoverable_error() => $request.await,
            result => result,
        }
    };
}
pub(crate) use idempotent;

/// Declares a primitive's operations, each a script of its own (see [`Operation`]), from
/// its Lua file and any file whose operations it shares (named from the crate's `src`
/// directory): `operations!("primitives/mutex.lua"; RELEASE = "release", …)`;
/// `operations!("primitives/semaphore.lua", "scripts/holders.lua"; TTL = "ttl", …)`.
macro_rules! operations {
    ($($file:literal),+; $($name:ident = $op:literal),* $(,)?) => {
        /// The primitive's Lua files, one section per operation.
        pub(crate) const FILES: &[&str] =
            &[$(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $file))),+];
        $(
            pub(crate) static $name: std::sync::LazyLock<$crate::scripts::Operation> =
                std::sync::LazyLock::new(|| $crate::scripts::Operation::new(FILES, $op));
        )*
    };
}
pub(crate) use operations;
