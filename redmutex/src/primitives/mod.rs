//! The primitives: each one Rust file (its claim: keys, script arguments, how to read its
//! replies) and one Lua file beside it. Nothing in the engine or the backends changes to
//! add one. What every primitive's keys hold, for operators, is read in `ops`.

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod mutex;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
