//! What operators do with locks, as methods of [`Locker`](crate::Locker) above the
//! primitives: list them and describe one (`listing`), release one by force or ask its
//! holder to let go (`force`), and check the servers (`server`). Every read of a key's
//! state is parsed as the engine parses an inspection (`KeyState` in engine/inspect.rs),
//! from the fields every script reads it with (helpers.lua's `read_key`).

pub(crate) mod force;
pub(crate) mod listing;
pub(crate) mod server;
