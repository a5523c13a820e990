//! [`Acquire`]: the builder and retry loop behind every primitive's acquire — the mutex's
//! [`Locker::acquire`](crate::Locker::acquire), a semaphore's
//! [`Semaphore::acquire`](crate::Semaphore::acquire).
//!
//! The loop is written once, against [`Claim`]; its parts live beside it: when to try
//! ([`Schedule`]), what the failed tries add up to ([`Tally`]), the place among waiters
//! ([`Waiting`]); `Tries` keeps them for one acquire and undoes a try whose fate is unknown.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::args::{self, Keys};
use crate::backend::common::{Attempt, Obtained};
use crate::backend::Backend;
use crate::check;
use crate::connection::Connection;
use crate::engine::context::Context;
use crate::engine::guard::{Grant, Lock};
use crate::engine::meter::Outcome;
use crate::engine::schedule::{Retry, Schedule};
use crate::engine::tally::{FailedTry, Observer, Tally};
use crate::engine::waiting::{wait_channel, Waiting};
use crate::engine::wakeup::Wake;
use crate::error::{Argument, Error};
use crate::scripts::{AcquireTerms, Claim, Held, ObtainTry, Place, Waiter, Waits, LINE_HEARTBEAT};
use crate::token::{self, Token};

/// A pending acquire: set options, then `.await` it.
///
/// By default it makes **one try** ([`retry::none`](crate::retry::none)); give a retry
/// strategy to wait for a lock held by someone else. The total wait is bounded by the
/// [`deadline`](Acquire::deadline), which defaults to the lock's TTL.
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::retry::{self, Jitter, RetryExt};
///
/// let lock = locker
///     .acquire("reports:nightly", Duration::from_secs(60))
///     .metadata("host=web-3 pid=4121 job=nightly")
///     .retry(retry::exponential(Duration::from_millis(20), Duration::from_secs(1)).jitter(Jitter::full()))
///     .deadline(Duration::from_secs(5))
///     .on_failed_try(|t| eprintln!("try {} failed: {:?}", t.attempt, t.reason))
///     .await?;
/// # let _ = lock.release().await;
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// Dropping the future (for instance through an outer `tokio::time::timeout`) is safe:
/// if a try may already have set keys — its request was in flight, or its reply was lost —
/// an owner-checked release is started in the background, so no key is left behind for
/// longer than that round trip. While the future sleeps between tries, nothing of ours is
/// in Redis and there is nothing to undo — but a fair lock's place in line, which the
/// same background release removes.
#[must_use = "an acquire does nothing unless awaited"]
pub struct Acquire<'a, C: Connection, P = Keys> {
    context: Arc<Context<C>>,
    /// What to acquire, as its primitive describes it and as the engine drives it — or
    /// what was wrong with the caller's input, reported when awaited.
    claim: Result<P, Error>,
    ttl: Duration,
    /// Take the fence with the claim ([`Acquire::with_fence`]).
    with_fence: bool,
    metadata: Option<String>,
    retry: Retry<'a>,
    deadline: Option<Duration>,
    on_failed_try: Option<Observer<'a>>,
    min_hold: Option<Duration>,
    /// A try that fails for any reason but "held" ends the acquire with that error.
    fail_fast: bool,
}

impl<'a, C: Connection, P: Held> Acquire<'a, C, P> {
    pub(crate) fn new(
        context: Arc<Context<C>>,
        claim: Result<P, Error>,
        ttl: Duration,
    ) -> Acquire<'a, C, P> {
        Acquire {
            context,
            claim,
            ttl,
            with_fence: false,
            metadata: None,
            retry: Box::new(crate::retry::none()),
            deadline: None,
            on_failed_try: None,
            min_hold: None,
            fail_fast: false,
        }
    }

    /// Ends the acquire with the error of the first try that fails for any reason but
    /// "held" (a connection lost, a timeout, no quorum), instead of retrying it: for a
    /// waiter that must not outlive its connection (an election's candidate).
    pub(crate) fn fail_fast(mut self) -> Self {
        self.fail_fast = true;
        self
    }

    /// Stores `metadata` with the token, readable by anyone through
    /// [`Locker::inspect`](crate::Locker::inspect): who holds the lock and why.
    /// At most [`MAX_METADATA_LEN`](crate::limits::MAX_METADATA_LEN) bytes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("reports:nightly", Duration::from_secs(60))
    ///     .metadata("host=web-3 pid=4121")
    ///     .await?;
    /// let seen = locker.inspect("reports:nightly").await?; // by anyone
    /// assert_eq!(seen.metadata.as_deref(), Some("host=web-3 pid=4121"));
    /// let too_long = "x".repeat(redmutex::limits::MAX_METADATA_LEN + 1);
    /// let refused = locker.acquire("reports:hourly", Duration::from_secs(60)).metadata(too_long);
    /// assert!(refused.await.unwrap_err().is_invalid_argument());
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// Takes the lock's [fence](Lock::fence) with its keys, in the same round trip (Redlock:
    /// one more only when the nodes' counters disagree), for holders that always pass it on
    /// to storage; [`Lock::fence`] then answers at once. Without it, the fence is taken on
    /// the first call to [`Lock::fence`], and locks whose fence is never read cost nothing.
    ///
    /// A locker built [`without_fences`](crate::Locker::without_fences) refuses it with
    /// [`Error::InvalidArgument`] before anything is sent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// let lock = locker.acquire("ledger", Duration::from_secs(10)).with_fence().await?;
    /// let requests = locker.connection().requests();
    /// let fence = lock.fence().await?; // already taken: no request
    /// assert_eq!(locker.connection().requests(), requests);
    /// assert_eq!(lock.fence_if_taken(), Some(fence));
    /// let unfenced = redmutex::Locker::in_memory().without_fences();
    /// let refused = unfenced.acquire("ledger", Duration::from_secs(10)).with_fence().await;
    /// assert!(refused.unwrap_err().is_invalid_argument());
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_fence(mut self) -> Self {
        self.with_fence = true;
        self
    }

    /// How long to wait between tries while the lock is held by someone else, or after a
    /// transient Redis error: any [`IntoIterator`] of [`Duration`]s (see [`crate::retry`]).
    /// The iterator is created here, for this acquire alone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, retry, Locker};
    /// let redis = MemoryRedis::new();
    /// let (a, b) = (Locker::in_memory_on(&redis), Locker::in_memory_on(&redis));
    /// let held = a.acquire("report", Duration::from_secs(2)).await?;
    /// let once = b.acquire("report", Duration::from_secs(30)).await; // one try only
    /// assert!(once.unwrap_err().is_not_obtained());
    /// let lock = b.acquire("report", Duration::from_secs(30))
    ///     .retry(retry::constant(Duration::from_millis(500)))
    ///     .await?; // got it once `held` expired
    /// assert!(held.release().await.unwrap_err().is_not_held());
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn retry<S>(mut self, strategy: S) -> Self
    where
        S: IntoIterator<Item = Duration>,
        S::IntoIter: Send + 'a,
    {
        self.retry = Box::new(strategy.into_iter());
        self
    }

    /// Bounds the total time spent trying, from the first try on: no try starts after it.
    /// When a pause would end past the deadline, the acquire instead makes one last try at
    /// the deadline. Defaults to the lock's TTL. `Duration::MAX` waits without limit.
    ///
    /// A try still in flight at the deadline (or after the TTL) is cut short when that
    /// moment is at most 5 s after the try was sent, and otherwise by the connection's
    /// response timeout; a success that comes too late is refused and undone either way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, retry, Locker};
    /// use tokio::time::Instant;
    /// let redis = MemoryRedis::new();
    /// let (a, b) = (Locker::in_memory_on(&redis), Locker::in_memory_on(&redis));
    /// let held = a.acquire("report", Duration::from_secs(60)).await?;
    /// let start = Instant::now();
    /// let tried = b.acquire("report", Duration::from_secs(30))
    ///     .retry(retry::constant(Duration::from_secs(2)))
    ///     .deadline(Duration::from_secs(5)) // tries at 0, 2, 4 and 5 s
    ///     .await;
    /// assert!(tried.unwrap_err().is_not_obtained());
    /// assert_eq!(start.elapsed(), Duration::from_secs(5));
    /// # held.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Calls `observer` after every failed try, including the last, with the attempt
    /// number, the reason and the pause that follows (the "notify" of backoff libraries).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, retry, Locker, TryFailure};
    /// let redis = MemoryRedis::new();
    /// let (a, b) = (Locker::in_memory_on(&redis), Locker::in_memory_on(&redis));
    /// let held = a.acquire("report", Duration::from_secs(60)).await?;
    /// let mut seen = Vec::new();
    /// let tried = b.acquire("report", Duration::from_secs(30))
    ///     .retry(retry::constant(Duration::from_secs(1)))
    ///     .deadline(Duration::from_secs(2))
    ///     .on_failed_try(|t| {
    ///         assert!(matches!(t.reason, TryFailure::Held { key: b"report" }));
    ///         seen.push((t.attempt, t.next_delay));
    ///     })
    ///     .await;
    /// assert!(tried.unwrap_err().is_not_obtained());
    /// let pause = Some(Duration::from_secs(1));
    /// assert_eq!(seen, [(1, pause), (2, pause), (3, None)]);
    /// # held.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn on_failed_try(mut self, observer: impl FnMut(&FailedTry<'_>) + Send + 'a) -> Self {
        self.on_failed_try = Some(Box::new(observer));
        self
    }

    /// Holds what is acquired for at least `min_hold` from the acquire, however early it is
    /// released (ShedLock's `lockAtLeastFor`): a release before then leaves it to expire at
    /// that moment instead of freeing it, so that a scheduled job runs at most once per
    /// period across the fleet even when it finishes fast and the hosts' clocks differ.
    /// The period counts on this client's monotonic clock from the moment the successful
    /// request was sent (the server keeps the key a little longer, never shorter). A
    /// release after it frees at once; a lost lock is not kept. It may be longer than the
    /// TTL: the release then extends what it keeps.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// // The hourly report: whoever gets it runs it; nobody else for the rest of the hour.
    /// match locker.acquire("report:hourly", Duration::from_secs(600))
    ///     .min_hold(Duration::from_secs(3600))
    ///     .await
    /// {
    ///     Ok(lock) => { /* ... a few seconds of work ... */ lock.release().await?; }
    ///     Err(e) if e.is_not_obtained() => {} // ran this hour already, or running
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = Some(min_hold);
        self
    }

    async fn run(self) -> Result<Lock<C, P>, Error> {
        // Everything the caller got wrong is reported before the first request.
        let mut what = self.claim?;
        let ttl_ms = args::ttl_millis(self.ttl)?;
        if let Some(min_hold) = self.min_hold {
            args::ttl_millis(min_hold).map_err(|e| with_argument(e, "min_hold"))?;
        }
        if let Some(metadata) = &self.metadata {
            args::check_metadata(metadata)?;
            if !metadata.is_empty() {
                what = what.with_metadata();
            }
        }
        let what = Arc::new(what);
        let claim = P::into_claim(what.clone()).0;
        let context = self.context;
        if self.with_fence && !context.fences.enabled {
            return Err(Error::invalid(
                Argument::Fences,
                "with_fence on a locker built without fences (Locker::without_fences)",
            ));
        }
        let token = Token::generate()?;
        let ttl = Duration::from_millis(ttl_ms);
        if context.eviction.first() {
            // The locker's first acquire has the eviction policy looked at, in a task of
            // its own: no acquire waits for it.
            tokio::spawn(check::warn_if_evicting(context.backend.nodes().to_vec()));
        }
        let mut waits = claim.waits();
        waits.lined &= context.lines_up();
        let (one_holder, units) = (waits.one_holder, waits.units);
        let tries = Tries {
            backend: &context.backend,
            claim: &claim,
            line: Line {
                locker: context.id()?,
                waits,
            },
            terms: AcquireTerms {
                value: token::lock_value(&token, self.metadata.as_deref()),
                token,
                ttl_ms,
                fenced: self.with_fence,
                retention_ms: context.fences.retention_ms,
            },
            schedule: Schedule::start(self.retry, self.deadline.unwrap_or(ttl)),
            tally: Tally::default(),
            waiting: Waiting::new(context.hub.clone(), one_holder, units),
            observer: self.on_failed_try,
            left: Leftovers::default(),
            fail_fast: self.fail_fast,
            probably_free: false,
        };
        let span = acquire_span(&*claim, ttl_ms);
        let mark = context.meter.start_acquire(claim.kind());
        let mut tries = tries;
        // (Without a subscriber that wants it, the span is off: no wrapper to poll through.)
        let obtained = match span.is_disabled() {
            true => tries.run().await,
            false => tries.run().instrument(span.clone()).await,
        };
        let attempts = tries.tally.attempts;
        drop(tries);
        let outcome = match &obtained {
            Ok(_) => Outcome::Acquired,
            Err(e) if e.is_not_obtained() => Outcome::NotObtained,
            Err(_) => Outcome::Failed,
        };
        context.meter.end_acquire(&mark, outcome, attempts);
        let waited = millis(mark.elapsed());
        span.record("attempts", attempts);
        span.record("wait_ms", waited);
        span.record("outcome", outcome.label());
        let obtained = match obtained {
            Ok(obtained) => obtained,
            Err(e) => {
                span.in_scope(|| tracing::debug!(error = %e, "acquire failed"));
                return Err(e);
            }
        };
        if let Some(fence) = obtained.fence {
            span.record("fence", fence);
        }
        let grant = Grant {
            token,
            metadata: self.metadata,
            ttl_ms,
            sent_at: obtained.sent_at,
            valid_until: obtained.valid_until,
            fence: obtained.fence,
            keep_until: self.min_hold.and_then(|d| obtained.sent_at.checked_add(d)),
        };
        Ok(Lock::new(context.clone(), what, grant))
    }
}

impl<'a, C: Connection, P: Held> IntoFuture for Acquire<'a, C, P> {
    type Output = Result<Lock<C, P>, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lock<C, P>, Error>> + Send + 'a>>;

    /// # Cancel safety
    /// See [`Acquire`]: dropping it never leaves anything behind for longer than a round
    /// trip.
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// The tries of one acquire, and what they keep between them.
struct Tries<'r, 'a, C: Connection> {
    backend: &'r Backend<C>,
    claim: &'r Arc<dyn Claim>,
    line: Line,
    terms: AcquireTerms,
    schedule: Schedule<'a>,
    tally: Tally,
    waiting: Waiting,
    observer: Option<Observer<'a>>,
    left: Leftovers,
    /// See [`Acquire::fail_fast`].
    fail_fast: bool,
    /// The next try follows a wake-up of this locker's own ([`Wake::Local`]): the key is
    /// probably free.
    probably_free: bool,
}

/// How the claim's waiters wait, and this locker among them.
struct Line {
    /// The locker's id among waiters.
    locker: Token,
    /// How the claim's waiters wait, its lines only where this locker's line up (see
    /// `Context::lines_up`).
    waits: Waits,
}

/// What earlier tries may have left in Redis, for giving up (or being dropped) to undo.
#[derive(Default)]
struct Leftovers {
    /// A try may have stored our token: the next try must accept it as ours, and giving up
    /// must release it.
    token: bool,
    /// A try put the locker in the key's line: giving up withdraws it, unless another
    /// waiter of the locker waits for the key.
    place: bool,
}

impl<C: Connection> Tries<'_, '_, C> {
    /// Tries until obtained, refused, or the schedule ends.
    async fn run(&mut self) -> Result<Obtained, Error> {
        let claim = self.claim;
        let keys = claim.keys();
        // When the pause after the last counted try ends.
        let mut wake: Option<Instant> = None;
        // This try re-checks after subscribing; it belongs to the try before it, so it
        // neither counts as an attempt nor takes a pause from the strategy.
        let mut recheck = false;
        loop {
            let first = self.tally.attempts == 0 && !recheck;
            if !recheck {
                self.tally.attempts += 1;
            }
            let (attempt, entered) = self.next_attempt(first).await;
            let held = attempt.held();
            // A waiter that entered without asking already listens where it entered.
            let held_key = held.filter(|_| !entered).map(|(index, _)| index);
            let held_ttl = held.and_then(|(_, ttl)| ttl);
            let ahead = match attempt {
                Attempt::Held { ahead, .. } => ahead,
                _ => None,
            };
            let attempts = self.tally.attempts;
            let failure = match attempt {
                Attempt::Obtained(obtained) => return Ok(obtained),
                attempt => self.tally.record(attempt, keys)?,
            };
            let found_held = failure.found_held();
            let now = Instant::now();
            if !recheck {
                wake = self.schedule.next_wake(now);
                if let Some(observer) = self.observer.as_mut() {
                    observer(&FailedTry {
                        attempt: attempts,
                        elapsed: now - self.schedule.started,
                        next_delay: wake.map(|w| w - now),
                        ahead,
                        reason: failure,
                    });
                }
            }
            if self.fail_fast && !found_held {
                self.tally.forget_held();
                return Err(self.give_up().await);
            }
            let Some(wake) = wake else {
                return Err(self.give_up().await);
            };
            let woken = self.pause((held_key, held_ttl), now, wake).await;
            recheck = woken == Some(Wake::Subscribed);
            self.probably_free = woken == Some(Wake::Local);
        }
    }

    /// This round's try, sent now — or none at all for a newcomer to a key this locker's
    /// waiters already wait for: it enters their queue, found held (`true`: entered).
    async fn next_attempt(&mut self, first: bool) -> (Attempt, bool) {
        // Only on the first try: `may_wait` peeks at the retry strategy (the caller's
        // iterator), which must not give up an element before a try has failed.
        let may_wait = first && self.schedule.may_wait();
        if may_wait {
            self.admit();
        }
        if may_wait && self.line.waits.queue.is_none() {
            let keys = self.claim.keys();
            let channels: Vec<Vec<u8>> = (keys.iter()).map(|key| self.wait_channel(key)).collect();
            if let Some((index, expires)) = self.waiting.enter(&channels, self.line.waits.lined) {
                let ttl = expires.map(|at| at.saturating_duration_since(Instant::now()));
                let (ahead, may_hold) = (None, false);
                let held = Attempt::Held {
                    index,
                    ttl,
                    ahead,
                    may_hold,
                };
                return (held, true);
            }
        }
        (self.try_once(first).await, false)
    }

    /// The pause after a failed try that found the key at `held` held (for `held_ttl` at
    /// most, when the reply said), until `wake` at the latest: listening for its release
    /// where the locker's waiters hear of it. How it ended, when woken.
    async fn pause(
        &mut self,
        (held, held_ttl): (Option<usize>, Option<Duration>),
        now: Instant,
        wake: Instant,
    ) -> Option<Wake> {
        let keys = self.claim.keys();
        // A waiter in a queue hears of its turn on a channel of its own.
        let channel = match (self.queue_channel(), &self.line.waits.channel) {
            (Some(channel), _) => held.map(|_| channel),
            (None, Some(channel)) => held.map(|_| channel.clone()),
            (None, None) => {
                (held.and_then(|index| keys.get(index))).map(|key| self.wait_channel(key))
            }
        };
        self.waiting.join(channel.as_deref());
        // A held key that expires before the next try is due is tried when it expires
        // (one millisecond more: it is certainly gone by then); a waiter in a queue or a
        // line tries at least once per heartbeat interval, which keeps its place.
        let expires = held_ttl.and_then(|ttl| now.checked_add(ttl + Duration::from_millis(1)));
        let wake = expires.map_or(wake, |expires| expires.min(wake));
        let wake =
            (self.line.waits.queue.as_ref()).map_or(wake, |queue| wake.min(now + queue.every));
        let wake = match self.left.place {
            true => wake.min(now + LINE_HEARTBEAT / 3),
            false => wake,
        };
        self.waiting.pause(wake).await
    }

    /// Before the first try of an acquire that may wait. On a key this locker's waiters are
    /// subscribed to, a newcomer joins them before its first try — unless waiters queue in
    /// Redis, where the first try takes the newcomer's place in line. A waiter whose try
    /// takes a place in Redis (a queue, or a line where several hold at once) joins its
    /// subscribed channel before that try: a turn announced while it is under way is
    /// heard, and no re-check follows.
    fn admit(&mut self) {
        let channel = match self.queue_channel() {
            Some(channel) => channel,
            None if self.line.waits.lined && !self.line.waits.one_holder => {
                self.wait_channel(self.claim.keys().get(0).expect("one key"))
            }
            None => return,
        };
        self.waiting.admit(&channel);
    }

    /// The channel a waiter for `key` hears of its release (or its locker's turn) on.
    fn wait_channel(&self, key: &[u8]) -> Vec<u8> {
        let channels = self.claim.keys().channels();
        wait_channel(key, self.line.waits.lined, &self.line.locker, channels)
    }

    /// The channel a waiter in a queue kept in Redis hears of its turn on: the queue's
    /// own, or — where lockers line up too (a read-write lock's writers) — its locker's
    /// turn channel for the key, which a release handing the key to the locker announces
    /// on. `None` for a claim without a queue.
    fn queue_channel(&self) -> Option<Vec<u8>> {
        let queue = self.line.waits.queue.as_ref()?;
        Some(match self.line.waits.lined {
            true => self.wait_channel(self.claim.keys().get(0).expect("one key")),
            false => queue.channel.clone(),
        })
    }

    /// One try, sent now (the first right at the start: one clock read saved).
    async fn try_once(&mut self, first: bool) -> Attempt {
        let sent_at = match first {
            true => self.schedule.started,
            false => Instant::now(),
        };
        let retrying_own = self.left.token;
        self.left.token = true;
        let waiting = self.waiting.is_member();
        // A waiter puts its locker in line only when the hand-off's message would reach
        // it, and where one node decides (a quorum's nodes could hand to different
        // lockers).
        // (Once in line, it stays there, and leaves it with the try that takes the key or
        // by withdrawing, even while its subscription is down.)
        let named = self.line.waits.lined && (self.waiting.hears() || self.left.place);
        let kept = match named {
            true => self.kept_places(),
            false => Vec::new(),
        };
        let terms = &mut self.terms;
        let ttl = Duration::from_millis(terms.ttl_ms);
        let try_until = self.schedule.try_until(sent_at, ttl);
        // A waiter not in a line says "awaited" in its value: others probably wait too,
        // and must hear of its release on the key's channel. (A fair waiter hears of its
        // turn on a channel of its own; lockers in line, of the hand-off on theirs.)
        let queued = self.line.waits.queue.is_some();
        token::set_awaited(&mut terms.value, waiting && !named && !queued);
        let queue = queued && self.schedule.may_wait();
        let others_waiting = waiting && !self.waiting.alone();
        // A try that takes the key for one of several waiters of the locker keeps its
        // place in line, for the others.
        let request_kept_place = others_waiting && named;
        let keys = self.claim.keys();
        let place = named.then_some(Place {
            locker: &self.line.locker,
            taken: self.left.place,
            shared: others_waiting,
            kept: &kept,
        });
        let probably_free = std::mem::take(&mut self.probably_free);
        let request = ObtainTry {
            terms: &*terms,
            retrying_own,
            queue,
            waiter: waiting.then_some(Waiter {
                place,
                probably_free,
            }),
        };
        let attempt = (self.backend)
            .try_obtain(&**self.claim, request, sent_at, try_until)
            .await;
        // A waiter that is (or may be) in the queue must leave it when it gives up.
        let in_queue = queued && (queue || retrying_own);
        let obtained = matches!(attempt, Attempt::Obtained(_));
        if obtained && request_kept_place {
            self.waiting.kept_place();
        }
        self.left.token = !obtained && (attempt.may_hold() || in_queue);
        // One obtained took the key, and left the line.
        self.left.place = (self.left.place || named) && !obtained;
        let multi_key_waiter = keys.len() > 1 && self.waiting.is_member();
        let channels: Vec<Vec<u8>> = match multi_key_waiter && attempt.held().is_some() {
            true => keys.iter().map(|key| self.wait_channel(key)).collect(),
            false => Vec::new(),
        };
        self.waiting.tried(&attempt, &channels);
        attempt
    }

    /// Several keys: per key, `'1'` where another waiter of this locker waits for it, and
    /// the locker's place in that key's line is theirs too (see `Place::kept`); empty for
    /// one key.
    fn kept_places(&self) -> Vec<u8> {
        let keys = self.claim.keys();
        if keys.len() < 2 {
            return Vec::new();
        }
        let others_at = |key: &[u8]| {
            let channel = wait_channel(key, true, &self.line.locker, keys.channels());
            self.waiting.others_at(&channel)
        };
        (keys.iter())
            .map(|key| if others_at(key) { b'1' } else { b'0' })
            .collect()
    }

    /// Stops waiting. Whether the locker's place must be withdrawn from the claim's lines
    /// (see [`Waiting::leave`]) — and if so, per key, where another waiter of the locker
    /// still waits and the place stays ([`kept_places`](Tries::kept_places)). Several
    /// keys: this waiter's tries lined the locker up for any of them, while it listens
    /// on one key's channel only, so every key without another waiter is withdrawn from.
    fn leave_lines(&mut self) -> Option<Vec<u8>> {
        // Neither waiting nor in line (every acquire that never waited, at its drop):
        // nothing to leave, nor to work out per key.
        if !self.left.place && !self.waiting.is_member() {
            return None;
        }
        let kept = self.kept_places();
        let last = self.waiting.leave(self.left.place);
        let unkept = self.left.place && kept.contains(&b'0');
        (last || unkept).then_some(kept)
    }

    /// The schedule ended: undo what a try whose fate is unknown may have stored, and
    /// say why the acquire failed.
    async fn give_up(&mut self) -> Error {
        if self.left.token {
            // Still marked while this runs: if the acquire is dropped meanwhile, `Drop`
            // sends the release again in the background. The request is sent whole (EVAL),
            // so a frozen server runs it when it wakes even after we stopped waiting.
            let (claim, token) = (&**self.claim, &self.terms.token);
            (self.backend)
                .release_unattended(claim, token, CLEANUP_WAIT)
                .await;
            self.left.token = false;
        }
        if let Some(kept) = self.leave_lines() {
            // The same release call, given the locker's id: it withdraws, and holds nothing
            // — but stays in the lines of keys another waiter of the locker waits for.
            let (claim, locker) = (self.claim.clone(), self.line.locker);
            (self.backend)
                .withdraw(claim, locker, kept, CLEANUP_WAIT)
                .await;
        }
        self.left.place = false;
        let attempts = self.tally.attempts;
        let error = std::mem::take(&mut self.tally).into_error(self.schedule.started);
        self.tally.attempts = attempts;
        error
    }
}

impl<C: Connection> Drop for Tries<'_, '_, C> {
    /// Undoes a try that may have stored our token if the acquire is dropped (or fails)
    /// before it knows.
    fn drop(&mut self) {
        if self.left.token {
            let token = self.terms.token;
            (self.backend).release_in_background(self.claim.clone(), token, None);
        }
        // The last of the locker's waiters to go takes its place out of line if it may be
        // there: a try named it, or another's took the key and kept the place for the
        // others. (Another waiter of the locker keeps the place, and a key handed to the
        // locker is its.) Otherwise a release would hand the key to nobody, and it would
        // idle until the hand-off passes, each time, until the place's heartbeat ends.
        if let Some(kept) = self.leave_lines() {
            let (claim, locker) = (self.claim.clone(), self.line.locker);
            (self.backend).withdraw_in_background(claim, locker, kept);
        }
    }
}

/// The span of one acquire: what is acquired (the first key, with the prefix, and how
/// many), and — recorded when it ends — the tries, the wait, the outcome and the fence.
/// Never the token: whoever knows it can release the lock.
fn acquire_span(claim: &dyn Claim, ttl_ms: u64) -> tracing::Span {
    let keys = claim.keys();
    let name = keys.get(0).map(String::from_utf8_lossy).unwrap_or_default();
    tracing::debug_span!(
        "redmutex.acquire",
        lock.name = %name,
        lock.keys = keys.len(),
        kind = claim.kind(),
        ttl_ms,
        attempts = tracing::field::Empty,
        wait_ms = tracing::field::Empty,
        outcome = tracing::field::Empty,
        fence = tracing::field::Empty,
    )
}

/// A TTL-shaped argument's error, saying which argument it was about.
fn with_argument(error: Error, name: &str) -> Error {
    match error {
        Error::InvalidArgument(invalid) => {
            Error::invalid(invalid.argument, format!("{name}: {}", invalid.reason))
        }
        other => other,
    }
}

/// `duration` in whole milliseconds, at most 10^13 (300 years: no wait lasts longer, and
/// it stays exact as a Lua number).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).map_or(LONGEST_MS, |ms| ms.min(LONGEST_MS))
}

/// The most [`millis`] says.
const LONGEST_MS: u64 = 10_000_000_000_000;

/// How long a giving-up acquire waits for its cleanup release before returning anyway.
const CLEANUP_WAIT: Duration = Duration::from_secs(1);
