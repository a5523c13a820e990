//! Redlock arithmetic: quorum size, clock drift, and how long a quorum lease is valid.
//!
//! A lease taken on a quorum of independent nodes is only as good as the time left on it
//! when the client learns that it has it. The client measures, on its monotonic clock,
//! from just before it sent the first request to when the quorum answered (`elapsed`),
//! and allows for the nodes' clocks running at a slightly different rate (`drift`):
//!
//! ```text
//! validity = ttl − elapsed − drift,   drift = ttl × drift_factor + fixed_drift
//! ```
//!
//! A lease is handed out only when a quorum (`n / 2 + 1`) agreed AND `validity` is
//! positive (and at least the caller's minimum).

use std::fmt;
use std::time::Duration;

/// How Redlock judges an attempt. See the module docs for the formulas.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
/// let settings = QuorumSettings::new().min_validity(Duration::from_secs(5));
/// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
/// let locker = Locker::redlock(nodes)?.with_quorum_settings(settings);
/// assert_eq!(locker.quorum_settings(), Some(&settings));
/// let lock = locker.acquire("billing", Duration::from_secs(30)).await?;
/// assert!(lock.remaining_validity() >= Duration::from_secs(5));
/// # lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuorumSettings {
    drift_factor: f64,
    fixed_drift: Duration,
    node_timeout: Option<Duration>,
    min_validity: Duration,
    every_node: bool,
}

impl Default for QuorumSettings {
    fn default() -> QuorumSettings {
        QuorumSettings {
            drift_factor: 0.01,
            fixed_drift: Duration::from_millis(2),
            node_timeout: None,
            min_validity: Duration::ZERO,
            every_node: false,
        }
    }
}

impl QuorumSettings {
    /// Defaults: drift = TTL × 0.01 + 2 ms; node timeout derived from the TTL; no
    /// minimum validity beyond "positive"; a plain acquire and a release decided by the
    /// first quorum to agree.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes)?.with_quorum_settings(QuorumSettings::new());
    /// let lock = locker.acquire("job", Duration::from_secs(10)).await?;
    /// // Trusted for 10 s less 100 ms + 2 ms of drift, less the time the quorum took.
    /// assert!(lock.remaining_validity() <= Duration::from_millis(9_898));
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn new() -> QuorumSettings {
        QuorumSettings::default()
    }

    /// The share of the TTL allowed for clock drift (default 0.01). Negative or NaN
    /// values count as 0; values above 1 as 1.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
    /// // Nodes on hosts whose clocks may run 5% apart.
    /// let settings = QuorumSettings::new().drift_factor(0.05);
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes)?.with_quorum_settings(settings);
    /// let lock = locker.acquire("job", Duration::from_secs(1)).await?;
    /// // 5% of 1 s, plus the 2 ms fixed part, less than the TTL.
    /// assert!(lock.remaining_validity() <= Duration::from_millis(948));
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn drift_factor(mut self, factor: f64) -> QuorumSettings {
        self.drift_factor = Drift::new(factor, Duration::ZERO).factor;
        self
    }

    /// The fixed part of the drift allowance (default 2 ms).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
    /// let settings = QuorumSettings::new().fixed_drift(Duration::from_millis(20)); // coarse clocks
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes)?.with_quorum_settings(settings);
    /// let lock = locker.acquire("job", Duration::from_secs(1)).await?;
    /// // 1% of 1 s, plus 20 ms, less than the TTL.
    /// assert!(lock.remaining_validity() <= Duration::from_millis(970));
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fixed_drift(mut self, drift: Duration) -> QuorumSettings {
        self.fixed_drift = drift;
        self
    }

    /// How long one node may take to answer one request; a slower node counts as failed
    /// for that attempt. Default: a twentieth of the TTL, between 10 ms and 500 ms — short
    /// next to the TTL, so that one dead node cannot eat the validity.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
    /// // Nodes across a slow link.
    /// let settings = QuorumSettings::new().node_timeout(Duration::from_millis(200));
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes)?.with_quorum_settings(settings);
    /// assert_eq!(locker.quorum_settings(), Some(&settings));
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> QuorumSettings {
        self.node_timeout = Some(timeout);
        self
    }

    /// Refuse leases with less validity left than this (default: any positive validity).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Error, Locker, QuorumSettings};
    /// let settings = QuorumSettings::new().min_validity(Duration::from_secs(5));
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes.clone())?.with_quorum_settings(settings);
    /// // A 2 s lease can never have 5 s left: the quorum agrees, but the lease is refused.
    /// let err = locker.acquire("job", Duration::from_secs(2)).await.unwrap_err();
    /// assert!(matches!(&err, Error::NoQuorum(f) if f.too_late && f.agreed == 3));
    /// assert!(nodes.iter().all(|node| node.keys().is_empty()), "undone on every node");
    /// # Ok(()) }
    /// ```
    pub fn min_validity(mut self, min: Duration) -> QuorumSettings {
        self.min_validity = min;
        self
    }

    /// Whether an acquire and a release wait for every node to answer or time out (`true`),
    /// or return as soon as a quorum agreed, as they do by default.
    ///
    /// By default a plain acquire (one key, unfenced, not waiting) is handed out once a
    /// quorum took it, and a release returns once a quorum deleted the lock: a frozen or
    /// slow minority costs them nothing. The slower nodes are sent the same request all
    /// the same, and this process hears them in the background; when a call returns, those
    /// nodes may not have it yet. Set `true` where a token leaves the process at once
    /// ([`Lock::detach`](crate::Lock::detach) handed to a process that may release it right
    /// away, as the command line does): a release from elsewhere could otherwise reach a
    /// slow node before the acquire does, and the key would stay there until its TTL
    /// (docs/SAFETY.md, "Networks").
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Locker, QuorumSettings};
    /// // The token is handed to another process: every node has the lock when it leaves.
    /// let settings = QuorumSettings::new().wait_for_every_node(true);
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes.clone())?.with_quorum_settings(settings);
    /// let token = locker.acquire("nightly", Duration::from_secs(60)).await?.detach();
    /// assert!(nodes.iter().all(|node| node.ttl("nightly").is_some()));
    /// # let _ = token;
    /// # Ok(()) }
    /// ```
    pub fn wait_for_every_node(mut self, yes: bool) -> QuorumSettings {
        self.every_node = yes;
        self
    }

    /// Whether a quorum decides an acquire or a release without the slower nodes (see
    /// [`wait_for_every_node`](QuorumSettings::wait_for_every_node)).
    pub(crate) fn quorum_decides(&self) -> bool {
        !self.every_node
    }

    /// The clock-drift allowance for `ttl`.
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        self.allowance().of(ttl)
    }

    /// The drift part of the settings.
    pub(crate) fn allowance(&self) -> Drift {
        Drift {
            factor: self.drift_factor,
            fixed: self.fixed_drift,
        }
    }

    /// The timeout for one node's answer, for a lease of `ttl`.
    pub(crate) fn timeout_for(&self, ttl: Duration) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| default_node_timeout(ttl))
    }

    /// The validity left of a lease of `ttl` that took `elapsed` to obtain, or `None` when
    /// it is not positive or below the minimum: such a lease must not be handed out.
    pub(crate) fn validity(&self, ttl: Duration, elapsed: Duration) -> Option<Duration> {
        let left = ttl.checked_sub(elapsed)?.checked_sub(self.drift(ttl))?;
        (!left.is_zero() && left >= self.min_validity).then_some(left)
    }
}

/// A clock-drift allowance, `ttl × factor + fixed`: how much less than its TTL a claim is
/// trusted for, because the server's clock may run faster than the client's (see
/// docs/SAFETY.md, "The holder's validity"). One rule for one node and for Redlock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Drift {
    pub(crate) factor: f64,
    pub(crate) fixed: Duration,
}

impl Drift {
    /// One node's default: 1 % of the TTL. Clocks that NTP disciplines differ in rate by
    /// well under 0.1 %; 1 % also covers a host whose clock is not disciplined at all (a
    /// VM's, typically 0.01–0.5 %). No fixed part: a server keeps a key through the last
    /// millisecond of its expiry, which already makes up for its clock counting in whole
    /// milliseconds. (Redlock's default keeps its 2 ms, as the algorithm states it.)
    pub(crate) const ONE_NODE: Drift = Drift {
        factor: 0.01,
        fixed: Duration::ZERO,
    };

    /// `factor` as [`QuorumSettings::drift_factor`] takes it: NaN as 0, within 0..=1.
    pub(crate) fn new(factor: f64, fixed: Duration) -> Drift {
        let factor = if factor.is_nan() {
            0.0
        } else {
            factor.clamp(0.0, 1.0)
        };
        Drift { factor, fixed }
    }

    /// The allowance for a claim of `ttl`.
    pub(crate) fn of(&self, ttl: Duration) -> Duration {
        let proportional =
            Duration::try_from_secs_f64(ttl.as_secs_f64() * self.factor).unwrap_or(Duration::MAX);
        proportional.saturating_add(self.fixed)
    }

    /// How long a server must be told to keep a claim for it to last `left` by this
    /// client's clock: `left` and its allowance (a minimum hold, kept at least as long as
    /// promised even by a server clock that runs fast).
    pub(crate) fn keep(&self, left: Duration) -> Duration {
        left.saturating_add(self.of(left))
    }
}

/// How many of `nodes` make a quorum: a strict majority.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Whether `count` of `nodes` nodes are too many to leave `needed` among the others: e.g.
/// nodes that hold a lock for someone else, so that nobody else can gather a quorum.
pub(crate) fn blocks_quorum(count: usize, nodes: usize, needed: usize) -> bool {
    count > nodes - needed
}

/// A twentieth of the TTL, between 10 ms and 500 ms: short next to the TTL, so that one
/// dead node cannot eat the validity, yet long enough for a healthy node on a slow link.
pub(crate) fn default_node_timeout(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

/// Why one node did not agree, in a [`QuorumFailure`].
///
/// ```
/// use std::time::Duration;
/// use redmutex::error::NodeError;
/// let advice = |error: &NodeError| match error {
///     NodeError::Held => "wait for its owner",
///     NodeError::NotHeld => "stop the work",
///     _ if error.is_unreachable() => "check the node",
///     _ => "look closer",
/// };
/// assert_eq!(advice(&NodeError::TimedOut(Duration::from_millis(50))), "check the node");
/// assert_eq!(NodeError::Held.to_string(), "held by another owner");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NodeError {
    /// Another owner holds the lock on this node (acquire).
    Held,
    /// This owner's lock is no longer on this node: it expired, was deleted or was taken
    /// over (refresh, release).
    NotHeld,
    /// The node did not answer within its timeout (paused, overloaded, or a slow link).
    TimedOut(Duration),
    /// The node answered with an error or could not be reached.
    Redis(redis::RedisError),
}

impl NodeError {
    /// The node could not be asked (timeout or Redis error), as opposed to answering
    /// "held" or "not held".
    ///
    /// ```
    /// use std::time::Duration;
    /// use redmutex::error::NodeError;
    /// let refused: redis::RedisError =
    ///     std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
    /// assert!(NodeError::Redis(refused).is_unreachable());
    /// assert!(NodeError::TimedOut(Duration::from_millis(50)).is_unreachable());
    /// assert!(!NodeError::Held.is_unreachable() && !NodeError::NotHeld.is_unreachable());
    /// ```
    pub fn is_unreachable(&self) -> bool {
        matches!(self, NodeError::TimedOut(_) | NodeError::Redis(_))
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Held => f.write_str("held by another owner"),
            NodeError::NotHeld => f.write_str("not held by this owner"),
            NodeError::TimedOut(t) => write!(f, "no answer within {t:?}"),
            NodeError::Redis(e) => write!(f, "{e}"),
        }
    }
}

/// One node that did not agree.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{memory::MemoryRedis, Error, Locker, error::NodeError};
/// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
/// let locker = Locker::redlock(nodes.clone())?;
/// nodes[1].take_over("job", Duration::from_secs(60)); // another owner on nodes 1 and 2
/// nodes[2].take_over("job", Duration::from_secs(60));
/// let Err(Error::NotObtained(why)) = locker.acquire("job", Duration::from_secs(30)).await else {
///     panic!("held by another owner")
/// };
/// let failures = why.no_quorum.expect("a Redlock try").failures;
/// assert_eq!(failures.iter().map(|f| f.node).collect::<Vec<_>>(), [1, 2]);
/// assert!(failures.iter().all(|f| f.error == NodeError::Held));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NodeFailure {
    /// The node's position in the list the locker was built from (0-based).
    pub node: usize,
    /// What went wrong there.
    pub error: NodeError,
}

/// A quorum operation that did not get its quorum: how many nodes agreed, how many were
/// needed, and why each other node did not agree.
///
/// [`held`](QuorumFailure::held) tells "someone else holds it" (wait and retry) from
/// [`unreachable`](QuorumFailure::unreachable) "the nodes could not be asked" (an outage).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{memory::MemoryRedis, Error, Locker};
/// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
/// let locker = Locker::redlock(nodes.clone())?;
/// # // The first acquire loads the script and has the servers looked at, in a task of its own.
/// # locker.acquire("warm-up", Duration::from_secs(1)).await?.release().await?;
/// # tokio::task::yield_now().await;
/// nodes[0].take_over("job", Duration::from_secs(60)); // a stale key on node 0
/// nodes[1].fail_next(1); // node 1 down
/// let tried = locker.acquire("job", Duration::from_secs(30)).await;
/// let Err(Error::NoQuorum(failure)) = tried else { panic!("no quorum") };
/// assert_eq!((failure.agreed, failure.needed, failure.nodes), (1, 2, 3));
/// assert_eq!((failure.held(), failure.unreachable()), (1, 1)); // an outage, not "held"
/// let text = failure.to_string();
/// assert!(text.starts_with("no quorum: 1 of 3 nodes agreed, 2 needed (node 0: held"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QuorumFailure {
    /// Nodes that agreed (acquired, refreshed or released). An acquire is decided as soon
    /// as a quorum took the lock, without waiting for the slower nodes: when it then fails
    /// [`too_late`](QuorumFailure::too_late), this counts the nodes heard by then.
    pub agreed: usize,
    /// Nodes needed: a strict majority of [`nodes`](QuorumFailure::nodes).
    pub needed: usize,
    /// Nodes in all.
    pub nodes: usize,
    /// A quorum agreed, but too late: the time it took left no validity (or less than the
    /// minimum), so the result was not used.
    pub too_late: bool,
    /// Time the attempt took, on this client's monotonic clock.
    pub elapsed: Duration,
    /// Each node that did not agree, in node order (of those heard, when a quorum agreed
    /// before every node answered).
    pub failures: Vec<NodeFailure>,
}

impl QuorumFailure {
    /// A read whose answers cannot tell what the nodes hold: `agreed` of the `needed`
    /// nodes answered alike, and `failures` did not answer.
    pub(crate) fn undecided(
        agreed: usize,
        needed: usize,
        nodes: usize,
        failures: Vec<NodeFailure>,
    ) -> Box<QuorumFailure> {
        Box::new(QuorumFailure::untimed(agreed, needed, nodes, failures))
    }

    /// `agreed` of the `needed` nodes (of `nodes`) agreed, and `failures` did not, with no
    /// time measured: what the nodes still out once a quorum decided came to, say.
    pub(crate) fn untimed(
        agreed: usize,
        needed: usize,
        nodes: usize,
        failures: Vec<NodeFailure>,
    ) -> QuorumFailure {
        QuorumFailure {
            agreed,
            needed,
            nodes,
            too_late: false,
            elapsed: Duration::ZERO,
            failures,
        }
    }

    /// How many nodes answered that another owner holds the lock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Error, Locker};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let (a, b) = (Locker::redlock(nodes.clone())?, Locker::redlock(nodes.clone())?);
    /// let lock = a.acquire("job", Duration::from_secs(30)).await?;
    /// let Err(Error::NotObtained(why)) = b.acquire("job", Duration::from_secs(30)).await else {
    ///     panic!("held by a")
    /// };
    /// assert_eq!(why.no_quorum.expect("a Redlock try").held(), 3);
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn held(&self) -> usize {
        self.count(|e| matches!(e, NodeError::Held))
    }

    /// How many nodes answered that this owner's lock is gone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Error, Locker};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes.clone())?;
    /// # // The first acquire loads the script and has the servers looked at, in a task of its own.
    /// # locker.acquire("warm-up", Duration::from_secs(1)).await?.release().await?;
    /// # tokio::task::yield_now().await;
    /// let mut lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// nodes[0].expire_now("job"); // gone on node 0
    /// nodes[1].fail_next(1); // node 1 does not answer the refresh
    /// let Err(Error::NoQuorum(failure)) = lock.refresh(Duration::from_secs(30)).await else {
    ///     panic!("no quorum")
    /// };
    /// assert_eq!((failure.agreed, failure.not_held(), failure.unreachable()), (1, 1, 1));
    /// # Ok(()) }
    /// ```
    pub fn not_held(&self) -> usize {
        self.count(|e| matches!(e, NodeError::NotHeld))
    }

    /// How many nodes timed out or failed with an error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Error, Locker};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes.clone())?;
    /// # // The first acquire loads the script and has the servers looked at, in a task of its own.
    /// # locker.acquire("warm-up", Duration::from_secs(1)).await?.release().await?;
    /// # tokio::task::yield_now().await;
    /// nodes[1].fail_next(1);
    /// nodes[2].fail_next(1);
    /// let tried = locker.acquire("job", Duration::from_secs(30)).await;
    /// let Err(Error::NoQuorum(failure)) = tried else { panic!("no quorum") };
    /// assert_eq!((failure.agreed, failure.unreachable(), failure.held()), (1, 2, 0));
    /// # Ok(()) }
    /// ```
    pub fn unreachable(&self) -> usize {
        self.count(NodeError::is_unreachable)
    }

    /// So many nodes refused for good (authentication, permission — errors that retrying
    /// cannot change) that no quorum can ever agree: retrying is futile.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Error, Locker};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes.clone())?;
    /// # // The first acquire loads the script and has the servers looked at, in a task of its own.
    /// # locker.acquire("warm-up", Duration::from_secs(1)).await?.release().await?;
    /// # tokio::task::yield_now().await;
    /// nodes[1].fail_next(1); // a dropped connection: it may be back for the next try
    /// nodes[2].fail_next(1);
    /// let tried = locker.acquire("job", Duration::from_secs(30)).await;
    /// let Err(Error::NoQuorum(failure)) = tried else { panic!("no quorum") };
    /// assert!(!failure.is_refused_for_good());
    /// assert!(Error::NoQuorum(failure).is_transient(), "worth retrying");
    /// # Ok(()) }
    /// ```
    pub fn is_refused_for_good(&self) -> bool {
        let refusing = self
            .count(|e| matches!(e, NodeError::Redis(e) if !crate::classify::is_transient_redis(e)));
        self.blocks(refusing)
    }

    /// So many nodes answered "not held" that no quorum can hold this owner's lock: the
    /// lock is lost, not merely unreachable.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// use redmutex::{memory::MemoryRedis, Error, Locker};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes.clone())?;
    /// # // The first acquire loads the script and has the servers looked at, in a task of its own.
    /// # locker.acquire("warm-up", Duration::from_secs(1)).await?.release().await?;
    /// # tokio::task::yield_now().await;
    /// let mut lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// nodes[0].expire_now("job");
    /// nodes[1].fail_next(1);
    /// let Err(Error::NoQuorum(failure)) = lock.refresh(Duration::from_secs(30)).await else {
    ///     panic!("no quorum")
    /// };
    /// assert!(!failure.is_lost(), "node 1 may still hold it");
    /// nodes[1].expire_now("job"); // now two of three have lost it: nobody can hold a quorum
    /// assert!(lock.refresh(Duration::from_secs(30)).await.unwrap_err().is_not_held());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.blocks(self.not_held())
    }

    /// Whether `count` nodes are too many to leave a quorum among the others.
    pub(crate) fn blocks(&self, count: usize) -> bool {
        blocks_quorum(count, self.nodes, self.needed)
    }

    fn count(&self, what: impl Fn(&NodeError) -> bool) -> usize {
        self.failures.iter().filter(|f| what(&f.error)).count()
    }
}

impl fmt::Display for QuorumFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.too_late {
            write!(
                f,
                "no quorum in time: {} of {} nodes agreed ({} needed) but only after {:?}, \
                 which left no validity (or less than the required minimum)",
                self.agreed, self.nodes, self.needed, self.elapsed
            )?;
        } else {
            write!(
                f,
                "no quorum: {} of {} nodes agreed, {} needed",
                self.agreed, self.nodes, self.needed
            )?;
        }
        for (i, failure) in self.failures.iter().enumerate() {
            let sep = if i == 0 { " (" } else { "; " };
            write!(f, "{sep}node {}: {}", failure.node, failure.error)?;
        }
        if !self.failures.is_empty() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl std::error::Error for QuorumFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_quorum_is_a_strict_majority_and_each_node_has_a_twentieth_of_the_ttl() {
        assert_eq!(quorum(5), 3); // five nodes survive the loss of two
        assert_eq!(quorum(4), 3); // an even count buys nothing: four also survive only one
        assert_eq!(quorum(1), 1);
        assert_eq!(default_node_timeout(ms(2000)), ms(100));
        assert_eq!(default_node_timeout(ms(100)), ms(10)); // not below 10 ms
        assert_eq!(default_node_timeout(ms(60_000)), ms(500)); // nor above 500 ms
        assert_eq!(QuorumSettings::new().timeout_for(ms(4000)), ms(200));
        let fixed = QuorumSettings::new().node_timeout(ms(75));
        assert_eq!(fixed.timeout_for(ms(4000)), ms(75));
    }

    #[test]
    fn validity_is_the_ttl_less_the_time_taken_and_the_drift() {
        let settings = QuorumSettings::new();
        // A 30 s lease is trusted for 300 ms + 2 ms less than its TTL.
        assert_eq!(settings.drift(ms(30_000)), ms(302));
        // 10 s − 50 ms taken − 102 ms drift.
        assert_eq!(settings.validity(ms(10_000), ms(50)), Some(ms(9848)));
        assert_eq!(settings.validity(ms(1000), ms(988)), None, "nothing left");
        let floor = settings.min_validity(ms(500));
        assert_eq!(floor.validity(ms(1000), ms(489)), None);
    }

    fn failure(errors: &[NodeError], agreed: usize) -> QuorumFailure {
        QuorumFailure {
            agreed,
            needed: quorum(5),
            nodes: 5,
            too_late: false,
            elapsed: ms(3),
            failures: errors
                .iter()
                .enumerate()
                .map(|(node, error)| NodeFailure {
                    node,
                    error: error.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn failures_tell_held_from_unreachable_and_lost() {
        let refused: redis::RedisError =
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        let held = failure(
            &[NodeError::Held, NodeError::Held, NodeError::TimedOut(ms(5))],
            2,
        );
        assert_eq!(
            (held.held(), held.unreachable(), held.not_held()),
            (2, 1, 0)
        );
        assert!(!held.is_lost());
        let down = failure(
            &[
                NodeError::Redis(refused.clone()),
                NodeError::Redis(refused),
                NodeError::TimedOut(ms(5)),
            ],
            2,
        );
        assert_eq!((down.held(), down.unreachable()), (0, 3));
        assert!(!down.is_lost(), "unreachable is not lost");
        // With 5 nodes and a quorum of 3, two "not held" answers leave a quorum possible;
        // three do not.
        assert!(!failure(&[NodeError::NotHeld, NodeError::NotHeld], 3).is_lost());
        assert!(failure(
            &[NodeError::NotHeld, NodeError::NotHeld, NodeError::NotHeld],
            2
        )
        .is_lost());
        let text = held.to_string();
        assert!(
            text.starts_with("no quorum: 2 of 5 nodes agreed, 3 needed (node 0: held"),
            "{text}"
        );
        assert!(text.contains("node 2: no answer within 5ms"), "{text}");
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        let got: Vec<usize> = (1..=7).map(quorum).collect();
        assert_eq!(got, [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        let q = QuorumSettings::new();
        assert_eq!(q.drift(ms(10_000)), ms(102));
        assert_eq!(q.drift(ms(1000)), ms(12));
        assert_eq!(q.drift(ms(1)), Duration::from_micros(2010));
        // Absurd TTLs saturate instead of panicking.
        assert!(q.drift(Duration::MAX) > Duration::from_secs(1 << 57));
        assert_eq!(
            QuorumSettings::new().drift_factor(1.0).drift(Duration::MAX),
            Duration::MAX
        );
        let custom = QuorumSettings::new().drift_factor(0.1).fixed_drift(ms(5));
        assert_eq!(custom.drift(ms(1000)), ms(105));
        assert_eq!(
            QuorumSettings::new().drift_factor(f64::NAN).drift(ms(1000)),
            ms(2)
        );
        assert_eq!(
            QuorumSettings::new().drift_factor(-1.0).drift(ms(1000)),
            ms(2)
        );
    }

    #[test]
    fn validity_exact_values() {
        let q = QuorumSettings::new();
        assert_eq!(q.validity(ms(10_000), ms(50)), Some(ms(9848)));
        assert_eq!(q.validity(ms(1000), ms(0)), Some(ms(988)));
        assert_eq!(q.validity(ms(1000), ms(987)), Some(ms(1)));
        assert_eq!(q.validity(ms(1000), ms(988)), None, "zero is not positive");
        assert_eq!(q.validity(ms(1000), ms(5000)), None, "no underflow");
    }

    #[test]
    fn tiny_ttls_never_underflow() {
        let q = QuorumSettings::new();
        for ttl in [ms(1), ms(2), Duration::from_micros(2010)] {
            assert_eq!(
                q.validity(ttl, Duration::ZERO),
                None,
                "{ttl:?} is all drift"
            );
        }
        assert_eq!(
            q.validity(ms(3), Duration::ZERO),
            Some(Duration::from_micros(970))
        );
    }

    #[test]
    fn minimum_validity() {
        let q = QuorumSettings::new().min_validity(ms(500));
        assert_eq!(q.validity(ms(1000), ms(488)), Some(ms(500)));
        assert_eq!(q.validity(ms(1000), ms(489)), None);
    }

    #[test]
    fn node_timeouts() {
        assert_eq!(default_node_timeout(ms(100)), ms(10));
        assert_eq!(default_node_timeout(ms(1000)), ms(50));
        assert_eq!(default_node_timeout(ms(30_000)), ms(500));
        assert_eq!(QuorumSettings::new().timeout_for(ms(1000)), ms(50));
        assert_eq!(
            QuorumSettings::new()
                .node_timeout(ms(7))
                .timeout_for(ms(1000)),
            ms(7)
        );
    }
}
