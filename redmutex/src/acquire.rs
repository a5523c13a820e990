//! [`Acquire`]: the builder and retry loop behind [`Locker::acquire`](crate::Locker::acquire).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::args::{self, Keys};
use crate::check::{self, EvictionWatch};
use crate::connection::Connection;
use crate::error::Argument;
use crate::error::{Error, NotObtained};
use crate::fence::{self, Fences};
use crate::lock::{Grant, Lock};
use crate::quorum::QuorumFailure;
use crate::renewer::RenewerSlot;
use crate::scripts::ObtainTry;
use crate::store::{Store, TryResult};
use crate::token::{self, Token};
use crate::wakeup::{Entry, Hub, Member, Outcome, Wake};

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
/// in Redis and there is nothing to undo.
#[must_use = "an acquire does nothing unless awaited"]
pub struct Acquire<'a, C: Connection> {
    store: Store<C>,
    renewer: Arc<RenewerSlot<C>>,
    hub: Option<Arc<Hub>>,
    /// The locker's one look at the eviction policy, taken with its first try.
    eviction: Arc<EvictionWatch>,
    keys: Result<Keys, Error>,
    ttl: Duration,
    fences: Fences,
    /// Take the fence with the keys ([`Acquire::with_fence`]).
    with_fence: bool,
    metadata: Option<String>,
    retry: Box<dyn Iterator<Item = Duration> + Send + 'a>,
    deadline: Option<Duration>,
    on_failed_try: Option<Observer<'a>>,
}

/// The callback given to [`Acquire::on_failed_try`].
type Observer<'a> = Box<dyn FnMut(&FailedTry<'_>) + Send + 'a>;

/// What [`Acquire::on_failed_try`] is told about each failed try.
#[derive(Debug)]
#[non_exhaustive]
pub struct FailedTry<'e> {
    /// 1 for the first try.
    pub attempt: u32,
    /// Why it failed.
    pub reason: TryFailure<'e>,
    /// Time since the acquire started.
    pub elapsed: Duration,
    /// The pause before the next try, or `None` when this was the last one (the strategy
    /// ended or the deadline passed).
    pub next_delay: Option<Duration>,
}

/// Why one try failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TryFailure<'e> {
    /// This key (with the locker's prefix) is held by another owner.
    Held {
        /// The key found held.
        key: &'e [u8],
    },
    /// A transient Redis error (unreachable, timeout, loading, failover…).
    Redis(&'e redis::RedisError),
    /// Redlock: too few nodes agreed; [`QuorumFailure::held`] and
    /// [`QuorumFailure::unreachable`] say why.
    NoQuorum(&'e QuorumFailure),
}

impl<'a, C: Connection> Acquire<'a, C> {
    pub(crate) fn new(
        store: Store<C>,
        renewer: Arc<RenewerSlot<C>>,
        hub: Option<Arc<Hub>>,
        eviction: Arc<EvictionWatch>,
        keys: Result<Keys, Error>,
        ttl: Duration,
        fences: Fences,
    ) -> Acquire<'a, C> {
        Acquire {
            store,
            renewer,
            hub,
            eviction,
            keys,
            ttl,
            fences,
            with_fence: false,
            metadata: None,
            retry: Box::new(crate::retry::none()),
            deadline: None,
            on_failed_try: None,
        }
    }

    /// Stores `metadata` with the token, readable by anyone through
    /// [`Locker::inspect`](crate::Locker::inspect): who holds the lock and why.
    /// At most [`MAX_METADATA_LEN`](crate::MAX_METADATA_LEN) bytes.
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
    pub fn with_fence(mut self) -> Self {
        self.with_fence = true;
        self
    }

    /// How long to wait between tries while the lock is held by someone else, or after a
    /// transient Redis error: any [`IntoIterator`] of [`Duration`]s (see [`crate::retry`]).
    /// The iterator is created here, for this acquire alone.
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
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Calls `observer` after every failed try, including the last, with the attempt
    /// number, the reason and the pause that follows (the "notify" of backoff libraries).
    pub fn on_failed_try(mut self, observer: impl FnMut(&FailedTry<'_>) + Send + 'a) -> Self {
        self.on_failed_try = Some(Box::new(observer));
        self
    }

    async fn run(self) -> Result<Lock<C>, Error> {
        let Acquire {
            store,
            renewer,
            hub,
            eviction,
            keys,
            ttl,
            fences,
            with_fence,
            metadata,
            retry,
            deadline,
            mut on_failed_try,
        } = self;
        // Everything the caller got wrong is reported before the first request.
        let keys = keys?;
        let ttl_ms = args::ttl_millis(ttl)?;
        if let Some(metadata) = &metadata {
            args::check_metadata(metadata)?;
        }
        let ttl = Duration::from_millis(ttl_ms);
        if with_fence && !fences.enabled {
            return Err(Error::invalid(
                Argument::Fences,
                "with_fence on a locker built without fences (Locker::without_fences)",
            ));
        }
        let counters: Vec<Vec<u8>> = match with_fence {
            true => keys.iter().map(fence::counter_key).collect(),
            false => Vec::new(),
        };
        let token = Token::generate()?;
        let mut value = token::lock_value(&token, metadata.as_deref());
        let started = Instant::now();
        let deadline = started.checked_add(deadline.unwrap_or(ttl));
        // Peeking tells whether this acquire may wait at all before its first try.
        let mut retry = retry.peekable();

        let mut cleanup = Cleanup {
            store: &store,
            keys: &keys,
            token,
            armed: false,
        };
        let mut attempts = 0u32;
        let mut saw_held = false;
        let mut last_error: Option<redis::RedisError> = None;
        let mut last_quorum: Option<Box<QuorumFailure>> = None;
        // Push wake-up (see `wakeup.rs`): our place among this locker's waiters for the key
        // found held; once set, our tries mark the holder and our value says "awaited".
        let mut member: Option<Member> = None;
        // When the pause after the last counted try ends.
        let mut wake: Option<Instant> = None;
        // This try re-checks after subscribing; it belongs to the try before it, so it
        // neither counts as an attempt nor takes a pause from the strategy.
        let mut recheck = false;
        loop {
            if !recheck {
                attempts += 1;
            }
            // On a key this locker's waiters are subscribed to, a newcomer that may wait
            // joins them before its first try: it queues behind them without a try (the
            // holder is marked; its release will wake them in turn), or, when nobody waits
            // right now, makes its first try as a waiter.
            // `expires`: when the key found held expires at the latest, if known: its holder
            // may let it expire without a release to announce, and no wait needs to last
            // longer.
            let (mut queued, mut expires) = (None, None);
            let may_enter = attempts == 1 && member.is_none();
            if let Some(hub) = hub.as_ref().filter(|_| may_enter && retry.peek().is_some()) {
                if let Some((joined, entry, index)) = enter(hub, &keys) {
                    member = Some(joined);
                    if let Entry::Queue { expires: until } = entry {
                        (queued, expires) = (Some(index), until);
                    }
                }
            }
            let (reason, held_key) = if let Some(index) = queued {
                saw_held = true;
                (Reason::Held(index), None)
            } else {
                // The first try goes out right after the start (one clock read saved).
                let sent_at = if attempts == 1 && !recheck {
                    started
                } else {
                    Instant::now()
                };
                // If an earlier try may have set keys, this one must accept them as ours.
                let retrying_own = cleanup.armed;
                cleanup.armed = true;
                // A reply that comes after the TTL is worthless (the keys would be gone by
                // the time we knew), so no try waits longer than that, nor past the deadline.
                let mut try_until = sent_at.checked_add(ttl);
                if let Some(deadline) = deadline.filter(|d| *d > sent_at) {
                    try_until = Some(try_until.map_or(deadline, |t| t.min(deadline)));
                }
                // A waiter's value says "awaited": others probably wait too and must hear
                // of its release.
                let waiting = member.is_some();
                if waiting {
                    token::mark_awaited(&mut value);
                }
                let request = ObtainTry {
                    keys: &keys,
                    counters: &counters,
                    retention_ms: fences.retention_ms,
                    value: &value,
                    ttl_ms,
                    retrying_own,
                    waiting,
                };
                if eviction.first() {
                    // In a task of its own: no acquire waits for it.
                    tokio::spawn(check::warn_if_evicting(store.nodes().to_vec()));
                }
                let attempt = store.try_obtain(request, &token, sent_at, try_until).await;
                cleanup.armed = attempt.may_hold;
                // One millisecond more: the key is certainly gone by then.
                expires = attempt
                    .held_ttl
                    .and_then(|ttl| Instant::now().checked_add(ttl + Duration::from_millis(1)));
                if let Some(member) = member.as_mut() {
                    member.tried(match (&attempt.result, attempt.held_key) {
                        (TryResult::Obtained { valid_until, .. }, _) => Outcome::Obtained {
                            until: *valid_until,
                        },
                        (_, Some(_)) => Outcome::Held,
                        _ => Outcome::Failed,
                    });
                }
                let reason = match attempt.result {
                    TryResult::Obtained { valid_until, fence } => {
                        cleanup.armed = false;
                        drop(cleanup);
                        let grant = Grant {
                            keys,
                            token,
                            metadata,
                            ttl_ms,
                            sent_at,
                            valid_until,
                            fence,
                        };
                        return Ok(Lock::new(store, renewer, fences, grant));
                    }
                    TryResult::Held(index) => {
                        saw_held = true;
                        Reason::Held(index)
                    }
                    TryResult::Failed(e) => {
                        last_error = Some(e);
                        Reason::Redis
                    }
                    // Rejected outright (auth, permission, script error): nothing written.
                    TryResult::Rejected(e) => return Err(Error::Redis(e)),
                    TryResult::NoQuorum(failure) => {
                        // "Held by someone else" only when the other owners' nodes alone
                        // leave no quorum; otherwise it is an outage (with a stale key
                        // somewhere).
                        saw_held |= failure.held() > failure.nodes - failure.needed;
                        // Refused for good (auth, permission) on so many nodes that no
                        // retry can reach a quorum.
                        if failure.is_refused_for_good() {
                            return Err(Error::NoQuorum(failure));
                        }
                        last_quorum = Some(failure);
                        Reason::NoQuorum
                    }
                };
                (reason, attempt.held_key)
            };

            let now = Instant::now();
            if !recheck {
                wake = retry.next().and_then(|delay| match deadline {
                    Some(deadline) if now >= deadline => None,
                    Some(deadline) => {
                        Some(now.checked_add(delay).map_or(deadline, |t| t.min(deadline)))
                    }
                    None => Some(
                        now.checked_add(delay)
                            .unwrap_or(now + Duration::from_secs(86_400 * 365)),
                    ),
                });
                if let Some(observer) = on_failed_try.as_mut() {
                    let reason = match (reason, &last_error, &last_quorum) {
                        (Reason::Held(index), _, _) => TryFailure::Held {
                            key: keys.get(index).unwrap_or_default(),
                        },
                        (Reason::Redis, Some(e), _) => TryFailure::Redis(e),
                        (Reason::NoQuorum, _, Some(failure)) => TryFailure::NoQuorum(failure),
                        _ => unreachable!("each reason keeps its details"),
                    };
                    observer(&FailedTry {
                        attempt: attempts,
                        reason,
                        elapsed: now - started,
                        next_delay: wake.map(|w| w - now),
                    });
                }
            }
            recheck = false;
            let Some(wake) = wake else {
                if cleanup.armed {
                    // Still armed while this runs: if the acquire is dropped meanwhile,
                    // the cleanup guard sends the release again in the background. The
                    // request is sent whole (EVAL), so a frozen server runs it when it
                    // wakes even after we stopped waiting for the reply.
                    store.release_unattended(&keys, &token, CLEANUP_WAIT).await;
                    cleanup.armed = false;
                }
                return Err(match (last_error, last_quorum) {
                    (Some(e), _) if !saw_held => Error::Redis(e),
                    (_, Some(failure)) if !saw_held => Error::NoQuorum(failure),
                    (last_error, no_quorum) => Error::NotObtained(NotObtained {
                        attempts,
                        elapsed: started.elapsed(),
                        last_error,
                        no_quorum,
                    }),
                });
            };
            // Ask to be woken by the release of the key found held.
            if let (Some(hub), Some(index)) = (&hub, held_key) {
                let key = keys.get(index).unwrap_or_default();
                if member.as_ref().is_none_or(|m| m.key() != key) {
                    member = Some(hub.join(key));
                }
            }
            // A held key that expires before the next try is due is tried when it expires.
            let wake = expires.map_or(wake, |expires| expires.min(wake));
            match member.as_mut() {
                Some(member) => tokio::select! {
                    _ = pause_until(wake) => {}
                    why = member.woken() => recheck = why == Wake::Subscribed,
                },
                None => pause_until(wake).await,
            }
        }
    }
}

/// Joins the waiters of the first of `keys` whose waiters this locker is subscribed to
/// (see [`Hub::enter`]), with how to go on and that key's index.
fn enter(hub: &Hub, keys: &Keys) -> Option<(Member, Entry, usize)> {
    keys.iter().enumerate().find_map(|(index, key)| {
        let (member, entry) = hub.enter(key)?;
        Some((member, entry, index))
    })
}

/// Pauses shorter than this wait on a timer of their own (see [`pause_until`]).
const PRECISE_BELOW: Duration = Duration::from_millis(100);

/// Waits until `wake`. tokio's timer wakes sleepers only on whole-millisecond ticks, all
/// that are due at once: waiters that drew pauses spread over a few milliseconds would all
/// try together at the next tick, the first would win, the rest find the lock held — and
/// the lock, released a fraction of a millisecond later, would lie free until the tick
/// after. (Measured: 16 tasks polling one key every [0, 10 ms) reached less than half the
/// acquisitions per second of a lock with a precise timer.) Short pauses therefore wait on
/// the `futures-timer` thread, which wakes each at its own instant; long ones, where a
/// millisecond does not matter, on tokio's timer.
async fn pause_until(wake: Instant) {
    let left = wake.saturating_duration_since(Instant::now());
    match left < PRECISE_BELOW {
        true => futures_timer::Delay::new(left).await,
        false => tokio::time::sleep_until(wake).await,
    }
}

/// Why a try failed; the details stay in the loop's variables.
#[derive(Clone, Copy)]
enum Reason {
    Held(usize),
    Redis,
    NoQuorum,
}

impl<'a, C: Connection> IntoFuture for Acquire<'a, C> {
    type Output = Result<Lock<C>, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lock<C>, Error>> + Send + 'a>>;

    /// # Cancel safety
    /// See [`Acquire`]: dropping it never leaves keys behind for longer than a round trip.
    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// Undoes a try that may have set keys if the acquire is dropped before it knows.
struct Cleanup<'k, C: Connection> {
    store: &'k Store<C>,
    keys: &'k Keys,
    token: Token,
    armed: bool,
}

impl<C: Connection> Drop for Cleanup<'_, C> {
    fn drop(&mut self) {
        if self.armed {
            self.store
                .release_in_background(self.keys.clone(), self.token);
        }
    }
}

/// How long a giving-up acquire waits for its cleanup release before returning anyway.
const CLEANUP_WAIT: Duration = Duration::from_secs(1);
