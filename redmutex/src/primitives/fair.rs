//! The fair lock: a mutex key taken in arrival order by waiters from every process, who
//! queue beside it with a ticket and a heartbeat on the server's clock (`fair.lua` says how
//! they are kept). The key itself is a mutex key, so refresh, renewal, TTL and fences are
//! the mutex's operations; only taking the key and leaving (release) are the fair lock's.

use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;

use crate::args::{self, Keys};
use crate::connection::Connection;
use crate::engine::acquire::Acquire;
use crate::engine::context::{Context, TurnId};
use crate::engine::guard::Lock;
use crate::error::{Argument, Error, InvalidArgument};
use crate::fence::{companion_key, counter_key, Companion};
use crate::primitives::mutex;
use crate::scripts::{
    held, operations, Call, Claim, Conn, Obtain, ObtainTry, Operations, Queue, ScriptConn, Waits,
};
use crate::token::{turn_channel, Token, TOKEN_LEN};

operations!(
    "primitives/fair.lua";
    OBTAIN = "obtain",
    RELEASE = "release",
);

/// A fair lock: a lock whose waiters, in every process, get it in the order they came.
/// Made by [`Locker::fair_lock`](crate::Locker::fair_lock); cheap to clone.
///
/// [`acquire`](FairLock::acquire) has every option of a lock's acquire ([`Acquire`]) and
/// hands out a [`FairGuard`] — a [`Lock`] with refresh, release, fences, keep-alive with
/// the lost signal, `run(work)` and release on drop.
///
/// **How the order is kept** (the guarantee itself is in [`safety`](crate::safety)): a waiter's
/// first try takes a ticket in a queue kept in Redis beside the key, with a heartbeat on
/// the *server's* clock; only the first live waiter may take a free key. Each try renews
/// the heartbeat, and a waiter tries at least every third of it
/// ([`with_heartbeat`](FairLock::with_heartbeat)), so a waiter whose process crashed or
/// froze drops out of line within one heartbeat and holds nobody up for longer. An
/// acquire that gives up, or is cancelled, leaves the queue. With
/// [wake-up](crate::Locker::with_wake_up), a release tells the next waiter on a channel
/// of its own — one try per release, not one per waiting process; waiters never rely on
/// it alone (each sleep is bounded by the holder's TTL and the heartbeat interval).
///
/// The key is an ordinary lock key: a plain [`Locker::acquire`](crate::Locker::acquire)
/// of it excludes a fair holder and is excluded by one, but does not queue — it may take
/// a free key ahead of fair waiters. Use one kind per key for order.
///
/// Refused on a Redlock locker: the queue's order could differ between nodes. Works on
/// one node (with Sentinel) and Redis Cluster (the queue shares the key's hash slot).
///
/// ```
/// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::retry;
/// let ledger = locker.fair_lock("ledger")?;
/// let guard = ledger
///     .acquire(Duration::from_secs(10))
///     .retry(retry::constant(Duration::from_millis(500)))
///     .deadline(Duration::from_secs(60))
///     .await?;
/// // ... whoever asked first got it first ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock<C: Connection> {
    pub(crate) context: Arc<Context<C>>,
    key: Keys,
    heartbeat: Duration,
}

/// A fair lock held: a [`Lock`] on a [`FairKey`].
pub type FairGuard<C> = Lock<C, FairKey>;

impl<C: Connection> FairLock<C> {
    /// A fair lock at `key` (with the prefix, checked).
    pub(crate) fn new(context: Arc<Context<C>>, key: Keys) -> Result<Self, Error> {
        if context.backend.quorum_settings().is_some() {
            return Err(Error::invalid(
                Argument::Nodes,
                "a fair lock cannot be kept by a Redlock quorum: each node would keep its own \
                 queue, in its own order, and no order would hold across them; use one node \
                 (with Sentinel) or a cluster",
            ));
        }
        Ok(FairLock {
            context,
            key,
            heartbeat: args::DEFAULT_HEARTBEAT,
        })
    }

    /// How long a waiter stays in line without trying
    /// ([`DEFAULT_HEARTBEAT`](crate::limits::DEFAULT_HEARTBEAT) unless set): waiters try at
    /// least every third of it. Shorter: a crashed waiter holds the line up for less time;
    /// longer: fewer tries while waiting.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] ([`Argument::Heartbeat`]) below
    /// [`MIN_HEARTBEAT`](crate::limits::MIN_HEARTBEAT) or above
    /// [`MAX_TTL`](crate::limits::MAX_TTL).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::{error::Argument, Error};
    /// let ledger = locker.fair_lock("ledger")?.with_heartbeat(Duration::from_millis(600))?;
    /// assert_eq!(ledger.heartbeat(), Duration::from_millis(600)); // waiters try every 200 ms
    /// let too_short = locker.fair_lock("ledger")?.with_heartbeat(Duration::from_millis(1));
    /// let Err(Error::InvalidArgument(bad)) = too_short else { panic!("1 ms accepted") };
    /// assert_eq!(bad.argument, Argument::Heartbeat);
    /// # Ok(()) }
    /// ```
    pub fn with_heartbeat(mut self, heartbeat: Duration) -> Result<Self, Error> {
        self.heartbeat = args::check_heartbeat(heartbeat, "a fair lock's")?;
        Ok(self)
    }

    /// The waiters' heartbeat.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// let ledger = locker.fair_lock("ledger")?;
    /// assert_eq!(ledger.heartbeat(), redmutex::limits::DEFAULT_HEARTBEAT);
    /// # Ok(()) }
    /// ```
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// The lock key as stored in Redis (with the locker's prefix).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let ledger = locker.fair_lock("ledger")?;
    /// assert_eq!(ledger.key(), b"app:ledger");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.key.get(0).expect("one key")
    }

    /// Starts acquiring the lock for `ttl`, in turn; configure and `.await` the returned
    /// [`Acquire`]. One try unless a retry strategy is given: a try that is not this
    /// acquire's turn takes its place in line (when the strategy may wait), and each later
    /// try keeps it. Pauses are bounded by the holder's TTL and a third of the heartbeat,
    /// whatever the strategy says — and each such try counts as one of the strategy's, so
    /// bound the wait with a [`deadline`](Acquire::deadline) rather than a number of tries.
    ///
    /// # Errors (when awaited)
    /// As [`Locker::acquire`](crate::Locker::acquire); [`Error::NotObtained`] also when
    /// the key was free but others were ahead in line until the deadline;
    /// [`Error::InvalidArgument`] with [`Argument::Key`] when the queue holds data of
    /// another kind; with [`Argument::Nodes`] on a Redlock locker.
    ///
    /// # Cancel safety
    /// See [`Acquire`]: a dropped acquire also leaves the queue (in the background).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// # let locker = redmutex::Locker::in_memory();
    /// use std::time::Duration;
    /// use redmutex::retry;
    /// let ledger = locker.fair_lock("ledger")?;
    /// let first = ledger.acquire(Duration::from_secs(10)).await?;
    /// let waiter = ledger.acquire(Duration::from_secs(10))
    ///     .retry(retry::constant(Duration::from_millis(100)))
    ///     .deadline(Duration::from_secs(60));
    /// let second = tokio::spawn(async move { waiter.await });
    /// tokio::time::sleep(Duration::from_millis(50)).await; // it takes its place in line
    /// first.release().await?;
    /// assert!(ledger.inspect().await?.is_none(), "free, but someone is in line");
    /// let late = ledger.acquire(Duration::from_secs(10)).await; // one try: not its turn
    /// assert!(late.unwrap_err().is_not_obtained());
    /// second.await.unwrap()?.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn acquire<'a>(&self, ttl: Duration) -> Acquire<'a, C, FairKey> {
        let key = self.key();
        let channels = self.key.channels();
        let turns = self.context.own_turns(|id| turn_channel(key, id, channels));
        let claim = turns.map(|turns| FairKey::new(self.key.clone(), self.heartbeat, turns));
        Acquire::new(self.context.clone(), claim, ttl)
    }
}

impl<C: Connection> std::fmt::Debug for FairLock<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("heartbeat", &self.heartbeat)
            .finish_non_exhaustive()
    }
}

/// What a [`FairGuard`] holds: a lock key taken in turn.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// # let locker = redmutex::Locker::in_memory();
/// use std::time::Duration;
/// use redmutex::{claim::FairKey, Lock};
/// let ledger = locker.fair_lock("ledger")?;
/// let guard: Lock<_, FairKey> = ledger.acquire(Duration::from_secs(10)).await?;
/// assert_eq!(guard.key(), b"ledger");
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FairKey {
    keys: Keys,
    /// The queue (tickets and heartbeats), beside the key in its hash slot.
    queue: Vec<u8>,
    counter: Vec<u8>,
    heartbeat_ms: u64,
    /// The waiter's id in the queue, beside its token, which names its turn channel: its
    /// locker's, or one of its own (see [`TurnId`]).
    turns: Arc<TurnId>,
}

impl FairKey {
    fn new(keys: Keys, heartbeat: Duration, turns: TurnId) -> FairKey {
        let key = keys.get(0).expect("one key");
        FairKey {
            queue: companion_key(key, Companion::Queue),
            counter: counter_key(key),
            heartbeat_ms: heartbeat.as_millis().try_into().unwrap_or(u64::MAX),
            turns: Arc::new(turns),
            keys,
        }
    }

    /// The key, as stored in Redis (users read it from the guard: this type only
    /// appears as a guard's type parameter).
    pub(crate) fn key(&self) -> &[u8] {
        self.keys.get(0).expect("one key")
    }
}

/// Taking the key and leaving are the fair lock's; the rest is the mutex's, on the key.
static OPERATIONS: Operations = Operations {
    release: &RELEASE,
    refresh: &mutex::REFRESH,
    ttl: &mutex::TTL,
    fence: &mutex::FENCE,
    raise_fence: &mutex::RAISE_FENCE,
    renew: &mutex::RENEW,
    guarded: &mutex::GUARDED,
};

held!(FairKey);

impl Claim for FairKey {
    fn kind(&self) -> &'static str {
        "fair_lock"
    }

    fn keys(&self) -> &Keys {
        &self.keys
    }

    /// As the mutex's: the key, then (fenced) its counter.
    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8])) {
        add(self.key());
        if fenced {
            add(&self.counter);
        }
    }

    /// The key and the queue (a waiter leaves the queue by its release), and the key's
    /// line, whose first locker hears of the release.
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        add(self.key());
        add(&self.queue);
        add(&companion_key(self.key(), Companion::Line));
    }

    /// The token, the time to keep the key (0: none), and the waiter's id for its turns,
    /// which names it in the queue with the token.
    fn release_args(&self, token: &Token, keep_ms: u64, add: &mut dyn FnMut(&[u8])) {
        add(token.as_bytes());
        add(keep_ms.to_string().as_bytes());
        add(self.turns.id.as_bytes());
    }

    fn operations(&self) -> &'static Operations {
        &OPERATIONS
    }

    /// Each waiter keeps its place in the queue, and hears of its turn on the turn channel
    /// its id names (see [`TurnId`]).
    fn waits(&self) -> Waits {
        Waits {
            queue: Some(Queue {
                channel: turn_channel(self.key(), &self.turns.id, self.keys.channels()),
                every: Duration::from_millis(self.heartbeat_ms / 3),
            }),
            ..Waits::one_holder(false)
        }
    }

    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        let mut call = OBTAIN.script(self.keys.channels()).prepare_invoke();
        call.key(self.key()).key(&self.queue);
        if request.terms.fenced {
            call.key(&self.counter);
        }
        call.arg(&request.terms.value)
            .arg(request.terms.ttl_ms)
            .arg(TOKEN_LEN)
            .arg(if request.queue { "1" } else { "0" })
            .arg(self.heartbeat_ms)
            .arg(request.terms.retention_ms)
            .arg(self.turns.id.as_bytes());
        Box::pin(async move {
            let reply: Vec<i64> = call.invoke_async(&mut ScriptConn(conn)).await?;
            if reply.len() < 2 {
                let what = format!("{reply:?}");
                return Err((redis::ErrorKind::Parse, "a fair obtain reply", what).into());
            }
            Ok(self.obtained(&reply, request.terms.fenced))
        })
    }

    /// As the mutex's renewal: one key per lease.
    /// The key and its ask companion, as the mutex's `renew` takes them.
    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        call.key(self.key());
        call.key(companion_key(self.key(), Companion::Ask));
        call.arg(1).arg(token.as_bytes()).arg(ttl_ms);
    }
}

impl FairKey {
    /// The reply `{ status, detail[, ahead] }` of `obtain` (see `fair.lua`).
    fn obtained(&self, reply: &[i64], fenced: bool) -> Obtain {
        let (status, detail) = (reply[0], reply[1]);
        match status {
            -2 => Obtain::Refused(InvalidArgument {
                argument: Argument::Key,
                reason: format!(
                    "the queue of the fair lock {:?} holds data of another kind; choose \
                     another name",
                    String::from_utf8_lossy(self.key())
                ),
            }),
            1 => Obtain::Held {
                index: 0,
                ttl: u64::try_from(detail).ok().map(Duration::from_millis),
                ahead: reply.get(2).and_then(|&ahead| u32::try_from(ahead).ok()),
            },
            status => Obtain::from_reply((status as usize, detail), fenced),
        }
    }
}

impl<C: Connection> Lock<C, FairKey> {
    /// The lock key, as stored in Redis (with the locker's prefix).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let guard = locker.fair_lock("ledger")?.acquire(Duration::from_secs(10)).await?;
    /// assert_eq!(guard.key(), b"app:ledger");
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.what().key()
    }
}
