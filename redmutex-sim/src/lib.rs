//! `redmutex-sim`: a deterministic simulator for redmutex.
//!
//! A run is a world of simulated processes — each with its own lockers, connections and
//! wake-up subscriber — on one in-memory server (alone, or with a lagging replica it
//! fails over to, its lockers waiting for the replica's confirmation or not) or Redlock
//! over three or five, whose clocks run up to 1 % fast or slow against the processes',
//! over a network whose requests and replies take their time, while faults strike at
//! seeded moments: requests slowed, connections cut before or after the server applied a
//! command, servers restarted empty, lost, frozen, failed over to a replica that missed
//! the last writes, keys evicted, processes paused past their TTLs or crashed, acquires
//! dropped mid-flight, locks forced free by an operator. Every task
//! records what it saw; the [`checker`] then holds the history to each claim of
//! docs/SAFETY.md.
//!
//! Everything runs on one thread under tokio's paused clock, with the library's tokens
//! and jitter drawn from the seed, so a run is a function of its seed: `redmutex-sim
//! --seed S` replays it and prints its trace.

pub mod checker;
pub mod history;
mod net;
pub mod plan;
mod state;
pub mod sweep;
mod workload;
mod world;

use std::time::Duration;

pub use checker::{check, Violation};
pub use plan::{Plan, Scale, Topology};
pub use sweep::{shrink, sweep, Sweep};
pub use world::Outcome;

/// What one run found.
pub struct Report {
    /// What ran.
    pub plan: Plan,
    /// What the checker found, in time order.
    pub violations: Vec<Violation>,
    /// What the run recorded.
    pub outcome: Outcome,
}

impl Report {
    /// The run's simulated length.
    pub fn simulated(&self) -> Duration {
        self.plan.end() + plan::SETTLE
    }
}

/// Runs `plan` (on this thread) and checks what it recorded; `trace` keeps a trace of
/// every request, fault and section.
pub fn run(plan: Plan, trace: bool) -> Report {
    let outcome = world::run(&plan, trace);
    let violations = check(&plan, &outcome.history);
    Report {
        plan,
        violations,
        outcome,
    }
}
