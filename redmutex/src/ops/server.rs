//! [`Locker::check_server`]: whether the servers a locker uses are fit to hold locks —
//! their settings, read node by node (`check.rs`), and the permissions, tried by doing what
//! redmutex does with a probe lock and a probe subscription.

use std::time::Duration;

use crate::check::{self, Check, Finding, Level, ServerCheck};
use crate::connection::Connection;
use crate::fence::MIN_FENCE_RETENTION;
use crate::locker::Locker;
use crate::token::Token;

impl<C: Connection> Locker<C> {
    /// Checks whether the servers this locker uses are fit to hold locks, and says what
    /// to change where they are not (`redmutex doctor` prints the same):
    ///
    /// - **unsafe**: a `maxmemory-policy` other than `noeviction` — under memory pressure
    ///   the server deletes held locks and fence counters, and a rival takes a lock its
    ///   holder still believes it holds;
    /// - **warnings**: no persistence (a restart forgets every lock; on Redlock nodes, see
    ///   the keep-out rule), `appendfsync` short of `always` (a crash forgets the last
    ///   second), a replica instead of a master, a server older than 6.2, a cluster whose
    ///   state is not `ok`, an ACL user that lacks part of [`acl_rule`](crate::check::acl_rule);
    /// - **unknown**: what the ACL user may not read (`INFO`, `CONFIG GET`) — not a failure.
    ///
    /// The permissions are checked by doing what redmutex does: a probe lock under the
    /// locker's prefix (`redmutex-check:` and a random token) is taken with its fence,
    /// refreshed, inspected and released; its fence counter expires within a second. With
    /// [wake-up](Locker::with_wake_up), each subscriber client also subscribes to the probe
    /// key's channel once. Every request is bounded (2 s); a node that cannot be reached is
    /// reported, not an error.
    ///
    /// Without this, a locker still looks at the eviction policy once by itself, alongside
    /// its first acquire, and warns through `tracing` (`warn!`) when a node evicts.
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) {
    /// let check = locker.check_server().await;
    /// for finding in check.at(redmutex::check::Level::Unsafe) {
    ///     eprintln!("node {}: {}: {}", finding.node, finding.check.name(), finding.detail);
    /// }
    /// assert!(check.is_fit() || !check.findings.is_empty());
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// If cancelled, the probe lock may be left until its 10 s TTL runs out.
    pub async fn check_server(&self) -> ServerCheck {
        let redlock = self.nodes().len() > 1;
        let nodes = self.nodes().iter().enumerate();
        let per_node = nodes.map(|(node, conn)| check::node_findings(node, conn.clone(), redlock));
        let mut findings: Vec<Finding> = futures_util::future::join_all(per_node)
            .await
            .into_iter()
            .flatten()
            .collect();
        // A random name; should the OS have no randomness, the time tells probes apart.
        let unique = Token::generate().map_or_else(
            |_| format!("{:?}", std::time::SystemTime::now()),
            |token| token.to_string(),
        );
        let key = format!("redmutex-check:{unique}");
        findings.push(self.probe(&key).await);
        if let Some(hub) = &self.context.hub {
            let mut channel = self.prefix.to_vec();
            channel.extend_from_slice(key.as_bytes());
            for (node, outcome) in hub.probe(&channel).await.into_iter().enumerate() {
                findings.push(wake_up_finding(node, outcome));
            }
        }
        ServerCheck { findings }
    }

    /// Takes, fences, refreshes, inspects and releases a probe lock on `key`: whether the
    /// user may do what redmutex does.
    async fn probe(&self, key: &str) -> Finding {
        let probe = match self.clone().with_fence_retention(MIN_FENCE_RETENTION) {
            Ok(probe) => probe,
            Err(e) => {
                return check::finding(0, Check::Permissions, (Level::Unknown, e.to_string()))
            }
        };
        let ttl = Duration::from_secs(10);
        let outcome = async {
            let acquire = probe.acquire(key, ttl);
            let mut lock = match probe.fences() {
                true => acquire
                    .with_fence()
                    .await
                    .map_err(|e| ("take a fenced lock", e))?,
                false => acquire.await.map_err(|e| ("take a lock", e))?,
            };
            lock.refresh(ttl).await.map_err(|e| ("refresh it", e))?;
            probe.inspect(key).await.map_err(|e| ("inspect it", e))?;
            lock.release().await.map_err(|e| ("release it", e))
        };
        let verdict = match outcome.await {
            Ok(()) => (
                Level::Fine,
                format!("took, fenced, refreshed, inspected and released a probe lock ({key})"),
            ),
            Err((step, e)) if e.is_permission_denied() => (
                Level::Warning,
                format!(
                    "the user may not {step}: {e} (redmutex::check::acl_rule gives the rule it \
                     needs)"
                ),
            ),
            Err((step, e)) => (
                Level::Unknown,
                format!("could not {step} (a probe lock, {key}): {e}"),
            ),
        };
        check::finding(0, Check::Permissions, verdict)
    }
}

/// What a subscriber client's probe subscription says about wake-up on `node`.
fn wake_up_finding(node: usize, outcome: Result<(), redis::RedisError>) -> Finding {
    let verdict = match outcome {
        Ok(()) => (Level::Fine, "may subscribe".into()),
        Err(e) if crate::classify::is_no_permission(&e) => (
            Level::Warning,
            format!(
                "the subscriber may not subscribe to the keys' channels: {e}; waiters poll \
                 instead (redmutex::check::acl_rule gives +subscribe and the channels)"
            ),
        ),
        Err(e) => (Level::Unknown, format!("could not subscribe: {e}")),
    };
    check::finding(node, Check::WakeUp, verdict)
}
