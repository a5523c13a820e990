//! The counting semaphore: at most `limit` permits held at once across all processes, each
//! holder's permits leased on the server's clock (`semaphore.lua` says how they are kept).
//! Acquiring, keep-alive, fences, wake-up and release on drop are the engine's, as for the
//! mutex; this file says what the semaphore's keys are and how its script is called.

use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;

use crate::args::Keys;
use crate::connection::Connection;
use crate::engine::acquire::Acquire;
use crate::engine::context::Context;
use crate::engine::guard::Lock;
use crate::error::{Argument, Error, InvalidArgument};
use crate::fence::{companion_key, counter_key, Companion};
use crate::scripts::{
    add_holder_renewal, held, holder_keys, operations, Call, Claim, Conn, Obtain, ObtainTry,
    Operations, ScriptConn, Waits,
};
use crate::token::{Token, TOKEN_LEN};

operations!(
    "primitives/semaphore.lua", "scripts/holders.lua";
    OBTAIN = "obtain",
    RELEASE = "release",
    REFRESH = "refresh",
    RENEW = "renew",
    TTL = "ttl",
    FENCE = "fence",
    RAISE_FENCE = "raise_fence",
    GUARDED = "guarded",
);

/// The largest limit a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// A counting semaphore: at most [`limit`](Semaphore::limit) permits held at once, across
/// all processes. Made by [`Locker::semaphore`](crate::Locker::semaphore); cheap to clone.
///
/// [`acquire`](Semaphore::acquire) takes `n` permits atomically — all or none — with every
/// option of a lock's acquire ([`Acquire`]: retry strategies, deadline, failed-try
/// callback, metadata, fences, push wake-up) and hands out a [`Permit`]: refresh, release,
/// keep-alive with the lost signal, `run(work)`, release on drop — as a [`Lock`] does.
///
/// **How permits are kept** (the guarantee itself is in [`safety`](crate::safety)): each holder is
/// one member of a sorted set scored by when its permits expire *on the server's clock*,
/// so clients' clocks never decide; every operation first reclaims expired holders, so a
/// crashed holder's permits come back within its TTL; a renewal never brings back a holder
/// that was reclaimed. Every holder must pass the same limit: while some hold permits, an
/// acquire with another limit is refused ([`Error::InvalidArgument`], [`Argument::Limit`])
/// rather than silently admitting more. All keys share one hash slot, so a semaphore works
/// on Redis Cluster; on Redlock it is refused (see [`Locker::semaphore`]).
///
/// [`Locker::semaphore`]: crate::Locker::semaphore
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::retry;
/// // At most 4 exports at once across the fleet; this one needs 2 slots.
/// let exports = locker.semaphore("exports", 4)?;
/// let permit = exports
///     .acquire(2, Duration::from_secs(30))
///     .metadata("host=web-3 job=export-17")
///     .retry(retry::constant(Duration::from_millis(200)))
///     .deadline(Duration::from_secs(10))
///     .await?;
/// assert_eq!(permit.permits(), 2);
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore<C: Connection> {
    pub(crate) context: Arc<Context<C>>,
    /// The holders key (the name, with the prefix).
    key: Keys,
    limit: u32,
}

/// A semaphore's permits held by one owner: a [`Lock`] on [`Permits`].
pub type Permit<C> = Lock<C, Permits>;

impl<C: Connection> Semaphore<C> {
    /// A semaphore at `key` (the name with the prefix, checked) with `limit` permits.
    pub(crate) fn new(context: Arc<Context<C>>, key: Keys, limit: u32) -> Result<Self, Error> {
        if limit == 0 || limit > MAX_PERMITS {
            let reason = format!("a semaphore's limit must be 1..={MAX_PERMITS}, not {limit}");
            return Err(Error::invalid(Argument::Limit, reason));
        }
        if context.backend.quorum_settings().is_some() {
            return Err(Error::invalid(
                Argument::Nodes,
                "a semaphore cannot be kept by a Redlock quorum: permits counted on each node \
                 apart do not add up (with 2 permits on 3 nodes, three holders can each hold a \
                 quorum: AB, BC and AC); use one node (with Sentinel) or a cluster",
            ));
        }
        Ok(Semaphore {
            context,
            key,
            limit,
        })
    }

    /// The most permits held at once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let exports = locker.semaphore("exports", 4)?;
    /// assert_eq!(exports.limit(), 4);
    /// let permit = exports.acquire(1, Duration::from_secs(30)).await?;
    /// // Every holder must pass the same limit while some hold permits.
    /// let other = locker.semaphore("exports", 5)?.acquire(1, Duration::from_secs(30)).await;
    /// assert!(matches!(other, Err(redmutex::Error::InvalidArgument(e))
    ///     if e.argument == redmutex::error::Argument::Limit));
    /// # drop(permit);
    /// # Ok(()) }
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The semaphore's key as stored in Redis (with the locker's prefix): a sorted set of
    /// its holders.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let exports = locker.semaphore("exports", 4)?;
    /// assert_eq!(exports.key(), b"app:exports");
    /// let permit = exports.acquire(1, Duration::from_secs(30)).await?;
    /// assert!(locker.connection().keys().contains(&exports.key().to_vec()));
    /// # drop(permit);
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.key.get(0).expect("one key")
    }

    /// Starts acquiring `permits` permits, all or none, for `ttl`; configure and `.await`
    /// the returned [`Acquire`]. One try unless a retry strategy is given. A try that
    /// finds too few free reports when the earliest holder's permits expire, so a polling
    /// waiter never sleeps past the moment permits can be reclaimed.
    ///
    /// # Errors (when awaited)
    /// As [`Locker::acquire`](crate::Locker::acquire); [`Error::InvalidArgument`] with
    /// [`Argument::Permits`] for 0 permits or more than the limit (before anything is
    /// sent), with [`Argument::Limit`] when the current holders use another limit, with
    /// [`Argument::Key`] when the semaphore's keys hold data of another kind (e.g. a lock
    /// of the same name).
    ///
    /// # Cancel safety
    /// See [`Acquire`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let (exports, ttl) = (locker.semaphore("exports", 3)?, Duration::from_secs(30));
    /// let two = exports.acquire(2, ttl).await?;
    /// assert!(exports.acquire(2, ttl).await.unwrap_err().is_not_obtained()); // all or none
    /// let one = exports.acquire(1, ttl).await?;
    /// assert!(exports.acquire(4, ttl).await.unwrap_err().is_invalid_argument()); // over the limit
    /// # drop((two, one));
    /// # Ok(()) }
    /// ```
    pub fn acquire<'a>(&self, permits: u32, ttl: Duration) -> Acquire<'a, C, Permits> {
        let claim = match permits {
            0 => Err("at least 1".to_owned()),
            n if n > self.limit => Err(format!("at most the limit, {}", self.limit)),
            n => Ok(n),
        };
        let claim = claim
            .map_err(|bound| {
                let reason = format!("{permits} permits asked for; a semaphore takes {bound}");
                Error::invalid(Argument::Permits, reason)
            })
            .map(|n| Permits::new(self.key.clone(), n, self.limit));
        Acquire::new(self.context.clone(), claim, ttl)
    }

    /// Gives back the permits that `token` holds (a [`Permit`] handed on by its token,
    /// e.g. [`detach`](Lock::detach)ed and kept by another process): as many as it took.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the token holds none (expired, released, or never);
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// If cancelled, the permits may or may not have been given back.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let exports = locker.semaphore("exports", 4)?;
    /// let token = exports.acquire(3, Duration::from_secs(30)).await?.detach();
    /// exports.release_with_token(&token).await?;
    /// assert!(exports.inspect().await?.is_none()); // nobody holds a permit
    /// assert!(exports.release_with_token(&token).await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn release_with_token(&self, token: &Token) -> Result<(), Error> {
        // Zero permits: the script reads how many the holder took.
        let claim: Arc<dyn Claim> = Arc::new(Permits::new(self.key.clone(), 0, self.limit));
        (self.context.backend)
            .release(&claim, token, None, None)
            .await
    }

    /// Sets a new TTL, counted from now, on the permits that `token` holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the token holds none; [`Error::InvalidArgument`] for a TTL
    /// out of range (before any request); [`Error::Redis`].
    ///
    /// # Cancel safety
    /// If cancelled, the new TTL may or may not have been applied.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let exports = locker.semaphore("exports", 4)?;
    /// let token = exports.acquire(1, Duration::from_secs(30)).await?.detach();
    /// exports.refresh_with_token(&token, Duration::from_secs(600)).await?;
    /// let holder = &exports.inspect().await?.expect("held").holders[0];
    /// assert!(holder.ttl.unwrap() > Duration::from_secs(500));
    /// # Ok(()) }
    /// ```
    pub async fn refresh_with_token(&self, token: &Token, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = crate::args::ttl_millis(ttl)?;
        let claim = Permits::new(self.key.clone(), 0, self.limit);
        (self.context.backend)
            .refresh(&claim, token, ttl_ms, None)
            .await?;
        Ok(())
    }
}

impl<C: Connection> std::fmt::Debug for Semaphore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// What a [`Permit`] holds: some permits of one semaphore.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// use redmutex::{Lock, claim::Permits};
/// let exports = locker.semaphore("exports", 4)?;
/// let permit: Lock<_, Permits> = exports.acquire(2, Duration::from_secs(30)).await?;
/// assert_eq!(permit.permits(), 2);
/// # drop(permit);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Permits {
    /// The holders key.
    keys: Keys,
    /// The details key, beside it in its hash slot.
    details: Vec<u8>,
    /// The fence counter, beside it too.
    counter: Vec<u8>,
    permits: u32,
    limit: u32,
    /// The holder stores metadata: it has a details entry of its own (as one of more than
    /// one permit has), which its release deletes (see `semaphore.lua`).
    metadata: bool,
}

impl Permits {
    /// The holders key, as stored in Redis.
    fn key(&self) -> &[u8] {
        self.keys.get(0).expect("one key")
    }

    fn new(keys: Keys, permits: u32, limit: u32) -> Permits {
        let key = keys.get(0).expect("one key");
        let (details, counter) = (companion_key(key, Companion::Permits), counter_key(key));
        Permits {
            keys,
            details,
            counter,
            permits,
            limit,
            metadata: false,
        }
    }

    /// How many permits.
    ///
    /// ```
    /// // Only redmutex hands out `Permits`, inside a `Permit` (see `Lock::permits`):
    /// fn share(held: &redmutex::claim::Permits) -> f64 {
    ///     f64::from(held.count()) / f64::from(held.limit())
    /// }
    /// ```
    pub fn count(&self) -> u32 {
        self.permits
    }

    /// The semaphore's limit.
    ///
    /// ```
    /// // Only redmutex hands out `Permits`, inside a `Permit` (see `Lock::permits`):
    /// fn free_for_others(held: &redmutex::claim::Permits) -> u32 {
    ///     held.limit() - held.count()
    /// }
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

/// The operations every primitive answers alike (see [`Operations`]).
static OPERATIONS: Operations = Operations {
    release: &RELEASE,
    refresh: &REFRESH,
    ttl: &TTL,
    fence: &FENCE,
    raise_fence: &RAISE_FENCE,
    renew: &RENEW,
    guarded: &GUARDED,
};

held!(Permits);

impl Claim for Permits {
    fn kind(&self) -> &'static str {
        "semaphore"
    }

    fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The holders, the details, then (fenced) the fence counter.
    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8])) {
        let holders = self.keys.get(0).expect("one key");
        holder_keys([holders, &self.details, &self.counter], fenced, add);
    }

    fn operations(&self) -> &'static Operations {
        &OPERATIONS
    }

    /// Several holders at once: a release wakes as many waiters as it freed permits, and
    /// a newcomer tries before it waits (permits may be free for it while others wait for
    /// more). Waiting lockers line up beside the holders key (see `semaphore.lua`), as a
    /// lock's do: not on a cluster; one place per locker and number of permits wanted.
    fn waits(&self) -> Waits {
        Waits {
            one_holder: false,
            units: self.permits,
            ..Waits::one_holder(self.keys.lined())
        }
    }

    /// The holders, the details, and (where lockers line up) the line: a release hands
    /// the permits it frees to the first in line.
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        self.script_keys(false, add);
        if self.keys.lined() {
            add(&companion_key(self.key(), Companion::Line));
        }
    }

    /// The token, the time to keep the permits (0: none), how many, and whether the holder
    /// has a details entry: given a locker's id instead of a token, the release takes the
    /// place it waits at out of the line.
    fn release_args(&self, token: &Token, keep_ms: u64, add: &mut dyn FnMut(&[u8])) {
        add(token.as_bytes());
        add(keep_ms.to_string().as_bytes());
        add(self.permits.to_string().as_bytes());
        let detailed = self.permits > 1 || self.metadata;
        add(if detailed { b"1" } else { b"0" });
    }

    fn with_metadata(self) -> Self {
        Permits {
            metadata: true,
            ..self
        }
    }

    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        let mut call = self.call(&OBTAIN, request.terms.fenced);
        let metadata = request.terms.value.get(TOKEN_LEN + 1..).unwrap_or_default();
        let place = request.place();
        if place.is_some() {
            call.key(companion_key(self.key(), Companion::Line));
        }
        call.arg(request.terms.token.as_bytes())
            .arg(self.permits)
            .arg(self.limit)
            .arg(request.terms.ttl_ms)
            .arg(metadata)
            .arg(if request.waiting() && place.is_none() {
                "1"
            } else {
                "0"
            })
            .arg(request.terms.retention_ms);
        if let Some(place) = place {
            // Its token or a reservation for its place may be there already.
            let known = request.retrying_own || place.taken || place.shared;
            call.arg(place.locker.as_bytes());
            call.arg(if place.shared { "1" } else { "0" });
            call.arg(if known { "1" } else { "0" });
        }
        Box::pin(async move {
            let reply: (i64, i64) = call.invoke_async(&mut ScriptConn(conn)).await?;
            Ok(self.obtained(reply, request.terms.fenced))
        })
    }

    /// The holders, their details, and the key's ask companion (see `holders.lua`'s
    /// `renew`).
    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        add_holder_renewal(self, call, token, ttl_ms);
    }
}

impl Permits {
    /// The reply `{ status, detail }` of `obtain` (see `semaphore.lua`).
    fn obtained(&self, (status, detail): (i64, i64), fenced: bool) -> Obtain {
        match status {
            0 => Obtain::Obtained {
                fence: fenced.then_some(detail as u64),
            },
            1 => Obtain::Held {
                index: 0,
                ttl: u64::try_from(detail).ok().map(Duration::from_millis),
                ahead: None,
            },
            -1 => Obtain::Refused(InvalidArgument {
                argument: Argument::Limit,
                reason: format!(
                    "{:?} is held with a limit of {detail}; this acquire asked with {}: every \
                     holder of a semaphore must pass the same limit",
                    String::from_utf8_lossy(self.keys.get(0).unwrap_or_default()),
                    self.limit
                ),
            }),
            _ => Obtain::Refused(InvalidArgument {
                argument: Argument::Key,
                reason: format!(
                    "{:?} (or its details key) holds data that is not a redmutex semaphore, \
                     e.g. a lock of the same name; choose another name",
                    String::from_utf8_lossy(self.keys.get(0).unwrap_or_default())
                ),
            }),
        }
    }
}

impl<C: Connection> Lock<C, Permits> {
    /// How many permits this holds.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let exports = locker.semaphore("exports", 4)?;
    /// let permit = exports.acquire(3, Duration::from_secs(30)).await?;
    /// assert_eq!(permit.permits(), 3);
    /// assert_eq!(exports.inspect().await?.unwrap().permits, Some((3, 4))); // held, limit
    /// # drop(permit);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.what().count()
    }
}
