//! What both backends share: the outcome of each operation as the engine sees it, how an
//! inspection is read from one node or many, and the background release.

use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, Value};
use tokio::time::Instant;

use crate::background;
use crate::connection::Connection;
use crate::quorum::{Drift, NodeError, QuorumFailure};
use crate::scripts::Claim;
use crate::token::Token;

/// One node's answer: its value, or why there is none.
pub(crate) type Reply<T> = Result<T, NodeError>;

/// What one acquire try came to, as the retry loop sees it.
pub(crate) enum Attempt {
    /// Obtained (see [`Obtained`]).
    Obtained(Obtained),
    /// The key at `index` of the claim's keys is held by another owner, for `ttl` at most
    /// when the reply said (a wait for its release needs to last no longer); a fair
    /// lock's waiter has `ahead` live waiters ahead of it in line.
    Held {
        index: usize,
        ttl: Option<Duration>,
        ahead: Option<u32>,
        /// An earlier try whose reply was not seen may have stored our token.
        may_hold: bool,
    },
    /// A transient error (the request may or may not have been applied).
    Failed {
        error: RedisError,
        /// Our token may be stored: the request's fate is unknown (or its undo's).
        may_hold: bool,
    },
    /// Quorum: too few nodes agreed, or too late. `held`: the key (and the shortest TTL
    /// over the nodes that hold it) found held on the most nodes, to wait for.
    NoQuorum {
        failure: Box<QuorumFailure>,
        held: Option<(usize, Option<Duration>)>,
        /// The undo of this try did not reach every node.
        may_hold: bool,
    },
    /// An error that ends the acquire at once, as retrying cannot change it: refused
    /// outright (auth, permission, script error), the arguments refused, or too few
    /// replicas confirmed the claim (undone). `held`: as for `NoQuorum`, the key other
    /// nodes found held (a quorum's), which a waiter woken for it passes its turn on for.
    Ended {
        error: crate::error::Error,
        held: Option<(usize, Option<Duration>)>,
        /// The undo did not get through, or an earlier unseen try may have stored it.
        may_hold: bool,
    },
}

impl Attempt {
    /// Whether our token may still be stored (a request whose fate is unknown): the next
    /// try must accept it as ours, and giving up must delete it.
    pub(crate) fn may_hold(&self) -> bool {
        match self {
            Attempt::Obtained(_) => false,
            Attempt::Failed { may_hold, .. }
            | Attempt::Held { may_hold, .. }
            | Attempt::NoQuorum { may_hold, .. }
            | Attempt::Ended { may_hold, .. } => *may_hold,
        }
    }

    /// The key found held by another owner, to wait for its release, and how long it
    /// stays held at most (when the reply said).
    pub(crate) fn held(&self) -> Option<(usize, Option<Duration>)> {
        match self {
            Attempt::Held { index, ttl, .. } => Some((*index, *ttl)),
            Attempt::NoQuorum { held, .. } | Attempt::Ended { held, .. } => *held,
            _ => None,
        }
    }
}

/// What a successful try obtained: held until `valid_until` on this client's clock, by a
/// try sent at `sent_at`, with this fence (when taken).
pub(crate) struct Obtained {
    pub(crate) sent_at: Instant,
    pub(crate) valid_until: Instant,
    pub(crate) fence: Option<u64>,
}

/// What one renewal call did for one lease.
pub(crate) enum Renewal {
    /// Extended by a call sent at `sent_at`; valid until `valid_until`. `asked`: another
    /// process asked this holder to let go (`Locker::request_release`; Redlock: a quorum
    /// of the nodes that renewed it say so, as a quorum answered the asker).
    Renewed {
        sent_at: Instant,
        valid_until: Instant,
        asked: bool,
    },
    /// The claim is gone (on so many nodes that no quorum holds it).
    NotHeld,
    /// Not known to be extended; try again until the lease runs out.
    Failed(RedisError),
}

/// How an inspection is read: from one node's reply, or from every node's.
pub(crate) trait StateReader {
    /// What the inspection shows.
    type Info;
    /// One node's reply (a single-node backend, or a cluster).
    fn one(&self, reply: Value) -> Result<Self::Info, RedisError>;
    /// Every node's reply, in node order, where `needed` nodes make a quorum; an error
    /// (no quorum) when they cannot tell — unknown is never reported as free or held.
    fn each(
        &self,
        replies: Vec<Reply<Value>>,
        needed: usize,
    ) -> Result<Self::Info, crate::error::Error>;
}

/// One lease's answer to a renewal call (`helpers.lua`'s `renewed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Renewed {
    NotHeld,
    /// Extended; the ids of the requests to let go stored beside it (none: not asked).
    Extended {
        requests: Vec<Vec<u8>>,
    },
}

/// A renewal call's reply: one answer per lease (0, 1, or `{ 1, ids… }`), every lease of
/// the call answered.
pub(crate) fn renewal_reply(reply: Value, leases: usize) -> Result<Vec<Renewed>, RedisError> {
    let bad = |what: String| RedisError::from((redis::ErrorKind::Parse, "renewal reply", what));
    let answers: Vec<Value> = redis::from_redis_value(reply)?;
    if answers.len() != leases {
        return Err(bad(format!(
            "{} answers for {leases} leases",
            answers.len()
        )));
    }
    let answer = |value: Value| match value {
        Value::Int(0) => Ok(Renewed::NotHeld),
        Value::Int(1) => Ok(Renewed::Extended {
            requests: Vec::new(),
        }),
        Value::Array(items) if items.first() == Some(&Value::Int(1)) => {
            let ids = items.into_iter().skip(1).map(redis::from_redis_value);
            Ok(Renewed::Extended {
                requests: ids.collect::<Result<_, _>>()?,
            })
        }
        other => Err(bad(format!("{other:?}"))),
    };
    answers.into_iter().map(answer).collect()
}

/// One try of an owner-checked release of `claim` on `conn`, for [`background::release`];
/// what is held is kept until `keep_until` (a minimum hold time, by a server clock that
/// may drift as `drift` allows), whenever the try runs.
pub(crate) fn release_try<C: Connection>(
    conn: C,
    claim: Arc<dyn Claim>,
    token: Token,
    keep_until: Option<Instant>,
    drift: Drift,
) -> background::Try {
    Box::new(move || {
        let (mut conn, claim) = (conn.clone(), claim.clone());
        Box::pin(async move {
            let keep = keep_ms(keep_until, drift);
            claim
                .release_unattended(&mut conn, &token, keep)
                .await
                .is_ok()
        })
    })
}

/// How long from now a release must keep what is held: until `keep_until` by this
/// client's clock, with the drift allowance on top (a server clock running fast keeps it
/// that long all the same), in whole milliseconds rounded up (never shorter); 0 when it
/// has passed or there is none.
pub(crate) fn keep_ms(keep_until: Option<Instant>, drift: Drift) -> u64 {
    let left = keep_until.map_or(Duration::ZERO, |until| {
        until.saturating_duration_since(Instant::now())
    });
    if left.is_zero() {
        return 0;
    }
    u64::try_from(drift.keep(left).as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_replies_read_each_leases_answer_and_its_requests() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(1),
            Value::Array(vec![Value::Int(1), bulk("id-a"), bulk("id-b")]),
        ]);
        let extended = |ids: &[&str]| Renewed::Extended {
            requests: ids.iter().map(|id| id.as_bytes().to_vec()).collect(),
        };
        assert_eq!(
            renewal_reply(reply.clone(), 3).unwrap(),
            [Renewed::NotHeld, extended(&[]), extended(&["id-a", "id-b"])]
        );
        assert!(renewal_reply(reply, 2).is_err(), "one answer per lease");
        for bad in [
            Value::Int(2),
            Value::Array(vec![Value::Int(0), bulk("id")]),
            Value::Array(vec![]),
            bulk("1"),
        ] {
            assert!(
                renewal_reply(Value::Array(vec![bad.clone()]), 1).is_err(),
                "{bad:?}"
            );
        }
    }
}
