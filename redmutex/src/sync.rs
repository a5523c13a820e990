//! Locking a standard mutex. Nothing in redmutex panics while holding one; if something
//! did, the state it guards is still whole, so a poisoned mutex is used as it is — never a
//! second panic, in a `Drop` or on a background thread of the user's program.

use std::sync::{Mutex, MutexGuard};

/// `mutex`'s guard, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
