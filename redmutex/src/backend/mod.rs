//! Where state lives: one Redis node (or a cluster connection, which routes each claim to
//! its master), or a quorum of independent nodes (Redlock). The two files below answer the
//! same operations with the same outcome types ([`common`]); this one only dispatches, so
//! that nothing above it needs to know which it is.

pub(crate) mod common;
mod fan_out;
mod redlock;
pub(crate) mod replication;
mod single;

use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, ScriptInvocation, Value};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::{Argument, Error};
use crate::quorum::{Drift, QuorumSettings};
use crate::scripts::{Claim, ObtainTry};
use crate::token::{Channels, Token};
use crate::writes::Writes;
use common::{Attempt, Renewal, StateReader};
use redlock::Quorum;
use replication::Replication;
use single::Single;

/// The nodes behind a locker and everything it hands out. Cheap to clone.
pub(crate) enum Backend<C> {
    /// One Redis server, or a cluster connection.
    Single(Single<C>),
    /// Independent masters; an operation counts when a quorum of them agrees.
    Quorum(Arc<Quorum<C>>),
}

impl<C: Clone> Clone for Backend<C> {
    fn clone(&self) -> Self {
        match self {
            Backend::Single(single) => Backend::Single(single.clone()),
            Backend::Quorum(quorum) => Backend::Quorum(quorum.clone()),
        }
    }
}

/// Calls the same method on whichever backend this is.
macro_rules! dispatch {
    ($self:ident, $backend:ident => $call:expr) => {
        match $self {
            Backend::Single($backend) => $call,
            Backend::Quorum($backend) => $call,
        }
    };
}

impl<C: Connection> Backend<C> {
    pub(crate) fn single(conn: C) -> Backend<C> {
        Backend::Single(Single::new(conn, false))
    }

    pub(crate) fn cluster(conn: C) -> Backend<C> {
        Backend::Single(Single::new(conn, true))
    }

    pub(crate) fn redlock(conns: Vec<C>, settings: QuorumSettings) -> Backend<C> {
        Backend::Quorum(Arc::new(Quorum::new(conns, settings)))
    }

    /// The same nodes judged with other quorum settings; `None` for a single node.
    pub(crate) fn with_settings(&self, settings: QuorumSettings) -> Option<Backend<C>> {
        match self {
            Backend::Single(_) => None,
            Backend::Quorum(quorum) => Some(Backend::redlock(quorum.nodes().to_vec(), settings)),
        }
    }

    /// The same server, its writes confirmed by replicas as `replication` says.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on Redlock (independent masters: a quorum, not replicas,
    /// keeps the lock) and on a cluster (`WAIT` there goes to every master, not the key's).
    pub(crate) fn replicated(&self, replication: Option<Replication>) -> Result<Backend<C>, Error> {
        let refused = |why: &str| Err(Error::invalid(Argument::Replication, why));
        match self {
            Backend::Quorum(_) => refused(
                "replica confirmation is for one master with replicas; Redlock's nodes are \
                 independent masters",
            ),
            Backend::Single(single) if single.is_cluster() => refused(
                "replica confirmation is not supported on a cluster connection (WAIT would \
                 go to every master, not the key's)",
            ),
            Backend::Single(single) => Ok(Backend::Single(single.replicated(replication))),
        }
    }

    /// The quorum settings of a Redlock backend; `None` for a single node.
    pub(crate) fn quorum_settings(&self) -> Option<&QuorumSettings> {
        match self {
            Backend::Single(_) => None,
            Backend::Quorum(quorum) => Some(quorum.settings()),
        }
    }

    /// The connection of every node: one, or each of a quorum's.
    pub(crate) fn nodes(&self) -> &[C] {
        dispatch!(self, backend => backend.nodes())
    }

    /// How many nodes must agree: all of one, a majority of N.
    pub(crate) fn needed(&self) -> usize {
        match self {
            Backend::Single(_) => 1,
            Backend::Quorum(quorum) => quorum.needed(),
        }
    }

    /// A cluster connection: the keys of one claim must share a hash slot, and renewals
    /// are batched per slot.
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            Backend::Single(single) => single.is_cluster(),
            Backend::Quorum(_) => false,
        }
    }

    /// How announcements travel: on shard channels on a cluster (see [`Channels`]).
    pub(crate) fn channels(&self) -> Channels {
        match self.is_cluster() {
            true => Channels::Sharded,
            false => Channels::Plain,
        }
    }

    /// The clock-drift allowance subtracted from a lease of `ttl`: one node's, or the
    /// Redlock allowance of the quorum's settings.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        self.allowance().of(ttl)
    }

    /// The clock-drift allowance, as a rule.
    pub(crate) fn allowance(&self) -> Drift {
        match self {
            Backend::Single(single) => single.drift(),
            Backend::Quorum(quorum) => quorum.settings().allowance(),
        }
    }

    /// The same nodes, their claims trusted with this drift allowance (on Redlock, the
    /// drift part of the quorum's settings).
    pub(crate) fn with_drift(&self, drift: Drift) -> Backend<C> {
        match self {
            Backend::Single(single) => Backend::Single(single.with_drift(drift)),
            Backend::Quorum(quorum) => {
                let settings =
                    (quorum.settings().drift_factor(drift.factor)).fixed_drift(drift.fixed);
                Backend::redlock(quorum.nodes().to_vec(), settings)
            }
        }
    }

    /// One try, sent now (`sent_at`, read by the caller, which needs it too), answering by
    /// `try_until` at the latest.
    pub(crate) async fn try_obtain(
        &self,
        claim: &dyn Claim,
        request: ObtainTry<'_>,
        sent_at: Instant,
        try_until: Option<Instant>,
    ) -> Attempt {
        dispatch!(self, backend => backend.try_obtain(claim, request, sent_at, try_until).await)
    }

    /// Owner-checked release: [`Error::NotHeld`] if the claim was no longer held (what was
    /// still ours is released all the same). `ttl` (when known) sizes Redlock's timeout;
    /// what is held is kept until `keep_until` (a minimum hold time) rather than freed.
    pub(crate) async fn release(
        &self,
        claim: &Arc<dyn Claim>,
        token: &Token,
        ttl: Option<Duration>,
        keep_until: Option<Instant>,
    ) -> Result<(), Error> {
        match self {
            Backend::Single(single) => single.release(&**claim, token, keep_until).await,
            Backend::Quorum(quorum) => quorum.release(claim, token, ttl, keep_until).await,
        }
    }

    /// A release nobody waits on the reply of (the whole script is sent), bounded by
    /// `wait`. Returns whether every node confirmed it.
    pub(crate) async fn release_unattended(
        &self,
        claim: &dyn Claim,
        token: &Token,
        wait: Duration,
    ) -> bool {
        dispatch!(self, backend => backend.release_unattended(claim, token, wait).await)
    }

    /// Takes `locker` out of `claim`'s lines, except where `kept` (per key, `'1'`) says
    /// another waiter of the locker still waits for that key; bounded by `wait`. Lockers
    /// line up only where one node decides (see `Waits::lined`): elsewhere there is
    /// nothing to withdraw.
    pub(crate) async fn withdraw(
        &self,
        claim: Arc<dyn Claim>,
        locker: Token,
        kept: Vec<u8>,
        wait: Duration,
    ) {
        if let Backend::Single(single) = self {
            let mut withdrawal = single.withdrawal(claim, locker, kept);
            let _ = tokio::time::timeout(wait, withdrawal()).await;
        }
    }

    /// [`withdraw`](Backend::withdraw), started in the background (see
    /// [`crate::background`]); it returns at once. Used in `Drop`.
    pub(crate) fn withdraw_in_background(
        &self,
        claim: Arc<dyn Claim>,
        locker: Token,
        kept: Vec<u8>,
    ) {
        if let Backend::Single(single) = self {
            crate::background::release(single.withdrawal(claim, locker, kept));
        }
    }

    /// Starts an owner-checked release on every node and returns at once (see
    /// [`crate::background`]: it is finished even if the runtime shuts down first, or there
    /// is none). Used where waiting is impossible: in `Drop`. What is held is kept until
    /// `keep_until`, as for [`release`](Backend::release).
    pub(crate) fn release_in_background(
        &self,
        claim: Arc<dyn Claim>,
        token: Token,
        keep_until: Option<Instant>,
    ) {
        match self {
            Backend::Single(single) => single.release_in_background(claim, token, keep_until),
            Backend::Quorum(quorum) => {
                let nodes = 0..quorum.nodes().len();
                quorum.release_in_background(nodes, claim, token, keep_until)
            }
        }
    }

    /// Owner-checked refresh to `ttl_ms`, all or nothing per node. `valid_until` is the
    /// current validity when known: a quorum only counts a refresh confirmed before it.
    /// Returns the new validity.
    pub(crate) async fn refresh(
        &self,
        claim: &dyn Claim,
        token: &Token,
        ttl_ms: u64,
        valid_until: Option<Instant>,
    ) -> Result<Instant, Error> {
        match self {
            Backend::Single(single) => single.refresh(claim, token, ttl_ms).await,
            Backend::Quorum(quorum) => quorum.refresh(claim, token, ttl_ms, valid_until).await,
        }
    }

    /// Sends one keep-alive call (built from the claims' renewal script) for leases of
    /// these `ttls` and says, lease by lease, what became of it.
    pub(crate) async fn renew(
        &self,
        call: &ScriptInvocation<'static>,
        ttls: &[Duration],
    ) -> Result<Vec<Renewal>, RedisError> {
        match self {
            Backend::Single(single) => single.renew(call, ttls).await,
            Backend::Quorum(quorum) => Ok(quorum.renew(call, ttls).await),
        }
    }

    /// The fence of a claim taken without one: handed out only while this owner holds it
    /// (Redlock: on a quorum, before `valid_until`).
    pub(crate) async fn fence(
        &self,
        claim: &dyn Claim,
        token: &Token,
        ttl: Duration,
        retention_ms: u64,
        valid_until: Instant,
    ) -> Result<u64, Error> {
        match self {
            Backend::Single(single) => single.fence(claim, token, retention_ms).await,
            Backend::Quorum(quorum) => {
                (quorum.fence(claim, token, ttl, retention_ms, valid_until)).await
            }
        }
    }

    /// Runs `writes` only if this owner holds the claim, the check and the commands in
    /// one call on the one server that decides. Refused on Redlock: the claim lives on
    /// several independent servers, and the data the commands write would live on one,
    /// checked by a single node's say.
    pub(crate) async fn write_if_held(
        &self,
        claim: &dyn Claim,
        token: &Token,
        writes: &Writes,
    ) -> Result<Vec<Value>, Error> {
        match self {
            Backend::Single(single) => single.write_if_held(claim, token, writes).await,
            Backend::Quorum(_) => Err(Error::invalid(
                Argument::Writes,
                "guarded writes need the lock and the data on one server: a Redlock lock \
                 lives on several, and no single node may say it is held",
            )),
        }
    }

    /// How long the claim has left: as its server says; on Redlock the validity this
    /// client knows (`valid_until`), since no single node's TTL says how long the quorum
    /// holds.
    pub(crate) async fn ttl(
        &self,
        claim: &dyn Claim,
        token: &Token,
        valid_until: Instant,
    ) -> Result<Duration, Error> {
        match self {
            Backend::Single(single) => single.ttl(claim, token).await,
            Backend::Quorum(_) => match valid_until.saturating_duration_since(Instant::now()) {
                left if left.is_zero() => Err(Error::NotHeld),
                left => Ok(left),
            },
        }
    }

    /// What `call` reads, as anyone sees it: one node's view, or every node's (a node that
    /// cannot be asked says why in its slot rather than failing the call).
    pub(crate) async fn inspect<V: StateReader>(
        &self,
        view: &V,
        call: &ScriptInvocation<'static>,
    ) -> Result<V::Info, Error> {
        match self {
            Backend::Single(single) => single.inspect(view, call).await,
            Backend::Quorum(quorum) => quorum.inspect(view, call).await,
        }
    }
}
