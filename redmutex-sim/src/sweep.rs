//! Many runs: a range of seeds over a few threads (each run on one thread, as a function
//! of its seed), what they found, and how fast; and the shrinking of a failing run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::checker::lost_to_failover;
use crate::plan::{Fault, Plan, Role, Scale};
use crate::{run, Report, Violation};

/// What a sweep found.
#[derive(Default)]
pub struct Sweep {
    /// Runs made.
    pub runs: u64,
    /// Each failing seed with its first violation.
    pub failed: Vec<(u64, Violation)>,
    /// Each failing seed's first violation of each rule it broke.
    pub all: Vec<(u64, Violation)>,
    /// Per rule: how many runs broke it, and the first seed that did.
    pub rules: BTreeMap<&'static str, (u64, u64)>,
    /// Simulated time, over all runs.
    pub simulated: Duration,
    /// Requests the servers answered, over all runs.
    pub requests: u64,
    /// Wall-clock time the sweep took.
    pub wall: Duration,
    /// How many runs had each topology ("single", "replicated", "replicated-wait",
    /// "redlock3", "redlock5"), a failover ("failover"), and each kind
    /// of holder ("lock", "permit", "read", "write", "fair", "leader"; "multi-key": a lock
    /// of two names), and watchers, operators and observers ("watch", "force",
    /// "observe").
    pub covered: BTreeMap<String, u64>,
    /// Sections recorded (critical sections held), over all runs.
    pub sections: u64,
    /// Requests to let go made, and sections that heard one, over all runs.
    pub asks: (u64, u64),
    /// Per replicated topology ("replicated", "replicated-wait"): runs with a failover,
    /// and how many of them lost a lock, a permit, a minimum hold or fence order to it
    /// ([`lost_to_failover`]; with replica confirmation,
    /// any such violation at all).
    pub failovers: BTreeMap<String, (u64, u64)>,
}

impl Sweep {
    /// Simulated seconds per second of wall-clock time.
    pub fn speed(&self) -> f64 {
        self.simulated.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }

    /// Runs per minute of wall-clock time.
    pub fn per_minute(&self) -> f64 {
        self.runs as f64 * 60.0 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Runs the seeds `from..from + runs` on `threads` threads, stopping early (between runs)
/// once `budget` of wall-clock time has passed.
pub fn sweep(
    from: u64,
    runs: u64,
    scale: Scale,
    threads: usize,
    budget: Option<Duration>,
) -> Sweep {
    let started = Instant::now();
    let next = AtomicU64::new(from);
    let found = Mutex::new(Sweep::default());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                if budget.is_some_and(|b| started.elapsed() >= b) {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= from + runs {
                    return;
                }
                let report = run(Plan::draw(seed, scale), false);
                let failover = failover_cost(&report);
                let mut sweep = found.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(lost) = failover {
                    let entry = (sweep.failovers)
                        .entry(report.plan.topology.name())
                        .or_insert((0, 0));
                    entry.0 += 1;
                    entry.1 += u64::from(lost);
                }
                sweep.runs += 1;
                let history = &report.outcome.history;
                sweep.sections += history.sections.len() as u64;
                sweep.asks.0 += history.asks.len() as u64;
                sweep.asks.1 += (history.sections.iter())
                    .filter(|s| s.heard_ask.is_some())
                    .count() as u64;
                for what in covered(&report.plan) {
                    *sweep.covered.entry(what).or_insert(0) += 1;
                }
                sweep.simulated += report.simulated();
                sweep.requests += report.outcome.requests;
                let mut rules: Vec<&'static str> = Vec::new();
                for v in &report.violations {
                    if !rules.contains(&v.rule) {
                        rules.push(v.rule);
                        sweep.all.push((seed, v.clone()));
                    }
                }
                for rule in rules {
                    let entry = sweep.rules.entry(rule).or_insert((0, seed));
                    entry.0 += 1;
                    entry.1 = entry.1.min(seed);
                }
                if let Some(first) = report.violations.into_iter().next() {
                    sweep.failed.push((seed, first));
                }
            });
        }
    });
    let mut sweep = found.into_inner().unwrap_or_else(|p| p.into_inner());
    sweep.failed.sort_by_key(|(seed, _)| *seed);
    sweep.all.sort_by_key(|(seed, _)| *seed);
    sweep.wall = started.elapsed();
    sweep
}

/// For a run with a failover: whether it cost a lock, a permit, a minimum hold or fence
/// order (excused, without replica confirmation; a violation, with it).
fn failover_cost(report: &Report) -> Option<bool> {
    let failover = (report.plan.faults.iter()).any(|f| matches!(f.fault, Fault::Failover { .. }));
    if !failover {
        return None;
    }
    let safety = ["exclusion", "min-hold", "limit", "fence", "watch"];
    let violated = report.violations.iter().any(|v| safety.contains(&v.rule));
    let excused = !lost_to_failover(&report.plan, &report.outcome.history).is_empty();
    Some(violated || excused)
}

/// What a plan puts to the test: its topology, and the kinds of its tasks.
fn covered(plan: &Plan) -> Vec<String> {
    let mut what = vec![plan.topology.name()];
    let mut add = |kind: &str| {
        if !what.iter().any(|w| w == kind) {
            what.push(kind.to_string());
        }
    };
    if (plan.faults.iter()).any(|f| matches!(f.fault, Fault::Failover { .. })) {
        add("failover");
    }
    for task in &plan.tasks {
        add(match task.role {
            Role::Hold(primitive, _) => primitive.name(),
            Role::Watch => "watch",
            Role::Force => "force",
            Role::Observe => "observe",
        });
        if task.also.is_some() {
            add("multi-key");
        }
    }
    what
}

/// A smaller plan that still breaks `rule`: faults and tasks left out one at a time, and
/// the run cut short after the violation, as long as the violation stays.
pub fn shrink(plan: &Plan, rule: &str) -> Plan {
    let breaks = |candidate: &Plan| -> Option<Duration> {
        let report = run(candidate.clone(), false);
        (report.violations.iter())
            .find(|v| v.rule == rule)
            .map(|v| v.at)
    };
    let Some(mut at) = breaks(plan) else {
        return plan.clone();
    };
    let mut best = plan.clone();
    // A violation in the active part needs nothing after it (a liveness one needs the
    // quiet part it was seen in).
    if at < best.active && rule != "liveness" {
        let cut = best.keep(
            None,
            None,
            Some(at + Duration::from_millis(1)),
            Some(Duration::ZERO),
        );
        if let Some(found) = breaks(&cut) {
            best = cut;
            at = found;
        }
    }
    let _ = at;
    for id in plan.faults.iter().map(|f| f.id) {
        let faults: Vec<usize> = (best.faults.iter())
            .map(|f| f.id)
            .filter(|f| *f != id)
            .collect();
        let candidate = best.keep(None, Some(&faults), None, None);
        if breaks(&candidate).is_some() {
            best = candidate;
        }
    }
    for id in plan.tasks.iter().map(|t| t.id) {
        let tasks: Vec<usize> = (best.tasks.iter())
            .map(|t| t.id)
            .filter(|t| *t != id)
            .collect();
        let candidate = best.keep(Some(&tasks), None, None, None);
        if !candidate
            .tasks
            .iter()
            .any(|t| matches!(t.role, Role::Hold(..)))
        {
            continue;
        }
        if breaks(&candidate).is_some() {
            best = candidate;
        }
    }
    best
}
