//! Where a lock lives: one Redis node, or a quorum of independent nodes (Redlock).
//!
//! Everything above this layer — the acquire loop, [`Lock`](crate::Lock), keep-alive and
//! its renewer, inspect — is written once against [`Store`]; only the calls below differ.
//! A single node answers each request itself; a quorum store asks every node at once and
//! counts (see [`crate::redlock`]).

use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, ScriptInvocation};
use tokio::time::Instant;

use crate::args::Keys;
use crate::background;
use crate::connection::Connection;
use crate::error::{is_transient_redis, Error};
use crate::fence::Fences;
use crate::locker::{lock_info, LockInfo};
use crate::quorum::QuorumFailure;
use crate::redlock::Nodes;
use crate::scripts::{self, Obtain, ObtainTry};
use crate::token::Token;

/// The nodes behind a locker and everything it hands out. Cheap to clone.
pub(crate) enum Store<C> {
    /// One Redis server (or a cluster connection that routes each key).
    One(C),
    /// Independent masters; an operation counts when a quorum of them agrees.
    Quorum(Arc<Nodes<C>>),
}

impl<C: Clone> Clone for Store<C> {
    fn clone(&self) -> Self {
        match self {
            Store::One(conn) => Store::One(conn.clone()),
            Store::Quorum(nodes) => Store::Quorum(nodes.clone()),
        }
    }
}

/// One acquire try, as the retry loop sees it.
pub(crate) struct Attempt {
    pub(crate) result: TryResult,
    /// Keys with our token may still exist (a request whose fate is unknown): the next try
    /// must accept them as ours, and giving up must delete them.
    pub(crate) may_hold: bool,
    /// The first key found held by another owner (on any node), to wait for its release.
    pub(crate) held_key: Option<usize>,
    /// How long that key stays held at most, when the reply said (Redlock: the shortest
    /// over the nodes that hold it): no wait for its release needs to last longer.
    pub(crate) held_ttl: Option<Duration>,
}

pub(crate) enum TryResult {
    /// Held until `valid_until` on this client's clock, with this fence (when the locker
    /// has fences).
    Obtained {
        valid_until: Instant,
        fence: Option<u64>,
    },
    /// Single node: this key is held by another owner.
    Held(usize),
    /// Single node: a transient error; the request may or may not have been applied.
    Failed(RedisError),
    /// Single node: refused outright (auth, permission, script error); retrying is futile.
    Rejected(RedisError),
    /// Quorum: too few nodes agreed, or too late.
    NoQuorum(Box<QuorumFailure>),
}

/// What one renewal call did for one lease.
pub(crate) enum Renewal {
    /// Extended by a call sent at `sent_at`; valid until `valid_until`.
    Renewed {
        sent_at: Instant,
        valid_until: Instant,
    },
    /// The lock is gone (on so many nodes that no quorum holds it).
    NotHeld,
    /// Not known to be extended; try again until the lease runs out.
    Failed(RedisError),
}

impl<C: Connection> Store<C> {
    /// The connection of every node: one, or each of a quorum's.
    pub(crate) fn nodes(&self) -> &[C] {
        match self {
            Store::One(conn) => std::slice::from_ref(conn),
            Store::Quorum(nodes) => nodes.conns(),
        }
    }

    /// The clock-drift allowance subtracted from a lease of `ttl`: none on one node, whose
    /// own clock both sets and expires the key; the Redlock allowance on a quorum.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        match self {
            Store::One(_) => Duration::ZERO,
            Store::Quorum(nodes) => nodes.settings().drift(ttl),
        }
    }

    /// One try, sent now (`sent_at`, read by the caller, which needs it too), answering by
    /// `try_until` at the latest.
    pub(crate) async fn try_obtain(
        &self,
        request: ObtainTry<'_>,
        token: &Token,
        sent_at: Instant,
        try_until: Option<Instant>,
    ) -> Attempt {
        let conn = match self {
            Store::Quorum(nodes) => {
                return nodes.try_obtain(request, token, sent_at, try_until).await
            }
            Store::One(conn) => conn,
        };
        let mut conn = conn.clone();
        let reply = scripts::obtain(&mut conn, request);
        // Our own timer only where it can end the wait sooner than the connection's
        // response timeout would (the connection bounds every request; 500 ms by default).
        // A timer per request is a measurable part of an acquire's client CPU, and past this
        // a reply that arrives too late is still caught below.
        let outcome = match try_until {
            Some(until) if until.saturating_duration_since(sent_at) <= OWN_TIMER_WITHIN => {
                tokio::time::timeout_at(until, reply)
                    .await
                    .unwrap_or_else(|_| Err(no_reply_error()))
            }
            _ => match reply.await {
                // Too late to be of use: the keys would be gone, or the deadline passed.
                Ok(Obtain::Obtained { .. })
                    if try_until.is_some_and(|until| Instant::now() > until) =>
                {
                    Err(no_reply_error())
                }
                outcome => outcome,
            },
        };
        match outcome {
            Ok(Obtain::Obtained { fence }) => Attempt {
                result: TryResult::Obtained {
                    valid_until: sent_at + Duration::from_millis(request.ttl_ms),
                    fence,
                },
                may_hold: false,
                held_key: None,
                held_ttl: None,
            },
            // Nothing was written by this try; keys of an earlier, unseen success may
            // still exist.
            Ok(Obtain::Held { index, ttl }) => Attempt {
                result: TryResult::Held(index),
                may_hold: request.retrying_own,
                held_key: Some(index),
                held_ttl: ttl,
            },
            // The request may or may not have been applied.
            Err(e) if is_transient_redis(&e) => Attempt {
                result: TryResult::Failed(e),
                may_hold: true,
                held_key: None,
                held_ttl: None,
            },
            Err(e) => Attempt {
                result: TryResult::Rejected(e),
                may_hold: request.retrying_own,
                held_key: None,
                held_ttl: None,
            },
        }
    }

    /// Owner-checked release: [`Error::NotHeld`] if the lock was no longer held (keys still
    /// ours are deleted all the same). `ttl` (when known) sizes the per-node timeout.
    pub(crate) async fn release(
        &self,
        keys: &Keys,
        token: &Token,
        ttl: Option<Duration>,
    ) -> Result<(), Error> {
        match self {
            Store::One(conn) => {
                let mut conn = conn.clone();
                match scripts::idempotent!(scripts::release(&mut conn, keys, token))? {
                    0 => Ok(()),
                    _ => Err(Error::NotHeld),
                }
            }
            Store::Quorum(nodes) => nodes.release(keys, token, ttl).await,
        }
    }

    /// A release nobody waits on the reply of (see [`scripts::release_unattended`]),
    /// bounded by `wait`. Returns whether every node confirmed it.
    pub(crate) async fn release_unattended(
        &self,
        keys: &Keys,
        token: &Token,
        wait: Duration,
    ) -> bool {
        match self {
            Store::One(conn) => {
                let mut conn = conn.clone();
                let release = scripts::release_unattended(&mut conn, keys, token);
                matches!(tokio::time::timeout(wait, release).await, Ok(Ok(_)))
            }
            Store::Quorum(nodes) => nodes.release_unattended(keys, token, wait).await,
        }
    }

    /// Starts an owner-checked release on every node and returns at once (see
    /// [`background`]: it is finished even if the runtime shuts down first, or there is
    /// none). Used where waiting is impossible: in `Drop`.
    pub(crate) fn release_in_background(&self, keys: Keys, token: Token) {
        match self {
            Store::One(conn) => {
                background::release(release_try(conn.clone(), Arc::new(keys), token));
            }
            Store::Quorum(nodes) => {
                nodes.release_in_background(0..nodes.conns().len(), &keys, &token);
            }
        }
    }

    /// Owner-checked refresh to `ttl_ms`, all or nothing per node. `valid_until` is the
    /// current validity when known: a quorum store only counts a refresh confirmed before
    /// it. Returns the new validity.
    pub(crate) async fn refresh(
        &self,
        keys: &Keys,
        token: &Token,
        ttl_ms: u64,
        valid_until: Option<Instant>,
    ) -> Result<Instant, Error> {
        match self {
            Store::One(conn) => {
                let mut conn = conn.clone();
                let sent_at = Instant::now();
                if scripts::idempotent!(scripts::refresh(&mut conn, keys, token, ttl_ms))? {
                    Ok(sent_at + Duration::from_millis(ttl_ms))
                } else {
                    Err(Error::NotHeld)
                }
            }
            Store::Quorum(nodes) => nodes.refresh(keys, token, ttl_ms, valid_until).await,
        }
    }

    /// Sends one keep-alive call (built by [`scripts::renew_batch`] for leases of these
    /// `ttls`) and says, lease by lease, what became of it.
    pub(crate) async fn renew(
        &self,
        call: &ScriptInvocation<'static>,
        ttls: &[Duration],
    ) -> Result<Vec<Renewal>, RedisError> {
        let conn = match self {
            Store::Quorum(nodes) => return Ok(nodes.renew(call, ttls).await),
            Store::One(conn) => conn,
        };
        let sent_at = Instant::now();
        let answers = call.invoke_async::<Vec<i64>>(&mut conn.clone()).await?;
        check_renewal_reply(&answers, ttls.len())?;
        Ok(answers
            .iter()
            .zip(ttls)
            .map(|(answer, ttl)| match answer {
                1 => Renewal::Renewed {
                    sent_at,
                    valid_until: sent_at + *ttl,
                },
                _ => Renewal::NotHeld,
            })
            .collect())
    }

    /// The fence of a lock taken without one (see [`scripts::take_fence`]): handed out only
    /// while this owner holds every key (Redlock: on a quorum, before `valid_until`).
    pub(crate) async fn take_fence(
        &self,
        keys: &Keys,
        counters: &[Vec<u8>],
        token: &Token,
        ttl: Duration,
        fences: Fences,
        valid_until: Instant,
    ) -> Result<u64, Error> {
        let conn = match self {
            Store::Quorum(nodes) => {
                return nodes
                    .take_fence(keys, counters, token, ttl, fences, valid_until)
                    .await
            }
            Store::One(conn) => conn,
        };
        let mut conn = conn.clone();
        let retention = fences.retention_ms;
        // Safe to repeat: a fence taken by a request whose reply was lost is never handed
        // out, and the repeat takes a greater one.
        match scripts::idempotent!(scripts::take_fence(
            &mut conn, keys, counters, token, retention
        ))? {
            Some(fence) => Ok(fence),
            None => Err(Error::NotHeld),
        }
    }

    /// What `key` (with the prefix) holds, as anyone sees it.
    pub(crate) async fn inspect(&self, key: &[u8]) -> Result<LockInfo, Error> {
        match self {
            Store::One(conn) => {
                let mut conn = conn.clone();
                let raw = scripts::idempotent!(scripts::inspect(&mut conn, key))?;
                Ok(lock_info(key, raw))
            }
            Store::Quorum(nodes) => Ok(nodes.inspect(key).await),
        }
    }
}

/// One try of an owner-checked release of `keys` on `conn`, for [`background::release`]
/// (the keys shared by the releases of every node).
pub(crate) fn release_try<C: Connection>(
    conn: C,
    keys: Arc<Keys>,
    token: Token,
) -> background::Try {
    Box::new(move || {
        let (mut conn, keys) = (conn.clone(), keys.clone());
        Box::pin(async move {
            scripts::release_unattended(&mut conn, &keys, &token)
                .await
                .is_ok()
        })
    })
}

/// A renewal reply must answer every lease of the call.
pub(crate) fn check_renewal_reply(answers: &[i64], leases: usize) -> Result<(), RedisError> {
    if answers.len() == leases {
        return Ok(());
    }
    Err(RedisError::from((
        redis::ErrorKind::Parse,
        "renewal reply of the wrong length",
        format!("{} answers for {leases} leases", answers.len()),
    )))
}

/// The longest wait for an acquire reply that gets a timer of its own (see
/// [`Store::try_obtain`]).
const OWN_TIMER_WITHIN: Duration = Duration::from_secs(5);

fn no_reply_error() -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply to the acquire request within the lock's TTL or the deadline",
    )
    .into()
}
