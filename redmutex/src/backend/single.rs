//! One Redis node — or a cluster connection, which routes each claim to the master of its
//! hash slot: every operation is one request to one server, which answers it itself.

use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, ScriptInvocation, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::backend::common::{
    keep_ms, release_try, renewal_reply, Attempt, Obtained, Renewal, Renewed, StateReader,
};
use crate::backend::replication::Replication;
use crate::background;
use crate::classify::is_transient_redis;
use crate::connection::Connection;
use crate::error::Error;
use crate::quorum::Drift;
use crate::scripts::{idempotent, Claim, Obtain, ObtainTry, Remaining, ScriptConn};
use crate::token::Token;
use crate::writes::Writes;

/// One server (or a cluster connection).
#[derive(Clone)]
pub(crate) struct Single<C> {
    conn: C,
    /// Redis Cluster: a renewal call may only touch keys of one hash slot.
    cluster: bool,
    /// Writes count only once replicas confirm them.
    replication: Option<Replication>,
    /// How much less than its TTL a claim is trusted for.
    drift: Drift,
    /// Bounds the requests in flight on a cluster connection (see [`CLUSTER_IN_FLIGHT`]).
    gate: Gate,
}

/// How many of a cluster locker's requests may be in flight on its connection at once.
///
/// Why: redis-rs 1.8's cluster connection stops answering every request, until each times
/// out, when a `MOVED` reply starts a slot-map refresh while about a hundred requests or
/// more are in flight (the refresh never gets its lock). A locker makes such bursts itself:
/// when a wake-up subscription lapses (a slot moved), every waiter re-checks at once, and
/// many dropped guards release at once. Queued here, thousands of re-checks still finish
/// within a few round trips' time per 32, and the connection keeps answering.
const CLUSTER_IN_FLIGHT: usize = 32;

/// How many of those may be requests that come in herds — acquire tries (every waiter
/// re-checks at once), releases (many guards dropped at once) and reads: the rest are kept
/// for what keeps or uses a held lease (renewals, refreshes, fences, guarded writes), which
/// never waits behind such a herd, so that no lease is lost to one.
const CLUSTER_HERD_IN_FLIGHT: usize = 24;

/// A bound on the requests in flight, or none.
#[derive(Clone, Default)]
struct Gate(Option<Arc<Bounds>>);

struct Bounds {
    requests: Arc<Semaphore>,
    herd: Arc<Semaphore>,
}

/// Room for one request, held until dropped.
type Passage = Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)>;

impl Gate {
    fn bounded(requests: usize, herd: usize) -> Gate {
        Gate(Some(Arc::new(Bounds {
            requests: Arc::new(Semaphore::new(requests)),
            herd: Arc::new(Semaphore::new(herd)),
        })))
    }

    /// Waits for room for one more request that keeps or uses a held lease: among all
    /// requests alone.
    async fn pass(&self) -> Passage {
        let bounds = self.0.as_ref()?;
        // The semaphores are never closed: an error cannot happen, and would mean no bound.
        let request = bounds.requests.clone().acquire_owned().await.ok()?;
        Some((request, None))
    }

    /// Waits for room for one more request of a kind that comes in herds (a try, a
    /// release, a read): among those first, then among all.
    async fn pass_herd(&self) -> Passage {
        let bounds = self.0.as_ref()?;
        let herd = bounds.herd.clone().acquire_owned().await.ok()?;
        let request = bounds.requests.clone().acquire_owned().await.ok()?;
        Some((request, Some(herd)))
    }
}

impl<C: Connection> Single<C> {
    pub(crate) fn new(conn: C, cluster: bool) -> Single<C> {
        Single {
            conn,
            cluster,
            replication: None,
            drift: Drift::ONE_NODE,
            gate: match cluster {
                true => Gate::bounded(CLUSTER_IN_FLIGHT, CLUSTER_HERD_IN_FLIGHT),
                false => Gate::default(),
            },
        }
    }

    /// The same server, its writes confirmed by replicas as `replication` says.
    pub(crate) fn replicated(&self, replication: Option<Replication>) -> Single<C> {
        Single {
            replication,
            ..self.clone()
        }
    }

    /// Waits for the replicas, when asked to, to confirm what `conn` wrote so far — by
    /// `until` at the latest, when given: a confirmation that comes after the try's end
    /// (its claim's validity, or the deadline) is of no use, as a late reply is not.
    async fn confirm(&self, conn: &mut C, until: Option<Instant>) -> Result<(), Error> {
        match (&self.replication, until) {
            (None, _) => Ok(()),
            (Some(replication), None) => replication.confirm(conn).await,
            (Some(replication), Some(until)) => {
                tokio::time::timeout_at(until, replication.confirm(conn))
                    .await
                    .unwrap_or_else(|_| Err(Error::Redis(no_reply_error())))
            }
        }
    }

    /// An obtained claim that the replicas did not confirm (`error`): undone, owner-checked;
    /// the acquire ends with the error (or, if the wait failed on the network, retries).
    async fn unconfirmed(
        &self,
        conn: &mut C,
        claim: &dyn Claim,
        token: &Token,
        error: Error,
    ) -> Attempt {
        let undo = claim.release_unattended(conn, token, 0);
        let undone = matches!(tokio::time::timeout(UNDO_WAIT, undo).await, Ok(Ok(())));
        let may_hold = !undone;
        match error {
            Error::Redis(error) if is_transient_redis(&error) => {
                Attempt::Failed { error, may_hold }
            }
            error => Attempt::Ended {
                error,
                held: None,
                may_hold,
            },
        }
    }

    /// The same server, its claims trusted with this drift allowance.
    pub(crate) fn with_drift(&self, drift: Drift) -> Single<C> {
        Single {
            drift,
            ..self.clone()
        }
    }

    pub(crate) fn drift(&self) -> Drift {
        self.drift
    }

    /// Until when a claim of `ttl_ms` sent at `sent_at` is valid: its TTL less the drift
    /// allowance (see docs/SAFETY.md, "The holder's validity").
    fn valid_until(&self, sent_at: Instant, ttl: Duration) -> Instant {
        sent_at + ttl.saturating_sub(self.drift.of(ttl))
    }

    pub(crate) fn nodes(&self) -> &[C] {
        std::slice::from_ref(&self.conn)
    }

    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// One try, sent at `sent_at`, answering by `try_until` at the latest.
    pub(crate) async fn try_obtain(
        &self,
        claim: &dyn Claim,
        request: ObtainTry<'_>,
        sent_at: Instant,
        try_until: Option<Instant>,
    ) -> Attempt {
        let mut conn = self.conn.clone();
        let reply = async {
            let _in_flight = self.gate.pass_herd().await;
            claim.obtain(&mut conn, request).await
        };
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
        let retrying_own = request.retrying_own;
        match outcome {
            Ok(Obtain::Obtained { fence }) => {
                if let Err(error) = self.confirm(&mut conn, try_until).await {
                    return (self.unconfirmed(&mut conn, claim, &request.terms.token, error)).await;
                }
                let valid_until =
                    self.valid_until(sent_at, Duration::from_millis(request.terms.ttl_ms));
                Attempt::Obtained(Obtained {
                    sent_at,
                    valid_until,
                    fence,
                })
            }
            // Nothing was written by this try; an earlier, unseen success may still stand.
            Ok(Obtain::Held { index, ttl, ahead }) => Attempt::Held {
                index,
                ttl,
                ahead,
                may_hold: retrying_own,
            },
            Ok(Obtain::Refused(why)) => Attempt::Ended {
                error: Error::InvalidArgument(why),
                held: None,
                may_hold: retrying_own,
            },
            // The request may or may not have been applied.
            Err(error) if is_transient_redis(&error) => Attempt::Failed {
                error,
                may_hold: true,
            },
            // Refused outright (auth, permission, script error): nothing written.
            Err(e) => Attempt::Ended {
                error: Error::Redis(e),
                held: None,
                may_hold: retrying_own,
            },
        }
    }

    /// Owner-checked release: [`Error::NotHeld`] if the claim was no longer held (what was
    /// still ours is released all the same).
    pub(crate) async fn release(
        &self,
        claim: &dyn Claim,
        token: &Token,
        keep_until: Option<Instant>,
    ) -> Result<(), Error> {
        let _in_flight = self.gate.pass_herd().await;
        let mut conn = self.conn.clone();
        let keep = keep_ms(keep_until, self.drift);
        match idempotent!(claim.release(&mut conn, token, keep))? {
            // A release that keeps the key for a minimum hold writes its expiry: one the
            // replicas must have, or a failover ends the hold early.
            true if keep > 0 => self.confirm(&mut conn, None).await,
            true => Ok(()),
            false => Err(Error::NotHeld),
        }
    }

    /// A release nobody waits on the reply of, bounded by `wait`. Whether it was confirmed.
    pub(crate) async fn release_unattended(
        &self,
        claim: &dyn Claim,
        token: &Token,
        wait: Duration,
    ) -> bool {
        let mut conn = self.conn.clone();
        let release = async {
            let _in_flight = self.gate.pass_herd().await;
            claim.release_unattended(&mut conn, token, 0).await
        };
        matches!(tokio::time::timeout(wait, release).await, Ok(Ok(())))
    }

    /// Starts an owner-checked release and returns at once (see [`background`]).
    pub(crate) fn release_in_background(
        &self,
        claim: Arc<dyn Claim>,
        token: Token,
        keep_until: Option<Instant>,
    ) {
        let (conn, gate) = (self.conn.clone(), self.gate.clone());
        let mut release = release_try(conn, claim, token, keep_until, self.drift);
        background::release(Box::new(move || {
            let (gate, release) = (gate.clone(), release());
            Box::pin(async move {
                let _in_flight = gate.pass_herd().await;
                release.await
            })
        }));
    }

    /// Takes `locker` out of `claim`'s lines, except where `kept` says another waiter of
    /// the locker still waits (see [`Claim::withdraw_unattended`]): one try of it, to
    /// await within a bound or to hand to [`background::release`].
    pub(crate) fn withdrawal(
        &self,
        claim: Arc<dyn Claim>,
        locker: Token,
        kept: Vec<u8>,
    ) -> background::Try {
        let (conn, gate) = (self.conn.clone(), self.gate.clone());
        Box::new(move || {
            let (mut conn, gate) = (conn.clone(), gate.clone());
            let (claim, kept) = (claim.clone(), kept.clone());
            Box::pin(async move {
                let _in_flight = gate.pass_herd().await;
                let withdrawn = claim.withdraw_unattended(&mut conn, &locker, &kept);
                withdrawn.await.is_ok()
            })
        })
    }

    /// Owner-checked refresh to `ttl_ms`. Returns the new validity.
    pub(crate) async fn refresh(
        &self,
        claim: &dyn Claim,
        token: &Token,
        ttl_ms: u64,
    ) -> Result<Instant, Error> {
        let _in_flight = self.gate.pass().await;
        let mut conn = self.conn.clone();
        let sent_at = Instant::now();
        match idempotent!(claim.refresh(&mut conn, token, ttl_ms))? {
            true => self.confirm(&mut conn, None).await?,
            false => return Err(Error::NotHeld),
        }
        Ok(self.valid_until(sent_at, Duration::from_millis(ttl_ms)))
    }

    /// Sends one keep-alive call for leases of these `ttls` and says, lease by lease, what
    /// became of it.
    pub(crate) async fn renew(
        &self,
        call: &ScriptInvocation<'static>,
        ttls: &[Duration],
    ) -> Result<Vec<Renewal>, RedisError> {
        let _in_flight = self.gate.pass().await;
        let sent_at = Instant::now();
        let reply = call
            .invoke_async::<Value>(&mut ScriptConn(&mut self.conn.clone()))
            .await?;
        let answers = renewal_reply(reply, ttls.len())?;
        // Renewals the replicas did not confirm do not count: the call fails as a whole,
        // and the renewer tries again while the leases are valid.
        match self.confirm(&mut self.conn.clone(), None).await {
            Ok(()) => {}
            Err(Error::Redis(e)) => return Err(e),
            Err(e) => {
                return Err(RedisError::from((
                    redis::ErrorKind::Io,
                    "renewal not replicated",
                    e.to_string(),
                )))
            }
        }
        let renewal = |(answer, ttl): (Renewed, &Duration)| match answer {
            Renewed::Extended { requests } => Renewal::Renewed {
                sent_at,
                valid_until: self.valid_until(sent_at, *ttl),
                asked: !requests.is_empty(),
            },
            Renewed::NotHeld => Renewal::NotHeld,
        };
        Ok(answers.into_iter().zip(ttls).map(renewal).collect())
    }

    /// The fence of a claim taken without one, while this owner holds it.
    pub(crate) async fn fence(
        &self,
        claim: &dyn Claim,
        token: &Token,
        retention_ms: u64,
    ) -> Result<u64, Error> {
        let _in_flight = self.gate.pass().await;
        let mut conn = self.conn.clone();
        // Safe to repeat: a fence taken by a request whose reply was lost is never handed
        // out, and the repeat takes a greater one.
        match idempotent!(claim.fence(&mut conn, token, retention_ms))? {
            // A fence the replicas do not have could be handed out again after a failover.
            Some(fence) => self.confirm(&mut conn, None).await.map(|()| fence),
            None => Err(Error::NotHeld),
        }
    }

    /// Runs `writes` if this owner holds the claim, checked in the same call; sent once
    /// (the commands need not be safe to repeat). Where the locker confirms writes on
    /// replicas, the commands' writes are confirmed as a claim's are.
    pub(crate) async fn write_if_held(
        &self,
        claim: &dyn Claim,
        token: &Token,
        writes: &Writes,
    ) -> Result<Vec<Value>, Error> {
        let _in_flight = self.gate.pass().await;
        let mut conn = self.conn.clone();
        match claim.write_if_held(&mut conn, token, writes).await? {
            Some(replies) => self.confirm(&mut conn, None).await.map(|()| replies),
            None => Err(Error::NotHeld),
        }
    }

    /// How long the claim has left, as the server says.
    pub(crate) async fn ttl(&self, claim: &dyn Claim, token: &Token) -> Result<Duration, Error> {
        let _in_flight = self.gate.pass_herd().await;
        let mut conn = self.conn.clone();
        match idempotent!(claim.ttl(&mut conn, token))? {
            Remaining::Millis(ms) => Ok(Duration::from_millis(ms)),
            Remaining::Forever => Ok(Duration::MAX),
            Remaining::NotHeld => Err(Error::NotHeld),
        }
    }

    /// What `call` reads, as anyone sees it.
    pub(crate) async fn inspect<V: StateReader>(
        &self,
        view: &V,
        call: &ScriptInvocation<'static>,
    ) -> Result<V::Info, Error> {
        let _in_flight = self.gate.pass_herd().await;
        let mut conn = self.conn.clone();
        let reply: Value = idempotent!(call.invoke_async(&mut ScriptConn(&mut conn)))?;
        Ok(view.one(reply)?)
    }
}

/// The longest wait for an acquire reply that gets a timer of its own (see
/// [`Single::try_obtain`]).
const OWN_TIMER_WITHIN: Duration = Duration::from_secs(5);

/// How long an unconfirmed acquire waits for its undo before leaving it to the acquire's
/// background release.
const UNDO_WAIT: Duration = Duration::from_secs(1);

fn no_reply_error() -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply to the acquire request within the lock's TTL or the deadline",
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `passage` gets through within a second (the clock is paused: at once, or
    /// never).
    async fn passes(passage: impl std::future::Future<Output = Passage>) -> Option<Passage> {
        tokio::time::timeout(Duration::from_secs(1), passage)
            .await
            .ok()
    }

    #[tokio::test(start_paused = true)]
    async fn herds_leave_room_for_what_keeps_a_lease_and_every_request_is_bounded() {
        let gate = Gate::bounded(4, 3);
        let mut tries = Vec::new();
        for _ in 0..3 {
            tries.push(passes(gate.pass_herd()).await.flatten().expect("room"));
        }
        // The herd's share is taken: a fourth try (or release) waits, a renewal does not.
        assert!(passes(gate.pass_herd()).await.is_none());
        let renewal = passes(gate.pass()).await.flatten().expect("room");
        // Every request counts toward the whole bound.
        assert!(passes(gate.pass()).await.is_none());
        drop(renewal);
        assert!(passes(gate.pass()).await.flatten().is_some());
        drop(tries.pop());
        assert!(passes(gate.pass_herd()).await.flatten().is_some());
        // No bound (one node): nothing to wait for, nothing held.
        assert!(passes(Gate::default().pass_herd())
            .await
            .is_some_and(|p| p.is_none()));
    }
}
