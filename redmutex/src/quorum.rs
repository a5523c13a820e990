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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuorumSettings {
    drift_factor: f64,
    fixed_drift: Duration,
    node_timeout: Option<Duration>,
    min_validity: Duration,
}

impl Default for QuorumSettings {
    fn default() -> QuorumSettings {
        QuorumSettings {
            drift_factor: 0.01,
            fixed_drift: Duration::from_millis(2),
            node_timeout: None,
            min_validity: Duration::ZERO,
        }
    }
}

impl QuorumSettings {
    /// Defaults: drift = TTL × 0.01 + 2 ms; node timeout derived from the TTL; no
    /// minimum validity beyond "positive".
    pub fn new() -> QuorumSettings {
        QuorumSettings::default()
    }

    /// The share of the TTL allowed for clock drift (default 0.01). Negative or NaN
    /// values count as 0; values above 1 as 1.
    pub fn drift_factor(mut self, factor: f64) -> QuorumSettings {
        self.drift_factor = if factor.is_nan() {
            0.0
        } else {
            factor.clamp(0.0, 1.0)
        };
        self
    }

    /// The fixed part of the drift allowance (default 2 ms).
    pub fn fixed_drift(mut self, drift: Duration) -> QuorumSettings {
        self.fixed_drift = drift;
        self
    }

    /// How long one node may take to answer one request; a slower node counts as failed
    /// for that attempt. Default: [`default_node_timeout`] of the TTL.
    pub fn node_timeout(mut self, timeout: Duration) -> QuorumSettings {
        self.node_timeout = Some(timeout);
        self
    }

    /// Refuse leases with less validity left than this (default: any positive validity).
    pub fn min_validity(mut self, min: Duration) -> QuorumSettings {
        self.min_validity = min;
        self
    }

    /// The clock-drift allowance for `ttl`.
    pub fn drift(&self, ttl: Duration) -> Duration {
        let proportional = Duration::try_from_secs_f64(ttl.as_secs_f64() * self.drift_factor)
            .unwrap_or(Duration::MAX);
        proportional.saturating_add(self.fixed_drift)
    }

    /// The timeout for one node's answer, for a lease of `ttl`.
    pub fn timeout_for(&self, ttl: Duration) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| default_node_timeout(ttl))
    }

    /// The validity left of a lease of `ttl` that took `elapsed` to obtain, or `None` when
    /// it is not positive or below the minimum: such a lease must not be handed out.
    pub fn validity(&self, ttl: Duration, elapsed: Duration) -> Option<Duration> {
        let left = ttl.checked_sub(elapsed)?.checked_sub(self.drift(ttl))?;
        (!left.is_zero() && left >= self.min_validity).then_some(left)
    }
}

/// How many of `nodes` make a quorum: a strict majority.
pub fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Whether `count` of `nodes` nodes are too many to leave `needed` among the others: e.g.
/// nodes that hold a lock for someone else, so that nobody else can gather a quorum.
pub(crate) fn blocks_quorum(count: usize, nodes: usize, needed: usize) -> bool {
    count > nodes - needed
}

/// A twentieth of the TTL, between 10 ms and 500 ms: short next to the TTL, so that one
/// dead node cannot eat the validity, yet long enough for a healthy node on a slow link.
pub fn default_node_timeout(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

/// Why one node did not agree, in a [`QuorumFailure`].
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
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QuorumFailure {
    /// Nodes that agreed (acquired, refreshed or released).
    pub agreed: usize,
    /// Nodes needed: [`quorum`] of [`nodes`](QuorumFailure::nodes).
    pub needed: usize,
    /// Nodes in all.
    pub nodes: usize,
    /// A quorum agreed, but too late: the time it took left no validity (or less than the
    /// minimum), so the result was not used.
    pub too_late: bool,
    /// Time the attempt took, on this client's monotonic clock.
    pub elapsed: Duration,
    /// Each node that did not agree, in node order.
    pub failures: Vec<NodeFailure>,
}

impl QuorumFailure {
    /// How many nodes answered that another owner holds the lock.
    pub fn held(&self) -> usize {
        self.count(|e| matches!(e, NodeError::Held))
    }

    /// How many nodes answered that this owner's lock is gone.
    pub fn not_held(&self) -> usize {
        self.count(|e| matches!(e, NodeError::NotHeld))
    }

    /// How many nodes timed out or failed with an error.
    pub fn unreachable(&self) -> usize {
        self.count(NodeError::is_unreachable)
    }

    /// So many nodes refused for good (authentication, permission — errors that retrying
    /// cannot change) that no quorum can ever agree: retrying is futile.
    pub fn is_refused_for_good(&self) -> bool {
        let refusing = self
            .count(|e| matches!(e, NodeError::Redis(e) if !crate::classify::is_transient_redis(e)));
        self.blocks(refusing)
    }

    /// So many nodes answered "not held" that no quorum can hold this owner's lock: the
    /// lock is lost, not merely unreachable.
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
