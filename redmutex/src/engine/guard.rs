//! The held guard: what every primitive hands out once acquired — its token, its validity on
//! this client's clock, its fence, and its release on drop.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::args::{self, Keys};
use crate::connection::Connection;
use crate::engine::context::Context;
use crate::engine::lost::LeaseState;
use crate::engine::meter::HeldMark;
use crate::error::{Argument, Error};
use crate::fence;
use crate::scripts::{Claim, Held};
use crate::token::Token;
use crate::writes::Writes;

/// A lock held in Redis: one or more keys that hold this owner's [`Token`] — or, as a
/// [`Permit`](crate::Permit), permits of a [`Semaphore`](crate::Semaphore). `P` says what is
/// held: the lock's keys ([`Keys`], the default) or [`Permits`](crate::claim::Permits).
///
/// Every operation is owner-checked in Redis: [`refresh`](Lock::refresh),
/// [`ttl`](Lock::ttl) and [`release`](Lock::release) answer [`Error::NotHeld`] once the
/// lock expired or was taken over, and never touch a key another owner holds.
///
/// # Dropping
/// Dropping a `Lock` that was not released starts an owner-checked release in the background,
/// on the current tokio runtime; `Drop` itself never blocks or waits. A lock dropped as the
/// program ends — `main` returning, a `?` early return, the runtime shutting down with the
/// release unfinished — or outside any runtime is released all the same: a thread of redmutex's
/// own finishes the release (a few tries within 2 s), and a process that exits meanwhile waits
/// for it at exit, at most 2 s. This needs a connection that can reconnect on another runtime —
/// a [`ConnectionManager`](redis::aio::ConnectionManager), as
/// [`connect`](crate::connection::connect) gives — or one whose own runtime is still running.
/// Over a bare `MultiplexedConnection` or a cluster connection whose runtime is gone, and in a
/// process killed outright, the keys expire by their TTL: release explicitly
/// ([`release`](Lock::release), [`Lease::run`](crate::Lease::run)) where that matters. See
/// [`safety`](crate::safety). To leave the lock in Redis on purpose, e.g. to hand the token to
/// another process, call [`detach`](Lock::detach).
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// let mut lock = locker.acquire("invoice:42", Duration::from_secs(10)).await?;
/// // ... work ...
/// lock.refresh(Duration::from_secs(10)).await?; // need more time
/// println!("{:?} left", lock.ttl().await?);
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lock releases it; keep it alive while the guarded work runs"]
pub struct Lock<C: Connection, P: Held = Keys> {
    context: Arc<Context<C>>,
    /// What is held, as its primitive describes it (keys, permits), and as the engine and
    /// the backend drive it ([`Held`]).
    claim: Arc<P>,
    token: Token,
    metadata: Option<String>,
    lease_ttl: Duration,
    acquired_at: Instant,
    /// Until when it is certainly held, while no lease renews it.
    valid_until: Instant,
    /// While kept alive: what the lease's renewals and its end keep (the validity, whether
    /// it was lost), read by every accessor here, so that a [`Lease`](crate::Lease) is this
    /// lock seen through its renewals.
    lease: Option<Arc<LeaseState>>,
    /// Taken with the claim, or on the first [`Lock::fence`]; kept from then on.
    fence: tokio::sync::OnceCell<u64>,
    /// A release before this leaves the claim to expire then ([`Acquire::min_hold`]).
    ///
    /// [`Acquire::min_hold`]: crate::Acquire::min_hold
    keep_until: Option<Instant>,
    release_on_drop: bool,
    /// Counts this guard as held in the locker's stats until it goes.
    _held: HeldMark,
}

/// What a successful acquire hands to the [`Lock`] it creates.
pub(crate) struct Grant {
    pub(crate) token: Token,
    pub(crate) metadata: Option<String>,
    pub(crate) ttl_ms: u64,
    pub(crate) sent_at: Instant,
    pub(crate) valid_until: Instant,
    /// The fence, when the acquire took it with the claim.
    pub(crate) fence: Option<u64>,
    /// The end of the minimum hold time, if any.
    pub(crate) keep_until: Option<Instant>,
}

impl<C: Connection, P: Held> Lock<C, P> {
    pub(crate) fn new(context: Arc<Context<C>>, claim: Arc<P>, grant: Grant) -> Lock<C, P> {
        let held = context.meter.hold(claim.as_claim().0.kind(), grant.sent_at);
        Lock {
            _held: held,
            context,
            claim,
            token: grant.token,
            metadata: grant.metadata,
            lease_ttl: Duration::from_millis(grant.ttl_ms),
            acquired_at: grant.sent_at,
            valid_until: grant.valid_until,
            lease: None,
            fence: tokio::sync::OnceCell::new_with(grant.fence),
            keep_until: grant.keep_until,
            release_on_drop: true,
        }
    }

    /// What is held, as its primitive describes it.
    pub(crate) fn what(&self) -> &P {
        &self.claim
    }

    /// The same, as the engine and the backend drive it.
    pub(crate) fn claim(&self) -> &dyn Claim {
        self.claim.as_claim().0
    }

    /// The same, for what outlives this lock (a lease's renewals, a background release).
    pub(crate) fn shared_claim(&self) -> Arc<dyn Claim> {
        P::into_claim(self.claim.clone()).0
    }

    pub(crate) fn context(&self) -> &Context<C> {
        &self.context
    }

    pub(crate) fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// When a minimum hold time set by the acquire ends, if any.
    pub(crate) fn keep_until(&self) -> Option<Instant> {
        self.keep_until
    }

    /// Hands the validity to a lease's renewals (`Some`), or takes back what they left
    /// (`None`: renewed, shortened, or ended by a loss).
    pub(crate) fn set_lease(&mut self, lease: Option<Arc<LeaseState>>) {
        if let Some(state) = self.lease.take() {
            self.valid_until = state.valid_until();
        }
        self.lease = lease;
    }

    /// Whether a lease that renewed this lock has ended by a loss: nothing is sent for it
    /// any more.
    fn lease_lost(&self) -> bool {
        (self.lease.as_ref()).is_some_and(|state| state.reason().is_some())
    }

    /// The owner's token. Whoever knows it can refresh and release the lock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("import", Duration::from_secs(30)).await?;
    /// let token = lock.token();
    /// // Another process that was handed the token may release the lock:
    /// let other = redmutex::Locker::in_memory_on(locker.connection());
    /// other.release_with_token(["import"], &token).await?;
    /// assert!(lock.release().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Token {
        self.token
    }

    /// The metadata stored with the token, if any.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let acquire = locker.acquire("import", Duration::from_secs(30));
    /// let lock = acquire.metadata("host=web-3 pid=4121").await?;
    /// assert_eq!(lock.metadata(), Some("host=web-3 pid=4121"));
    /// let seen = locker.inspect("import").await?; // as others see it
    /// assert_eq!(seen.metadata.as_deref(), lock.metadata());
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn metadata(&self) -> Option<&str> {
        self.metadata.as_deref()
    }

    /// Replaces the metadata kept here, once the server has the new one.
    pub(crate) fn set_metadata(&mut self, metadata: String) {
        self.metadata = Some(metadata);
    }

    /// This acquisition's fencing token: greater than the fence of every earlier holder of
    /// any of its keys (see [Fencing tokens](crate#fencing-tokens)). Pass it with every
    /// write to the resource the lock guards, and have the resource refuse writes with a
    /// fence lower than the highest it has seen: a holder that was paused past its TTL then
    /// cannot overwrite the work of the holder after it.
    ///
    /// The first call takes the fence, in one owner-checked round trip that succeeds only
    /// while this owner still holds every key (Redlock: on a quorum, two round trips); later
    /// calls answer at once with the same fence. Locks whose fence is never asked for cost
    /// nothing and leave no counter. To take it with the keys instead (one round trip for
    /// both), acquire [`with_fence`](crate::Acquire::with_fence).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock is no longer held (no fence is handed out: the work
    /// must stop); [`Error::Redis`] / [`Error::NoQuorum`] when Redis could not be reached
    /// (try again); [`Error::Redis`], not transient, when a counter holds someone else's
    /// data; [`Error::InvalidArgument`] on a locker built
    /// [`without_fences`](crate::Locker::without_fences).
    ///
    /// # Cancel safety
    /// Cancel safe: a fence taken by a cancelled call is never handed out, and the next call
    /// takes a greater one.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let first = locker.acquire("report", Duration::from_secs(10)).await?;
    /// let a = first.fence().await?;
    /// first.release().await?;
    /// let second = locker.acquire("report", Duration::from_secs(10)).with_fence().await?;
    /// assert!(second.fence().await? > a);
    /// # second.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn fence(&self) -> Result<u64, Error> {
        if let Some(fence) = self.fence_if_taken() {
            return Ok(fence);
        }
        // A lease that ended by a loss hands out no fence it had not taken.
        if self.lease_lost() {
            return Err(Error::NotHeld);
        }
        let valid_until = self.valid_until();
        if !self.context.fences.enabled {
            return Err(Error::invalid(
                Argument::Fences,
                "this locker was built without fences (Locker::without_fences)",
            ));
        }
        let take = || async {
            let (token, ttl) = (&self.token, self.lease_ttl);
            let retention_ms = self.context.fences.retention_ms;
            (self.context.backend)
                .fence(self.claim(), token, ttl, retention_ms, valid_until)
                .await
        };
        let fence = self.fence.get_or_try_init(take).await.copied();
        self.heard(fence)
    }

    /// Passes on what a request answered; one that says the lock is no longer held (taken
    /// from it: forced, expired and taken) wakes one of this locker's own waiters for its
    /// keys, which queued behind it without a try and count on its release — which will
    /// not come now (see [`Lock::wake_own_waiters`]).
    fn heard<T>(&self, answer: Result<T, Error>) -> Result<T, Error> {
        if let Err(Error::NotHeld) = answer {
            self.wake_own_waiters();
        }
        answer
    }

    /// The fence, if it was taken already (by the acquire or by [`fence`](Lock::fence)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("ledger", Duration::from_secs(10)).await?;
    /// assert_eq!(lock.fence_if_taken(), None); // not asked for yet
    /// let fence = lock.fence().await?;
    /// assert_eq!(lock.fence_if_taken(), Some(fence));
    /// let fenced = locker.acquire("audit", Duration::from_secs(10)).with_fence().await?;
    /// assert!(fenced.fence_if_taken().is_some()); // taken with the key
    /// # lock.release().await?;
    /// # fenced.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fence_if_taken(&self) -> Option<u64> {
        self.fence.get().copied()
    }

    /// The TTL set by the acquire or the last successful refresh (in whole milliseconds).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let mut lock = locker.acquire("import", Duration::from_micros(2_500_900)).await?;
    /// assert_eq!(lock.lease_ttl(), Duration::from_millis(2500));
    /// lock.refresh(Duration::from_secs(60)).await?;
    /// assert_eq!(lock.lease_ttl(), Duration::from_secs(60));
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The instant until which the lock is certainly held, as far as this client can know:
    /// the moment the acquire (or last refresh) request was *sent*, plus the TTL less the
    /// clock-drift allowance (1 % of it by default; Redlock also subtracts the time the
    /// quorum took), on the client's monotonic clock. It ends strictly before the server
    /// lets anyone else in (see [`safety`](crate::safety), "The holder's validity"). Past
    /// it, assume the lock is gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// let start = Instant::now();
    /// let lock = locker.acquire("import", Duration::from_secs(30)).await?;
    /// assert_eq!(lock.valid_until(), start + Duration::from_millis(29_700));
    /// tokio::time::sleep_until(lock.valid_until()).await;
    /// // Past its validity the holder must stop; the server keeps the key a little longer.
    /// assert_eq!(lock.ttl().await?, Duration::from_millis(300));
    /// tokio::time::sleep(Duration::from_millis(301)).await;
    /// assert!(lock.release().await.unwrap_err().is_not_held()); // gone by then
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> Instant {
        match &self.lease {
            Some(state) => state.valid_until(),
            None => self.valid_until,
        }
    }

    /// Time left until [`valid_until`](Lock::valid_until); zero once past it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let mut lock = locker.acquire("import", Duration::from_secs(30)).await?;
    /// tokio::time::sleep(Duration::from_secs(20)).await; // work
    /// // The TTL less 1 % (the drift allowance), less the 20 s of work:
    /// assert_eq!(lock.remaining_validity(), Duration::from_millis(9_700));
    /// if lock.remaining_validity() < Duration::from_secs(15) {
    ///     lock.refresh(Duration::from_secs(30)).await?;
    /// }
    /// assert_eq!(lock.remaining_validity(), Duration::from_millis(29_700));
    /// tokio::time::sleep(Duration::from_secs(40)).await;
    /// assert_eq!(lock.remaining_validity(), Duration::ZERO);
    /// # Ok(()) }
    /// ```
    pub fn remaining_validity(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Asks Redis how long the lock has left: the smallest remaining TTL over its keys.
    /// `Duration::MAX` if someone removed the expiry of every key.
    ///
    /// Redlock: the remaining validity as this client knows it
    /// ([`remaining_validity`](Lock::remaining_validity)); no node is asked, because no
    /// single node's TTL says how long the quorum holds.
    ///
    /// # Errors
    /// [`Error::NotHeld`] if any key is no longer held by this owner (Redlock: once the
    /// validity has run out); [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("import", Duration::from_secs(30)).await?;
    /// tokio::time::sleep(Duration::from_secs(10)).await;
    /// assert_eq!(lock.ttl().await?, Duration::from_secs(20));
    /// locker.connection().take_over("import", Duration::from_secs(60)); // another owner
    /// assert!(lock.ttl().await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn ttl(&self) -> Result<Duration, Error> {
        let backend = &self.context.backend;
        let ttl = (backend.ttl(self.claim(), &self.token, self.valid_until())).await;
        self.heard(ttl)
    }

    /// Sets a new TTL on every key, counted from now, if this owner still holds all of them.
    ///
    /// Redlock: succeeds only when a quorum of nodes extended the lock before its current
    /// validity ran out, and the new lease leaves validity after the time taken and the
    /// drift allowance.
    ///
    /// # Errors
    /// [`Error::NotHeld`] (nothing was changed: the lock is lost — stop the work; Redlock:
    /// too many nodes no longer had it, or the validity ran out first);
    /// [`Error::InvalidArgument`] for a TTL outside
    /// [`MIN_TTL`](crate::limits::MIN_TTL)..=[`MAX_TTL`](crate::limits::MAX_TTL);
    /// [`Error::Redis`] / [`Error::NoQuorum`] (the lock may or may not have been extended;
    /// it is still valid until [`valid_until`](Lock::valid_until)).
    ///
    /// # Cancel safety
    /// If cancelled, the new TTL may or may not have been applied in Redis;
    /// [`valid_until`](Lock::valid_until) then keeps the earlier of the old and the new
    /// expiry, which is the safe assumption.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let mut lock = locker.acquire("import", Duration::from_secs(10)).await?;
    /// tokio::time::sleep(Duration::from_secs(8)).await; // the work takes longer than planned
    /// lock.refresh(Duration::from_secs(30)).await?;
    /// assert_eq!(lock.ttl().await?, Duration::from_secs(30));
    /// assert!(lock.refresh(Duration::ZERO).await.unwrap_err().is_invalid_argument());
    /// locker.connection().expire_now("import");
    /// assert!(lock.refresh(Duration::from_secs(30)).await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn refresh(&mut self, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = args::ttl_millis(ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let current = self.valid_until;
        // A shorter TTL may take effect even if we never see the reply: assume it has.
        let sent_at = Instant::now();
        let backend = &self.context.backend;
        self.valid_until = current.min(sent_at + ttl.saturating_sub(backend.drift(ttl)));
        let refreshed = (backend)
            .refresh(self.claim(), &self.token, ttl_ms, Some(current))
            .await;
        let outcome = match refreshed {
            Ok(valid_until) => {
                self.lease_ttl = ttl;
                self.valid_until = valid_until;
                Ok(())
            }
            Err(Error::NotHeld) => {
                // Lost: no longer valid, whatever the clock says.
                self.valid_until = self.valid_until.min(Instant::now());
                Err(Error::NotHeld)
            }
            Err(e) => Err(e),
        };
        // This locker's waiters learned how long the key lasts from their last try: one
        // that now ends sooner (a shorter TTL, or lost) must not keep them waiting longer.
        if self.valid_until < current {
            (self.context).waiters_held_until(self.claim(), self.valid_until);
        }
        outcome
    }

    /// Runs `writes` in Redis only if this owner still holds the lock: the ownership check
    /// and the commands in one script call, atomically — nothing is written once the lock
    /// expired (its holder paused past its TTL, say) or another owner took it, where a
    /// plain write sent then would land. For state kept in Redis itself this closes the
    /// process-pause problem without fences (see [`safety`](crate::safety), "Guarded
    /// writes"). Sent once, never repeated: the commands need not be safe to repeat.
    ///
    /// Returns each command's reply, in order, as redis-rs reads it; a command that fails
    /// answers [`redis::Value::ServerError`] and the others still run (those before it stay
    /// done, as in `MULTI`/`EXEC`). Where the locker confirms writes on replicas
    /// ([`Locker::with_replication`](crate::Locker::with_replication)), they are confirmed
    /// as a refresh is.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when this owner no longer holds the lock (nothing ran);
    /// [`Error::InvalidArgument`] ([`Argument::Writes`]), before anything is sent, for no
    /// command, a command [`Writes::add`](crate::Writes::add) could not take, a key of the
    /// lock itself (only its release may change it), on a cluster a key outside the
    /// lock's hash slot (a script runs on one node), and on Redlock
    /// (the lock lives on several servers, the data on one); [`Error::Redis`] when Redis
    /// could not be reached — the commands may or may not have run;
    /// [`Error::NotReplicated`] when they ran but the replicas did not confirm them.
    ///
    /// # Cancel safety
    /// If cancelled, the commands may or may not have run (all of them, or none: the check
    /// and the commands are one call).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("job:7", Duration::from_secs(10)).await?;
    /// let mut writes = redmutex::Writes::new();
    /// writes
    ///     .add(redis::cmd("SET").arg("job:7:state").arg("done"), ["job:7:state"])
    ///     .add(redis::cmd("INCR").arg("jobs:done"), ["jobs:done"]);
    /// let replies = lock.write_if_held(&writes).await?;
    /// assert_eq!(replies[1], redis::Value::Int(1));
    /// // Paused past its TTL, the holder lost the lock: its late writes land nowhere.
    /// tokio::time::sleep(Duration::from_secs(11)).await;
    /// assert!(lock.write_if_held(&writes).await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub async fn write_if_held(&self, writes: &Writes) -> Result<Vec<redis::Value>, Error> {
        self.check_writes(writes)?;
        if self.lease_lost() {
            return Err(Error::NotHeld);
        }
        let backend = &self.context.backend;
        let span = tracing::debug_span!(
            "redmutex.write_if_held",
            lock.kind = self.claim().kind(),
            writes = writes.len()
        );
        let replies = (backend.write_if_held(self.claim(), &self.token, writes))
            .instrument(span)
            .await;
        self.heard(replies)
    }

    /// Refuses `writes` that cannot run under this lock, before any request: none, a bad
    /// command, a key of the lock itself or a companion's (the protocol's own state, which
    /// only its scripts may change), or on a cluster a key outside the lock's hash slot.
    fn check_writes(&self, writes: &Writes) -> Result<(), Error> {
        writes.check()?;
        let refuse = |key: &[u8], why: String| {
            let key = String::from_utf8_lossy(key);
            Err(Error::invalid(Argument::Writes, format!("{key:?} {why}")))
        };
        let keys = self.claim().keys();
        if let Some(key) = writes.keys().find(|key| keys.iter().any(|own| own == *key)) {
            return refuse(
                key,
                "is this lock's own key: only its release may change it".into(),
            );
        }
        if self.context.backend.is_cluster() {
            let slot = fence::hash_slot(keys.get(0).unwrap_or_default());
            if let Some(key) = writes.keys().find(|key| fence::hash_slot(key) != slot) {
                let why = format!(
                    "is not in the lock's hash slot {slot}: a script runs on one node (give \
                     the keys the lock key's hash tag)"
                );
                return refuse(key, why);
            }
        }
        Ok(())
    }

    /// Deletes every key that still holds this owner's token (Redlock: on every node; done
    /// when a quorum confirmed).
    ///
    /// # Errors
    /// [`Error::NotHeld`] if some key had expired or was held by another owner (that key is
    /// left alone; keys still held by this owner are deleted all the same);
    /// [`Error::Redis`] / [`Error::NoQuorum`] if Redis could not be reached — a background
    /// release is then tried once more, and otherwise the keys expire by their TTL.
    ///
    /// # Cancel safety
    /// If cancelled, the release may or may not have reached Redis; the dropped lock then
    /// starts a background release, as on any drop.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("import", Duration::from_secs(30)).await?;
    /// lock.release().await?;
    /// assert!(!locker.inspect("import").await?.held);
    /// let lock = locker.acquire("import", Duration::from_secs(30)).await?;
    /// locker.connection().take_over("import", Duration::from_secs(60)); // another owner's now
    /// assert!(lock.release().await.unwrap_err().is_not_held());
    /// assert!(locker.inspect("import").await?.held); // left alone
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<(), Error> {
        let keys = self.claim().keys();
        let span = tracing::debug_span!(
            "redmutex.release",
            lock.name = %String::from_utf8_lossy(keys.get(0).unwrap_or_default()),
            lock.keys = keys.len(),
            kind = self.claim().kind(),
            held_ms = u64::try_from(self.acquired_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            outcome = tracing::field::Empty,
        );
        let backend = &self.context.backend;
        let (claim, token) = (self.shared_claim(), &self.token);
        let release = backend.release(&claim, token, Some(self.lease_ttl), self.keep_until);
        let result = match span.is_disabled() {
            true => release.await,
            false => release.instrument(span.clone()).await,
        };
        let outcome = match &result {
            Ok(()) => "released",
            Err(Error::NotHeld) => "not_held",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        if matches!(result, Ok(()) | Err(Error::NotHeld)) {
            self.context.meter.released();
        }
        self.wake_own_waiters();
        // Redis answered (released, or not ours any more): nothing left for Drop to do.
        // After a Redis error, Drop tries once more in the background. (A quorum backend
        // already retries the nodes that did not answer.)
        if !matches!(result, Err(Error::Redis(_))) {
            self.release_on_drop = false;
        }
        result
    }

    /// Turns this lock into one on `what` (another claim on the same keys, same token),
    /// atomically in Redis by `via`, a claim whose owner-checked refresh does the change
    /// (a writer becoming a reader). Counted as a refresh: for the lease TTL, within the
    /// current validity, on a quorum. On an error this lock is dropped, and so released.
    pub(crate) async fn convert<Q: Held>(
        mut self,
        what: Arc<Q>,
        via: &dyn Claim,
    ) -> Result<Lock<C, Q>, Error> {
        let ttl_ms = args::ttl_millis(self.lease_ttl)?;
        let valid_until = (self.context.backend)
            .refresh(via, &self.token, ttl_ms, Some(self.valid_until()))
            .await?;
        self.release_on_drop = false;
        // (The writer's hold ends here, the reader's starts.)
        let held = self
            .context
            .meter
            .hold(what.as_claim().0.kind(), Instant::now());
        Ok(Lock {
            context: self.context.clone(),
            claim: what,
            token: self.token,
            metadata: self.metadata.take(),
            lease_ttl: self.lease_ttl,
            acquired_at: self.acquired_at,
            valid_until,
            lease: None,
            fence: tokio::sync::OnceCell::new_with(self.fence.get().copied()),
            keep_until: self.keep_until,
            release_on_drop: true,
            _held: held,
        })
    }

    /// Forgets the lock without releasing it: it stays in Redis until its TTL runs out or
    /// someone with the returned token releases it. On Redlock, a token handed to another
    /// process at once wants a locker that waits for every node
    /// ([`QuorumSettings::wait_for_every_node`](crate::QuorumSettings::wait_for_every_node)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("handoff", Duration::from_secs(30)).await?;
    /// let token = lock.detach(); // e.g. to hand to the process that finishes the job
    /// tokio::time::sleep(Duration::from_secs(10)).await;
    /// assert!(locker.inspect("handoff").await?.held); // not released
    /// let finisher = redmutex::Locker::in_memory_on(locker.connection());
    /// finisher.release_with_token(["handoff"], &token).await?;
    /// assert!(!locker.inspect("handoff").await?.held);
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) -> Token {
        self.release_on_drop = false;
        self.token
    }
}

impl<C: Connection, P: Held> std::fmt::Debug for Lock<C, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("keys", self.claim().keys())
            .field("token", &self.token)
            .field("metadata", &self.metadata)
            .field("fence", &self.fence.get())
            .field("lease_ttl", &self.lease_ttl)
            .field("valid_until", &self.valid_until())
            .finish_non_exhaustive()
    }
}

impl<C: Connection, P: Held> Lock<C, P> {
    /// Wakes one of this locker's own waiters for these keys, if any: they queued behind
    /// this lock without a try. Where they line up (see `Waits::lined`), the locker left
    /// the line when it took the key, so no hand-off tells them; elsewhere the release's
    /// announcement may not come back (it reaches too few nodes' subscribers, or the
    /// value was stored unmarked on some). Woken, one tries: takes the key, or lines the
    /// locker up behind whoever the key was handed to. (Within one process, waiters take
    /// turns without the line.)
    fn wake_own_waiters(&self) {
        (self.context).waiters_held_until(self.claim(), Instant::now());
    }
}

impl<C: Connection, P: Held> Drop for Lock<C, P> {
    fn drop(&mut self) {
        if self.release_on_drop {
            let backend = &self.context.backend;
            backend.release_in_background(self.shared_claim(), self.token, self.keep_until);
            self.wake_own_waiters();
        }
    }
}
