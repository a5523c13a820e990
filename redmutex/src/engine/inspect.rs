//! What a lock key holds, as anyone sees it ([`LockInfo`]): read from one node, or from
//! every node of a Redlock quorum and combined (who holds it by quorum, and for how long).

use std::borrow::Cow;
use std::time::Duration;

use redis::{RedisError, Value};

use crate::backend::common::{Reply, StateReader};
use crate::error::Error;
use crate::quorum::{blocks_quorum, NodeError, NodeFailure, QuorumFailure};
use crate::token::{parse_value, StoredValue, Token};

/// What [`Locker::inspect`](crate::Locker::inspect) sees at a key.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// # let locker = redmutex::Locker::in_memory();
/// let lock = locker.acquire("job", Duration::from_secs(30)).metadata("host-7").await?;
/// let info = locker.inspect("job").await?;
/// assert!(info.held && !info.foreign);
/// assert_eq!(info.metadata.as_deref(), Some("host-7"));
/// assert_eq!(info.ttl, Some(Duration::from_secs(30))); // no time passed: the clock is paused
/// lock.release().await?;
/// assert!(!locker.inspect("job").await?.held);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key as stored in Redis (with the locker's prefix).
    pub key: Vec<u8>,
    /// Whether the key exists, i.e. nobody can acquire it now. Redlock: whether so many
    /// nodes hold the key (one owner, several, or foreign data) that no quorum of free
    /// nodes is left; nodes that could not be asked do not count as held (see
    /// [`nodes`](LockInfo::nodes)).
    pub held: bool,
    /// Remaining time to live; `None` when the key is missing or has no expiry. Redlock:
    /// how long the owner holding a quorum keeps it (the quorum-th longest TTL among its
    /// nodes); `None` when no single owner holds a quorum.
    pub ttl: Option<Duration>,
    /// The metadata stored by the holder, if it is a redmutex lock that has some.
    /// Redlock: that of the owner holding a quorum.
    pub metadata: Option<String>,
    /// The key holds something redmutex did not write (another type, or a value without
    /// a redmutex token). redmutex will not acquire it, and never modifies it. Redlock:
    /// on any node.
    pub foreign: bool,
    /// Some acquire waits for this lock and asked to be woken when it is released (see
    /// [`Locker::with_wake_up`](crate::Locker::with_wake_up)). Redlock: on any node.
    pub awaited: bool,
    /// The latest fence handed out for this key ([`Lock::fence`](crate::Lock::fence)),
    /// whether or not the lock is held now; `None` when no fenced acquisition took it yet.
    /// Redlock: while an owner holds the key on a quorum, the latest fence that a quorum of
    /// the nodes store — every fence handed out is stored on a quorum, and only a minority
    /// can be above the latest (a rival's failed try, or a late try of the owner's own,
    /// raised it) — which is the owner's own fence if it took one (with nodes silent,
    /// [`Error::NoQuorum`] when the others cannot tell it); otherwise the highest over the
    /// nodes that answered (a failed try may have raised a minority of nodes past the last
    /// fence actually handed out).
    pub fence: Option<u64>,
    /// Redlock: each node's view, in node order (empty for a single-node locker).
    pub nodes: Vec<NodeInfo>,
    /// Whether a redmutex owner holds it: its token is the value (Redlock: on a quorum of
    /// nodes, whatever a minority holds — foreign data, or another owner's failed try).
    /// An error when nobody can tell: nodes that did not answer, or tombstones, could
    /// complete an owner's quorum.
    pub(crate) owned: Result<bool, Box<QuorumFailure>>,
    /// Redlock: an owner holds a quorum, and one of its nodes stores a fence above the
    /// latest handed out — a fenced acquire between taking its claim (each node counting
    /// its own next fence) and making the highest durable on them all. The fence told is
    /// not yet the one the owner will be handed. Or no owner holds a quorum, but one would
    /// with the tombstones beside it: a forced release on its way across the nodes.
    pub(crate) settling: bool,
    /// Its holder was released by force ([`Locker::force_release`](crate::Locker::force_release)):
    /// a tombstone keeps its place — `held`, with its `metadata` and `ttl` — until its TTL
    /// ends. Redlock: the owner holding a quorum is one.
    pub forced: bool,
}

/// One node's view of a key, in [`LockInfo::nodes`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{memory::MemoryRedis, Locker};
/// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
/// let locker = Locker::redlock(nodes.clone())?;
/// let lock = locker.acquire("job", Duration::from_secs(30)).await?;
/// nodes[2].fail_next(1); // node 2 cannot be asked this time
/// let info = locker.inspect("job").await?;
/// assert!(info.held); // on a quorum: nodes 0 and 1
/// assert!(info.nodes[0].info.as_ref().is_ok_and(|node| node.held));
/// assert!(info.nodes[2].info.is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's position in the list given to [`Locker::redlock`](crate::Locker::redlock).
    pub node: usize,
    /// What the node holds, or why it could not be asked.
    pub info: Result<LockInfo, NodeError>,
}

/// What one node holds at a key, as every read of a key's state begins (helpers.lua's
/// `read_key`: `{ pttl, type, fence, value }`): inspection reads only this, a listing's
/// `describe` adds what it counts beside the key. The one parser of a key's state, and
/// [`holding`](KeyState::holding) the one reading of who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyState {
    /// PTTL: -2 missing, -1 no expiry.
    pttl: i64,
    /// Redis type name (`none`, `string`, `hash`, …).
    kind: String,
    /// The key's fence counter: the latest fence handed out, if any (and a number).
    pub(crate) fence: Option<u64>,
    /// The value, when the key is a string (and the script returned it).
    pub(crate) value: Option<Vec<u8>>,
}

/// Who holds a key on one node, by its [`KeyState`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Nothing is there.
    Free,
    /// A redmutex holder's value: `owner` is its token, or a forced release's tombstone
    /// (`tombstone`), whose stand-in token keeps the holder's place.
    Held {
        owner: Token,
        metadata: Option<String>,
        awaited: bool,
        tombstone: bool,
    },
    /// A string redmutex did not write — or one without expiry: redmutex writes no key
    /// without a TTL, so such a value is someone else's, whatever it looks like.
    Foreign,
    /// Another type than a string (a semaphore's holders, the readers, or something
    /// else's): what it is, the keys beside it tell (a listing's `describe` does).
    Other,
}

impl KeyState {
    /// Takes `{ pttl, type, fence, value }` from the front of a reply's fields, leaving
    /// what follows; a missing field reads as nil.
    pub(crate) fn take(fields: &mut impl Iterator<Item = Value>) -> Result<KeyState, RedisError> {
        let mut next = || fields.next().unwrap_or(Value::Nil);
        let pttl: i64 = redis::from_redis_value(next())?;
        let kind: String = redis::from_redis_value(next())?;
        let fence: Option<String> = redis::from_redis_value(next())?;
        let value: Option<Vec<u8>> = redis::from_redis_value(next())?;
        Ok(KeyState {
            pttl,
            kind,
            fence: fence.and_then(|f| f.parse().ok()),
            value,
        })
    }

    /// A whole reply that is only the state (`read_key`'s).
    fn parse(reply: Value) -> Result<KeyState, RedisError> {
        let fields = redis::from_redis_value::<Vec<Value>>(reply)?;
        KeyState::take(&mut fields.into_iter())
    }

    /// The time left; `None` for a missing key or one without expiry.
    pub(crate) fn ttl(&self) -> Option<Duration> {
        u64::try_from(self.pttl).ok().map(Duration::from_millis)
    }

    /// Who holds the key here.
    pub(crate) fn holding(&self) -> Holding {
        if self.kind == "none" {
            return Holding::Free;
        }
        let Some(value) = &self.value else {
            return match self.kind.as_str() {
                "string" => Holding::Foreign,
                _ => Holding::Other,
            };
        };
        if self.pttl == -1 {
            return Holding::Foreign;
        }
        match parse_value(value) {
            StoredValue::Redmutex {
                token,
                metadata,
                awaited,
            } => Holding::Held {
                owner: token,
                metadata,
                awaited,
                tombstone: false,
            },
            StoredValue::Tombstone { holder, metadata } => Holding::Held {
                owner: holder,
                metadata,
                awaited: false,
                tombstone: true,
            },
            StoredValue::Foreign => Holding::Foreign,
        }
    }

    /// The [`LockInfo`] for what one node holds at `key`.
    fn info(&self, key: &[u8]) -> LockInfo {
        let mut info = LockInfo::free(key);
        info.ttl = self.ttl();
        info.fence = self.fence;
        match self.holding() {
            Holding::Free => {}
            Holding::Held {
                metadata,
                awaited,
                tombstone,
                ..
            } => {
                (info.held, info.metadata, info.awaited) = (true, metadata, awaited);
                info.forced = tombstone;
            }
            Holding::Foreign | Holding::Other => (info.held, info.foreign) = (true, true),
        }
        info.owned = Ok(info.held && !info.foreign);
        info
    }

    /// The owner whose token this node holds, with its metadata (a tombstone's: the holder
    /// it keeps the place of).
    fn owner(&self) -> Option<(Token, Option<String>)> {
        match self.holding() {
            Holding::Held {
                owner, metadata, ..
            } => Some((owner, metadata)),
            _ => None,
        }
    }
}

/// Reads what a lock key holds (see [`StateReader`]).
pub(crate) struct LockKeyReader<'k> {
    /// The key, with the locker's prefix.
    pub(crate) key: &'k [u8],
}

impl StateReader for LockKeyReader<'_> {
    type Info = LockInfo;

    fn one(&self, reply: Value) -> Result<LockInfo, RedisError> {
        Ok(KeyState::parse(reply)?.info(self.key))
    }

    /// Every node's view, and who holds the key by quorum: held when the occupied nodes
    /// leave too few for a quorum, free when a quorum answered free; otherwise — nodes
    /// that did not answer might hold it for someone with a quorum — nobody can tell, and
    /// that is an error, not an answer.
    fn each(&self, replies: Vec<Reply<Value>>, needed: usize) -> Result<LockInfo, Error> {
        // Which owner's token is on a quorum of nodes, with each of those nodes' TTL, and
        // which nodes they are.
        let mut owners: Vec<Owner> = Vec::new();
        let mut nodes = Vec::with_capacity(replies.len());
        for (node, reply) in replies.into_iter().enumerate() {
            let raw = reply.and_then(|value| KeyState::parse(value).map_err(NodeError::Redis));
            if let Some((token, metadata)) = raw.as_ref().ok().and_then(KeyState::owner) {
                let pttl = raw.as_ref().map_or(-2, |raw| raw.pttl);
                match owners.iter_mut().find(|(t, _, _, _)| *t == token) {
                    Some((_, _, ttls, at)) => {
                        ttls.push(pttl);
                        at.push(node);
                    }
                    None => owners.push((token, metadata, vec![pttl], vec![node])),
                }
            }
            let info = raw.map(|raw| raw.info(self.key));
            nodes.push(NodeInfo { node, info });
        }
        let unanswered = (nodes.iter()).filter(|n| n.info.is_err()).count();
        let is_tombstone = |node: usize| (nodes[node].info.as_ref()).is_ok_and(|i| i.forced);
        let tombstones = (0..nodes.len()).filter(|&n| is_tombstone(n)).count();
        // Nobody holds a quorum among the answers; but the nodes that did not answer might
        // complete one owner's (or be one's whole quorum). So might tombstones: each keeps
        // the place of a holder a force replaced, without saying which — beside an owner's
        // own nodes, a force under way or half done (simulator seed 18963).
        let completes = |(_, _, ttls, at): &Owner, others: usize| {
            let placeholders = if is_tombstone(at[0]) { 0 } else { others };
            ttls.len() + placeholders >= needed
        };
        let maybe_owned =
            unanswered >= needed || (owners.iter()).any(|o| completes(o, unanswered + tombstones));
        let mid_force = (owners.iter()).any(|o| !completes(o, 0) && completes(o, tombstones));
        let holder = owners
            .into_iter()
            .find(|(_, _, ttls, _)| ttls.len() >= needed);
        let (metadata, ttl, holder_nodes) = match holder {
            Some((_, metadata, ttls, at)) => (metadata, quorum_ttl(ttls, needed), Some(at)),
            None => (None, None, None),
        };
        let any =
            |what: fn(&LockInfo) -> bool| (nodes.iter()).any(|n| n.info.as_ref().is_ok_and(what));
        let (foreign, awaited) = (any(|info| info.foreign), any(|info| info.awaited));
        // Nobody can acquire it now when the occupied nodes — by one owner, several, or
        // foreign data — leave fewer free nodes than a quorum.
        let occupied = (nodes.iter())
            .filter(|n| n.info.as_ref().is_ok_and(|info| info.held))
            .count();
        let held = blocks_quorum(occupied, nodes.len(), needed);
        let free = (nodes.iter())
            .filter(|n| n.info.as_ref().is_ok_and(|info| !info.held))
            .count();
        if !held && free < needed {
            return Err(Error::NoQuorum(unknown(&nodes, free, needed)));
        }
        let owned = match (&holder_nodes, maybe_owned) {
            (Some(_), _) => Ok(true),
            (None, true) => Err(unknown(&nodes, free, needed)),
            (None, false) => Ok(false),
        };
        let fence = match &holder_nodes {
            Some(_) => match holder_fence(&nodes, needed) {
                Some(fence) => fence,
                None => {
                    let answered = nodes.len() - unanswered;
                    return Err(Error::NoQuorum(unknown(&nodes, answered, needed)));
                }
            },
            None => (nodes.iter())
                .filter_map(|n| n.info.as_ref().ok()?.fence)
                .max(),
        };
        let forced = (holder_nodes.as_ref())
            .is_some_and(|at| (nodes[at[0]].info.as_ref()).is_ok_and(|info| info.forced));
        let settling = holder_nodes.as_ref().map_or(mid_force, |at| {
            let fence_at = |node: &usize| nodes[*node].info.as_ref().ok().and_then(|i| i.fence);
            at.iter().map(fence_at).max().flatten() > fence
        });
        Ok(LockInfo {
            key: self.key.to_vec(),
            held,
            ttl,
            metadata,
            foreign,
            awaited,
            fence,
            nodes,
            owned,
            settling,
            forced,
        })
    }
}

/// Why what the nodes hold cannot be told: `agreed` of the `needed` nodes answered alike,
/// and these did not answer.
fn unknown(nodes: &[NodeInfo], agreed: usize, needed: usize) -> Box<QuorumFailure> {
    let failures = (nodes.iter())
        .filter_map(|n| {
            let error = n.info.as_ref().err()?.clone();
            Some(NodeFailure {
                node: n.node,
                error,
            })
        })
        .collect();
    QuorumFailure::undecided(agreed, needed, nodes.len(), failures)
}

/// The fence while an owner holds the key on a quorum, as far as the nodes that answered
/// can vouch for it; `None` when they cannot tell. Every fence handed out is stored on a
/// quorum (`durable_fence`; a fenced acquire stores its fence on every node that took the
/// claim), and only nodes outside one such quorum — fewer than a quorum — can be above the
/// latest: raised by a rival's failed try, or by a try of the holder's own that reached a
/// node late. So a value a quorum of the nodes store is the latest; and with every node
/// answering, the quorum-th highest counter is. That is the holder's own fence when it took
/// one, and the latest handed out when it took none, whose own nodes keep whatever earlier
/// holders left (their quorum-th highest was an older leader's term: simulator seed
/// 20265). With nodes silent, the latest lies between the quorum-th highest of the answers
/// and the (quorum − silent)-th: told only when the two are one.
fn holder_fence(nodes: &[NodeInfo], needed: usize) -> Option<Option<u64>> {
    let mut answered: Vec<Option<u64>> = (nodes.iter())
        .filter_map(|n| Some(n.info.as_ref().ok()?.fence))
        .collect();
    let stored_on_a_quorum = (answered.iter().flatten())
        .find(|&&fence| answered.iter().filter(|f| **f == Some(fence)).count() >= needed);
    if let Some(&fence) = stored_on_a_quorum {
        return Some(Some(fence));
    }
    let silent = nodes.len() - answered.len();
    // Highest first; a node without a counter last.
    answered.sort_unstable_by(|a, b| b.cmp(a));
    let nth_highest = |n: usize| answered.get(n.max(1) - 1).copied();
    let (at_least, at_most) = (
        nth_highest(needed)?,
        nth_highest(needed.saturating_sub(silent))?,
    );
    (at_least == at_most).then_some(at_least)
}

/// An owner's token as the nodes answered it: its metadata, and the TTL of its key on
/// each node that holds it, with those nodes' numbers.
type Owner = (Token, Option<String>, Vec<i64>, Vec<usize>);

/// How long an owner holding a key on a quorum keeps it: while a quorum of its nodes still
/// has it, the quorum-th longest TTL. (-1, no expiry, sorts as the longest.)
fn quorum_ttl(mut ttls: Vec<i64>, needed: usize) -> Option<Duration> {
    ttls.sort_by_key(|t| std::cmp::Reverse(if *t < 0 { i64::MAX } else { *t }));
    let ttl = u64::try_from(ttls[needed - 1]).ok();
    ttl.map(Duration::from_millis)
}

impl LockInfo {
    /// A free key, as nobody's reply showed it.
    pub(crate) fn free(key: &[u8]) -> LockInfo {
        LockInfo {
            key: key.to_vec(),
            held: false,
            ttl: None,
            metadata: None,
            foreign: false,
            awaited: false,
            fence: None,
            nodes: Vec::new(),
            owned: Ok(false),
            settling: false,
            forced: false,
        }
    }

    /// The key as text (invalid UTF-8 replaced).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// let locker = redmutex::Locker::in_memory().with_prefix("app:");
    /// let info = locker.inspect("job").await?;
    /// assert_eq!(info.key_lossy(), "app:job"); // as stored, with the prefix
    /// # Ok(()) }
    /// ```
    pub fn key_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.key)
    }
}
