//! The fault schedule: a timeline of faults drawn from the run's seed, one at a time, each
//! over before the next begins and all over before the workers stop.

use std::time::Duration;

use testkit::Rng;

/// What the workers lock against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One Redis node (append-only file, fsync always) behind a TCP proxy.
    Single,
    /// Redlock over five independent nodes (no persistence), each behind a TCP proxy.
    Redlock,
    /// A six-node Redis Cluster (three masters, three replicas; append-only files).
    Cluster,
    /// A master and a replica under three sentinels (no persistence), failed over to the
    /// replica after it missed the master's last writes; the lockers do not wait for the
    /// replica.
    Sentinel,
    /// As [`Mode::Sentinel`], the lockers waiting for the replica to confirm each write
    /// (`Locker::with_replication`).
    SentinelConfirmed,
}

impl Mode {
    /// The mode's name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Redlock => "redlock",
            Mode::Cluster => "cluster",
            Mode::Sentinel => "sentinel",
            Mode::SentinelConfirmed => "sentinel-confirmed",
        }
    }

    /// Whether a fault of the mode loses writes the lockers were told had succeeded: a
    /// failover to a replica that had not received them, with nobody waiting for the
    /// replica. Locks lost that way are counted, not failed: they are the documented price
    /// of asynchronous replication (docs/SAFETY.md, "Replica confirmation").
    pub fn loses_writes(self) -> bool {
        self == Mode::Sentinel
    }

    /// Whether the workers reach the servers through Sentinel.
    pub fn is_sentinel(self) -> bool {
        matches!(self, Mode::Sentinel | Mode::SentinelConfirmed)
    }

    /// The kinds of fault this mode's topology allows. Cluster clients talk to each node at
    /// the address it announces, so no proxy can stand between them: no cuts or latency.
    pub fn fault_kinds(self) -> &'static [FaultKind] {
        use FaultKind::*;
        match self {
            Mode::Single | Mode::Redlock => &[
                Cut,
                Latency,
                NodePause,
                NodeRestart,
                HolderPause,
                ClientKill,
            ],
            Mode::Cluster => &[NodePause, NodeRestart, HolderPause, ClientKill],
            Mode::Sentinel | Mode::SentinelConfirmed => &[Failover, HolderPause, ClientKill],
        }
    }
}

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// Every connection through a node's proxy is closed.
    Cut,
    /// A node's proxy delays every byte, each way.
    Latency,
    /// A node is frozen (SIGSTOP), then thawed (SIGCONT).
    NodePause,
    /// A node is killed (SIGKILL) and started again.
    NodeRestart,
    /// A whole worker process is frozen past its locks' TTL, then thawed.
    HolderPause,
    /// `CLIENT KILL` on a node: every client connection (normal or pub/sub) is dropped.
    ClientKill,
    /// The replica stops receiving (frozen, its link cut) while the master takes writes
    /// for a while; the master is killed, and Sentinel promotes the replica without them.
    Failover,
}

impl FaultKind {
    /// The fault's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Cut => "connection cut",
            FaultKind::Latency => "latency",
            FaultKind::NodePause => "node pause",
            FaultKind::NodeRestart => "node kill/restart",
            FaultKind::HolderPause => "holder pause",
            FaultKind::ClientKill => "CLIENT KILL",
            FaultKind::Failover => "failover to a lagging replica",
        }
    }

    /// How long the servers take to be whole again after the fault itself (`lasts`): for
    /// a failover, Sentinel's detection (1 s) and election, and the old master's resync as
    /// the new replica.
    pub fn recovery(self) -> Duration {
        match self {
            FaultKind::Failover => Duration::from_secs(5),
            _ => Duration::ZERO,
        }
    }
}

/// One scheduled fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// When it starts, from the start of the run.
    pub at: Duration,
    /// What it is.
    pub kind: FaultKind,
    /// The node (or, for [`FaultKind::HolderPause`], the worker) it hits.
    pub target: usize,
    /// How long it lasts (a node's downtime for a restart; zero for instant faults).
    pub lasts: Duration,
    /// The added delay each way, for [`FaultKind::Latency`].
    pub latency: Duration,
}

/// What a schedule is drawn for.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The topology.
    pub mode: Mode,
    /// Nodes that can be hit.
    pub nodes: usize,
    /// Worker processes that can be paused.
    pub workers: usize,
    /// The locks' TTL.
    pub ttl: Duration,
    /// How long the workers run; every fault is over half a second before that.
    pub run: Duration,
}

/// Draws the schedule for `plan` from `seed`. The first faults go through every kind the
/// mode allows, in a seeded order, so that even a short run injects each kind once; the
/// rest are drawn at random.
pub fn schedule(seed: u64, plan: &Plan) -> Vec<Fault> {
    let mut rng = Rng::stream(seed, 0x5c4e_d01e);
    let kinds = plan.mode.fault_kinds();
    let mut first_round: Vec<FaultKind> = kinds.to_vec();
    for i in (1..first_round.len()).rev() {
        first_round.swap(i, rng.index(i + 1));
    }
    let ttl = plan.ttl.as_millis() as u64;
    let ms = Duration::from_millis;
    let end = plan.run.saturating_sub(ms(500));
    let mut at = rng.between(ms(200), ms(600));
    let mut faults = Vec::new();
    loop {
        let kind = match faults.len() {
            n if n < first_round.len() => first_round[n],
            _ => kinds[rng.index(kinds.len())],
        };
        let (target, lasts, latency) = match kind {
            FaultKind::Cut | FaultKind::ClientKill => (rng.index(plan.nodes), ms(0), ms(0)),
            FaultKind::Latency => (
                rng.index(plan.nodes),
                rng.between(ms(500), ms(2_000)),
                rng.between(ms(20), ms(150)),
            ),
            // Cluster: shorter than the node timeout (1 s), so that no failover starts.
            FaultKind::NodePause if plan.mode == Mode::Cluster => {
                (rng.index(plan.nodes), rng.between(ms(100), ms(600)), ms(0))
            }
            FaultKind::NodePause => (
                rng.index(plan.nodes),
                rng.between(ms(ttl / 10), ms(ttl * 2)),
                ms(0),
            ),
            // Redlock nodes keep no data: a restarted node stays out for longer than the
            // TTL, so every lock it knew of has expired (the rule the crate documents).
            // The others reload their append-only file and come straight back.
            FaultKind::NodeRestart if plan.mode == Mode::Redlock => (
                rng.index(plan.nodes),
                ms(ttl) + rng.between(ms(100), ms(500)),
                ms(0),
            ),
            FaultKind::NodeRestart => (rng.index(plan.nodes), rng.between(ms(0), ms(300)), ms(0)),
            FaultKind::HolderPause => (
                rng.index(plan.workers),
                rng.between(ms(ttl * 3 / 2), ms(ttl * 3)),
                ms(0),
            ),
            // The writes the replica misses: shorter than Sentinel's down-after (1 s), so
            // that the frozen replica is not itself taken for down.
            FaultKind::Failover => (0, rng.between(ms(200), ms(800)), ms(0)),
        };
        if at + lasts + kind.recovery() > end {
            break;
        }
        faults.push(Fault {
            at,
            kind,
            target,
            lasts,
            latency,
        });
        at += lasts + kind.recovery() + rng.between(ms(200), ms(800));
    }
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [Mode; 5] = [
        Mode::Single,
        Mode::Redlock,
        Mode::Cluster,
        Mode::Sentinel,
        Mode::SentinelConfirmed,
    ];

    fn plan(mode: Mode, seconds: u64) -> Plan {
        Plan {
            mode,
            nodes: match mode {
                Mode::Single => 1,
                Mode::Redlock => 5,
                Mode::Cluster => 6,
                Mode::Sentinel | Mode::SentinelConfirmed => 2,
            },
            workers: 3,
            ttl: Duration::from_millis(500),
            run: Duration::from_secs(seconds),
        }
    }

    #[test]
    fn a_seed_gives_one_schedule() {
        let p = plan(Mode::Redlock, 60);
        assert_eq!(schedule(42, &p), schedule(42, &p));
        assert_ne!(schedule(42, &p), schedule(43, &p));
    }

    #[test]
    fn faults_come_one_at_a_time_and_end_before_the_workers() {
        for mode in MODES {
            for seed in 0..50 {
                let p = plan(mode, 20);
                let faults = schedule(seed, &p);
                let least = if mode.is_sentinel() { 4 } else { 10 };
                assert!(
                    faults.len() >= least,
                    "{mode:?} seed {seed}: {}",
                    faults.len()
                );
                for pair in faults.windows(2) {
                    let over = pair[0].at + pair[0].lasts + pair[0].kind.recovery();
                    assert!(over < pair[1].at, "{pair:?}");
                }
                let last = faults.last().unwrap();
                let over = last.at + last.lasts + last.kind.recovery();
                assert!(over <= p.run - Duration::from_millis(500));
                for f in &faults {
                    let bound = match f.kind {
                        FaultKind::HolderPause => p.workers,
                        _ => p.nodes,
                    };
                    assert!(f.target < bound, "{f:?}");
                }
            }
        }
    }

    #[test]
    fn a_short_run_injects_every_kind_its_mode_allows() {
        for mode in MODES {
            for seed in 0..50 {
                let mut kinds: Vec<FaultKind> = schedule(seed, &plan(mode, 15))
                    .iter()
                    .map(|f| f.kind)
                    .collect();
                kinds.sort();
                kinds.dedup();
                let mut allowed = mode.fault_kinds().to_vec();
                allowed.sort();
                assert_eq!(kinds, allowed, "{mode:?} seed {seed}");
            }
        }
    }

    #[test]
    fn durations_follow_the_safety_rules_of_each_mode() {
        let ttl = Duration::from_millis(500);
        for seed in 0..50 {
            for f in schedule(seed, &plan(Mode::Redlock, 60)) {
                if f.kind == FaultKind::NodeRestart {
                    assert!(
                        f.lasts > ttl,
                        "a Redlock node stays out past the TTL: {f:?}"
                    );
                }
                if f.kind == FaultKind::HolderPause {
                    assert!(
                        f.lasts >= ttl * 3 / 2,
                        "holders are paused past the TTL: {f:?}"
                    );
                }
            }
            for f in schedule(seed, &plan(Mode::Cluster, 60)) {
                assert!(!matches!(f.kind, FaultKind::Cut | FaultKind::Latency));
                if f.kind == FaultKind::NodePause {
                    assert!(f.lasts <= Duration::from_millis(600), "no failover: {f:?}");
                }
            }
        }
    }
}
