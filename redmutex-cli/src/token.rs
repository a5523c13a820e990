//! What `release` and `refresh` act on: the lock — or the permits — that holds the token
//! `acquire` printed.

use redmutex::{connection::Connection, state::LockKind, Error, Locker, Semaphore, Token};

use crate::exit::{self, Failure};

/// A token as `acquire` printed it; anything else is a usage error.
pub fn parse(text: &str) -> Result<Token, Failure> {
    text.parse()
        .map_err(|e: Error| Failure::usage(e.to_string()))
}

/// Acts on what holds the token at `keys`: a lock (`on_lock`), or else, when the keys are
/// one semaphore's key, its permits (`on_permits`: `acquire --limit`). 0 when done, 1 when
/// neither holds the token.
pub async fn on_lock_or_permits<C: Connection>(
    locker: &Locker<C>,
    keys: &[String],
    urls: &[String],
    on_lock: impl AsyncFnOnce() -> Result<(), Error>,
    on_permits: impl AsyncFnOnce(Semaphore<C>) -> Result<(), Error>,
) -> Result<u8, Failure> {
    match on_lock().await {
        Ok(()) => Ok(0),
        Err(e) if e.is_not_held() => match semaphore_of(locker, keys).await {
            Some(semaphore) => (on_permits(semaphore).await)
                .map(|()| 0)
                .map_err(|e| not_held_or(&e, urls)),
            None => Err(not_held_or(&e, urls)),
        },
        Err(e) => Err(not_held_or(&e, urls)),
    }
}

/// The semaphore at `keys` when they are one key that holds one (`acquire --limit`): a
/// token that no lock of the key holds may hold its permits. Looked for only then, so
/// that a lock's release and refresh cost one request as before.
async fn semaphore_of<C: Connection>(locker: &Locker<C>, keys: &[String]) -> Option<Semaphore<C>> {
    let [key] = keys else {
        return None;
    };
    let listed = locker.describe(key).await.ok()??;
    // Giving back or renewing permits needs no limit; the holders' own, where known.
    let limit = listed.permits.map_or(1, |(_, limit)| limit.max(1));
    match listed.kind {
        LockKind::Semaphore => locker.semaphore(key, limit).ok(),
        _ => None,
    }
}

fn not_held_or(e: &Error, urls: &[String]) -> Failure {
    if e.is_not_held() {
        Failure::new(exit::NOT_HELD, "not held")
    } else {
        Failure::from_lock_error(e, urls)
    }
}
