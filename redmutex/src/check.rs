//! Is a server fit to hold locks? What [`Locker::check_server`](crate::Locker::check_server)
//! and `redmutex doctor` look at, and the one look every locker takes by itself: a server
//! that evicts keys under memory pressure deletes locks and fence counters while they are
//! held, so the first acquire of a locker has the eviction policy read (in a task of its
//! own: no acquire waits for it, no later one repeats it) and warned of through `tracing`.
//! Beside it, the ACL rule a locker's Redis user needs ([`acl_rule`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Value;

use crate::connection::Connection;

pub use crate::acl::acl_rule;

/// How long one request of a check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What [`Locker::check_server`](crate::Locker::check_server) found: one finding per
/// check and node, fine ones included.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let locker = redmutex::Locker::in_memory();
/// let check = locker.check_server().await;
/// for finding in &check.findings {
///     println!("node {} {}: {}", finding.node, finding.check.name(), finding.detail);
/// }
/// assert!(check.reached_any() && check.is_fit());
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerCheck {
    /// Every finding, node by node.
    pub findings: Vec<Finding>,
}

impl ServerCheck {
    /// No finding makes locks unsafe (warnings and checks that could not be made aside).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let locker = redmutex::Locker::in_memory();
    /// use redmutex::check::Level;
    /// let check = locker.check_server().await;
    /// // The in-memory server never evicts, but keeps nothing on disk: fit, with a warning.
    /// assert!(check.is_fit());
    /// assert_eq!(check.at(Level::Unsafe).count(), 0);
    /// assert!(check.at(Level::Warning).count() > 0);
    /// # }
    /// ```
    pub fn is_fit(&self) -> bool {
        !self.findings.iter().any(|f| f.level == Level::Unsafe)
    }

    /// Some node answered at all.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use redmutex::{memory::MemoryRedis, check::Check, Locker};
    /// let nodes = [MemoryRedis::new(), MemoryRedis::new(), MemoryRedis::new()];
    /// let locker = Locker::redlock(nodes.clone())?;
    /// nodes[2].fail_next(u64::MAX); // node 2 is down
    /// let check = locker.check_server().await;
    /// assert!(check.reached_any());
    /// assert!(check.findings.iter().any(|f| f.node == 2 && f.check == Check::Reachable));
    /// nodes[0].fail_next(u64::MAX);
    /// nodes[1].fail_next(u64::MAX); // all of them are
    /// assert!(!locker.check_server().await.reached_any());
    /// # Ok(()) }
    /// ```
    pub fn reached_any(&self) -> bool {
        let nodes: std::collections::BTreeSet<usize> =
            self.findings.iter().map(|f| f.node).collect();
        nodes.iter().any(|node| {
            !self
                .findings
                .iter()
                .any(|f| f.node == *node && f.check == Check::Reachable)
        })
    }

    /// The findings at `level`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let locker = redmutex::Locker::in_memory();
    /// use redmutex::{check::Check, check::Level};
    /// let check = locker.check_server().await;
    /// let warned: Vec<Check> = check.at(Level::Warning).map(|f| f.check).collect();
    /// assert_eq!(warned, [Check::Persistence]); // the in-memory server keeps nothing on disk
    /// # }
    /// ```
    pub fn at(&self, level: Level) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.level == level)
    }
}

/// One thing [`ServerCheck`] looked at, on one node.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let locker = redmutex::Locker::in_memory();
/// use redmutex::{check::Check, check::Level};
/// let check = locker.check_server().await;
/// let eviction = check.findings.iter().find(|f| f.check == Check::Eviction).unwrap();
/// assert_eq!((eviction.node, eviction.level), (0, Level::Fine));
/// assert_eq!(eviction.detail, "noeviction");
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// The node's position among the locker's nodes (0 for a single node or a cluster;
    /// a cluster member's address is in the detail).
    pub node: usize,
    /// What was checked.
    pub check: Check,
    /// How it affects locks.
    pub level: Level,
    /// What was found and, when it is not fine, what to do.
    pub detail: String,
}

/// What a [`Finding`] is about.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let locker = redmutex::Locker::in_memory();
/// use redmutex::check::Check;
/// let check = locker.check_server().await;
/// let checked: Vec<Check> = check.findings.iter().map(|f| f.check).collect();
/// assert!(checked.contains(&Check::Eviction) && checked.contains(&Check::Permissions));
/// assert!(!checked.contains(&Check::Reachable), "it answered");
/// assert!(!checked.contains(&Check::Cluster), "not a cluster");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Check {
    /// The node answers at all (only reported when it does not).
    Reachable,
    /// The server's name and version (redmutex is tested on Redis 6.2, 7.0 and Valkey 8.1).
    Version,
    /// `maxmemory-policy`: anything but `noeviction` may delete held locks.
    Eviction,
    /// AOF or RDB: without either, a restart forgets every lock.
    Persistence,
    /// `appendfsync`: short of `always`, a crash can forget the last second of locks.
    Fsync,
    /// Master or replica: locks belong on a master.
    Role,
    /// `cluster_state` of a cluster node.
    Cluster,
    /// The ACL user may do what redmutex does (a probe lock, see
    /// [`Locker::check_server`](crate::Locker::check_server)).
    Permissions,
    /// The wake-up subscriber may subscribe (when wake-up is on).
    WakeUp,
}

impl Check {
    /// A short name: `maxmemory-policy`, `appendfsync`, … (as `redmutex doctor --json`
    /// prints it).
    ///
    /// ```
    /// use redmutex::check::Check;
    /// assert_eq!(Check::Eviction.name(), "maxmemory-policy");
    /// assert_eq!(Check::Fsync.name(), "appendfsync");
    /// assert_eq!(Check::WakeUp.name(), "wake-up");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Check::Reachable => "reachable",
            Check::Version => "version",
            Check::Eviction => "maxmemory-policy",
            Check::Persistence => "persistence",
            Check::Fsync => "appendfsync",
            Check::Role => "role",
            Check::Cluster => "cluster",
            Check::Permissions => "permissions",
            Check::WakeUp => "wake-up",
        }
    }
}

/// How a [`Finding`] affects locks.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let locker = redmutex::Locker::in_memory();
/// use redmutex::check::Level;
/// assert!(Level::Fine < Level::Unknown && Level::Warning < Level::Unsafe); // worse is greater
/// let check = locker.check_server().await;
/// let worst = check.findings.iter().map(|f| f.level).max();
/// assert_eq!(worst, Some(Level::Warning)); // no persistence on the in-memory server
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Level {
    /// Nothing to do.
    Fine,
    /// Could not be checked (e.g. the ACL user may not read the setting); not a failure.
    Unknown,
    /// Weakens a guarantee under some condition (see the detail and [`safety`](crate::safety)).
    Warning,
    /// Locks are not safe on this server as it is configured.
    Unsafe,
}

impl Level {
    /// `ok`, `unknown`, `warning` or `unsafe`.
    ///
    /// ```
    /// use redmutex::check::Level;
    /// assert_eq!(Level::Fine.name(), "ok");
    /// assert_eq!(Level::Unsafe.name(), "unsafe");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Level::Fine => "ok",
            Level::Unknown => "unknown",
            Level::Warning => "warning",
            Level::Unsafe => "unsafe",
        }
    }
}

/// A check's level and what it found, before it is told whose node and which check it is.
pub(crate) type Verdict = (Level, String);

pub(crate) fn finding(node: usize, check: Check, (level, detail): Verdict) -> Finding {
    Finding {
        node,
        check,
        level,
        detail,
    }
}

/// Runs `command` on `conn`, bounded by [`CHECK_TIMEOUT`].
async fn ask<C: Connection>(conn: &C, command: &redis::Cmd) -> Result<Value, String> {
    let mut conn = conn.clone();
    match tokio::time::timeout(CHECK_TIMEOUT, command.query_async::<Value>(&mut conn)).await {
        Ok(Ok(Value::ServerError(e))) => Err(e.to_string()),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}")),
    }
}

/// The texts of an `INFO` reply: one, or (from a cluster connection) one per node, with
/// its address.
fn info_texts(value: Value) -> Vec<(Option<String>, String)> {
    match value {
        Value::Map(members) => members
            .into_iter()
            .filter_map(|(addr, info)| {
                let addr = redis::from_redis_value::<String>(addr).ok();
                Some((addr, redis::from_redis_value::<String>(info).ok()?))
            })
            .collect(),
        other => redis::from_redis_value::<String>(other)
            .map(|text| vec![(None, text)])
            .unwrap_or_default(),
    }
}

/// The value of `field` in an `INFO` text (`field:value` lines).
fn info_field<'t>(text: &'t str, field: &str) -> Option<&'t str> {
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// The value of one `CONFIG GET` parameter (a two-element array, or a map in RESP3).
async fn config<C: Connection>(conn: &C, name: &str) -> Result<String, String> {
    let reply = ask(conn, redis::cmd("CONFIG").arg("GET").arg(name)).await?;
    let pairs: Vec<(String, String)> = match reply {
        Value::Map(_) => {
            redis::from_redis_value::<std::collections::HashMap<String, String>>(reply)
                .map(|map| map.into_iter().collect())
                .map_err(|e| e.to_string())?
        }
        other => {
            let flat: Vec<String> = redis::from_redis_value(other).map_err(|e| e.to_string())?;
            flat.chunks(2)
                .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
                .collect()
        }
    };
    pairs
        .into_iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value)
        .ok_or_else(|| format!("{name} is not a configuration parameter here"))
}

/// The eviction policy of each server behind `conn` (one, or each member of a cluster)
/// that can evict: a policy other than `noeviction` with a memory limit (`maxmemory` 0 is
/// none on 64-bit builds), from `INFO memory`.
async fn evicting_policies<C: Connection>(
    conn: &C,
) -> Result<Vec<(Option<String>, String)>, String> {
    let info = ask(conn, redis::cmd("INFO").arg("memory")).await?;
    Ok(info_texts(info)
        .into_iter()
        .filter(|(_, text)| info_field(text, "maxmemory") != Some("0"))
        .filter_map(|(addr, text)| {
            let policy = info_field(&text, "maxmemory_policy")?;
            (policy != "noeviction").then(|| (addr, policy.to_owned()))
        })
        .collect())
}

/// Warns (once per locker) about each node that evicts keys. What cannot be read (an ACL
/// user without `INFO`) is passed over in silence: `redmutex doctor` says more.
pub(crate) async fn warn_if_evicting<C: Connection>(nodes: Vec<C>) {
    let looks = futures_util::future::join_all(nodes.iter().map(evicting_policies)).await;
    for (node, policies) in looks.into_iter().enumerate() {
        for (addr, policy) in policies.unwrap_or_default() {
            let at = addr.map(|a| format!(" ({a})")).unwrap_or_default();
            tracing::warn!(
                node,
                policy,
                "redmutex: node {node}{at} has maxmemory-policy {policy}: under memory \
                 pressure it evicts keys, lock keys and fence counters included, and a lock \
                 can pass to a rival while its holder still believes it holds it; set \
                 maxmemory-policy noeviction (docs/SAFETY.md, `redmutex doctor`)"
            );
        }
    }
}

/// Whether a locker has had its one look at the eviction policy yet; shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct EvictionWatch(AtomicBool);

impl EvictionWatch {
    /// True the first time only: the caller takes the look. Asked on every try, so it
    /// only reads once the look was taken (no write to a line all tasks share).
    pub(crate) fn first(&self) -> bool {
        !self.0.load(Ordering::Relaxed) && !self.0.swap(true, Ordering::Relaxed)
    }
}

/// The settings `INFO` does not show, from `CONFIG GET` (single servers only): each
/// name with its value, or why it could not be read.
type Settings = Vec<(&'static str, Result<String, String>)>;

/// The findings for one node of a locker (`redlock`: one of several independent nodes).
pub(crate) async fn node_findings<C: Connection>(
    node: usize,
    conn: C,
    redlock: bool,
) -> Vec<Finding> {
    if let Err(e) = ask(&conn, &redis::cmd("PING")).await {
        return vec![finding(
            node,
            Check::Reachable,
            (Level::Unknown, format!("could not reach it: {e}")),
        )];
    }
    let info = ask(&conn, &redis::cmd("INFO")).await.map(info_texts);
    let single = info.as_ref().is_ok_and(|texts| texts.len() == 1) || info.is_err();
    let mut settings = Settings::new();
    if single {
        for name in [
            "maxmemory-policy",
            "maxmemory",
            "appendonly",
            "appendfsync",
            "save",
        ] {
            settings.push((name, config(&conn, name).await));
        }
    }
    match &info {
        Ok(texts) => {
            let mut findings = Vec::new();
            for (addr, text) in texts {
                let (addr, text) = (addr.as_deref(), Ok(text.as_str()));
                findings.extend(server_findings(node, addr, text, &settings, redlock));
            }
            if texts
                .iter()
                .any(|(_, text)| info_field(text, "cluster_enabled") == Some("1"))
            {
                findings.push(cluster_finding(node, &conn).await);
            }
            findings
        }
        // What can be said without INFO: the configuration, if readable.
        Err(e) => server_findings(node, None, Err(e), &settings, redlock),
    }
}

/// A setting from `CONFIG GET`, if it could be read.
fn configured<'s>(settings: &'s Settings, name: &str) -> Option<&'s str> {
    settings
        .iter()
        .find(|(n, _)| *n == name)
        .and_then(|(_, value)| value.as_deref().ok())
}

/// Findings from one server's `INFO` text, or why there is none, and (for a single
/// server) its configuration, which wins where both say something.
fn server_findings(
    node: usize,
    addr: Option<&str>,
    info: Result<&str, &str>,
    settings: &Settings,
    redlock: bool,
) -> Vec<Finding> {
    let at = addr.map(|a| format!(" at {a}")).unwrap_or_default();
    let field = |name| info.ok().and_then(|text| info_field(text, name));
    let policy = configured(settings, "maxmemory-policy").or(field("maxmemory_policy"));
    let limit = configured(settings, "maxmemory").or(field("maxmemory"));
    let aof = configured(settings, "appendonly")
        .map(|v| v == "yes")
        .or(field("aof_enabled").map(|v| v == "1"));
    let (version, role) = match info {
        Ok(text) => (version(&at, text), role(&at, info_field(text, "role"))),
        Err(e) => {
            let unread = (Level::Unknown, format!("could not read INFO: {e}"));
            (unread.clone(), unread)
        }
    };
    vec![
        finding(node, Check::Version, version),
        finding(node, Check::Eviction, eviction(&at, policy, limit)),
        finding(node, Check::Role, role),
        finding(
            node,
            Check::Persistence,
            persistence(&at, aof, configured(settings, "save"), redlock),
        ),
        finding(
            node,
            Check::Fsync,
            fsync(&at, aof, configured(settings, "appendfsync")),
        ),
    ]
}

fn version(at: &str, info: &str) -> Verdict {
    let (name, version) = match info_field(info, "valkey_version") {
        Some(version) => ("Valkey", version),
        None => ("Redis", info_field(info, "redis_version").unwrap_or("?")),
    };
    let numbers: Vec<u32> = version.split('.').filter_map(|n| n.parse().ok()).collect();
    let old = name == "Redis" && numbers.len() >= 2 && (numbers[0], numbers[1]) < (6, 2);
    match old {
        true => (
            Level::Warning,
            format!("{name} {version}{at}: older than 6.2, which redmutex needs and is tested on"),
        ),
        false => (Level::Fine, format!("{name} {version}{at}")),
    }
}

/// `maxmemory-policy` (and `maxmemory`, the limit: 0 is none on 64-bit builds).
fn eviction(at: &str, policy: Option<&str>, limit: Option<&str>) -> Verdict {
    match policy {
        Some("noeviction") => (Level::Fine, format!("noeviction{at}")),
        Some(policy) if limit == Some("0") => (
            Level::Warning,
            format!(
                "{policy}{at}, but maxmemory is 0 (no limit): nothing is evicted now; should a \
                 limit be set, held locks and fence counters would be evicted — set \
                 maxmemory-policy noeviction"
            ),
        ),
        Some(policy) => (
            Level::Unsafe,
            format!(
                "{policy}{at}: under memory pressure the server evicts keys — held locks and \
                 fence counters included — and a rival can take a lock its holder still \
                 believes it holds; set maxmemory-policy noeviction (writes then fail with \
                 OOM instead, which redmutex reports as an error)"
            ),
        ),
        None => (
            Level::Unknown,
            format!("could not check maxmemory-policy{at}: neither CONFIG GET nor INFO is allowed"),
        ),
    }
}

fn role(at: &str, role: Option<&str>) -> Verdict {
    match role {
        Some("master") => (Level::Fine, format!("master{at}")),
        Some(role) => (
            Level::Warning,
            format!(
                "{role}{at}: a replica — acquires fail with READONLY, or (replica-read-only no) \
                 take locks the master never sees; connect to the master"
            ),
        ),
        None => (Level::Unknown, format!("no role in INFO{at}")),
    }
}

fn persistence(at: &str, aof: Option<bool>, save: Option<&str>, redlock: bool) -> Verdict {
    let rdb = save.map(|s| !s.trim().is_empty());
    let consequence = match redlock {
        true => {
            "a node that restarts comes back empty, and its vote with it: keep it out for \
                 at least the longest TTL before it rejoins, or turn on appendonly with \
                 appendfsync always"
        }
        false => {
            "a restart forgets every lock (and fence counter): another client can then \
                  take a lock that is still held"
        }
    };
    match (aof, rdb) {
        (Some(true), _) => (Level::Fine, format!("AOF{at}")),
        (_, Some(true)) => (
            Level::Warning,
            format!(
                "RDB snapshots only{at}: a restart loses the locks since the last one; \
                 {consequence}"
            ),
        ),
        (Some(false), Some(false)) => {
            (Level::Warning, format!("no persistence{at}: {consequence}"))
        }
        _ => (
            Level::Unknown,
            format!("could not check persistence{at}: CONFIG GET is not allowed"),
        ),
    }
}

fn fsync(at: &str, aof: Option<bool>, fsync: Option<&str>) -> Verdict {
    match (aof, fsync) {
        (Some(false), _) => (Level::Fine, format!("no AOF{at}")),
        (_, Some("always")) => (Level::Fine, format!("always{at}")),
        (Some(true), Some(fsync)) => (
            Level::Warning,
            format!(
                "{fsync}{at}: a crash (not a clean restart) can forget the locks of the last \
                 second; appendfsync always where that matters (Redlock nodes, docs/SAFETY.md)"
            ),
        ),
        _ => (
            Level::Unknown,
            format!("could not check appendfsync{at}: CONFIG GET is not allowed"),
        ),
    }
}

/// A cluster node's `cluster_state`.
async fn cluster_finding<C: Connection>(node: usize, conn: &C) -> Finding {
    let verdict = match ask(conn, redis::cmd("CLUSTER").arg("INFO"))
        .await
        .map(info_texts)
    {
        Ok(texts) => {
            let states: Vec<&str> = texts
                .iter()
                .filter_map(|(_, text)| info_field(text, "cluster_state"))
                .collect();
            match states.iter().all(|s| *s == "ok") && !states.is_empty() {
                true => (Level::Fine, "cluster_state ok".into()),
                false => (
                    Level::Warning,
                    format!(
                        "cluster_state {}: some slots are not served; locks on them fail",
                        states.join(", ")
                    ),
                ),
            }
        }
        Err(e) => (Level::Unknown, format!("could not read CLUSTER INFO: {e}")),
    };
    finding(node, Check::Cluster, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_by_name() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n# Memory\r\nmaxmemory_policy:allkeys-lru\r\n";
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "maxmemory_policy"), Some("allkeys-lru"));
        assert_eq!(info_field(info, "redis"), None, "whole names only");
    }

    #[test]
    fn versions_and_levels() {
        let old = version("", "redis_version:6.0.9\r\n");
        assert_eq!(old.0, Level::Warning);
        let valkey = version("", "redis_version:7.2.4\r\nvalkey_version:8.1.8\r\n");
        assert_eq!((valkey.0, valkey.1.as_str()), (Level::Fine, "Valkey 8.1.8"));
        let evicting = eviction("", Some("volatile-lru"), Some("104857600"));
        assert_eq!(evicting.0, Level::Unsafe);
        let unknown_limit = eviction("", Some("volatile-lru"), None);
        assert_eq!(unknown_limit.0, Level::Unsafe);
        let unlimited = eviction("", Some("allkeys-lru"), Some("0"));
        assert_eq!(unlimited.0, Level::Warning, "no limit, no eviction");
        let fit = eviction("", Some("noeviction"), Some("0"));
        assert_eq!(fit.0, Level::Fine);
        assert_eq!(eviction("", None, None).0, Level::Unknown);
        assert_eq!(
            persistence("", Some(false), Some(""), true).0,
            Level::Warning
        );
        assert_eq!(persistence("", None, None, false).0, Level::Unknown);
        assert_eq!(fsync("", Some(true), Some("everysec")).0, Level::Warning);
        assert_eq!(fsync("", Some(false), None).0, Level::Fine);
        let check = ServerCheck {
            findings: vec![
                finding(0, Check::Reachable, (Level::Unknown, String::new())),
                finding(1, Check::Eviction, (Level::Unsafe, String::new())),
            ],
        };
        assert!(!check.is_fit());
        assert!(check.reached_any(), "node 1 answered");
    }
}
