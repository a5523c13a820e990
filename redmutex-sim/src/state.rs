//! What every part of a run shares: the servers and what the faults do to them, the
//! processes and what the faults do to them, the history, the trace, and the breaches of
//! the guarantees' conditions as they are recorded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redmutex::memory::{MemoryRedis, Snapshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::{Breach, History};

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How many requests may reach the servers at one instant before the run counts as
/// spinning.
const SPIN_LIMIT: u64 = 5_000;

/// A server, and what the faults do to it.
pub(crate) struct NodeState {
    pub(crate) redis: MemoryRedis,
    /// Unreachable until then (far away: for good).
    pub(crate) down_until: Mutex<Option<Instant>>,
    /// Answers nothing until then.
    pub(crate) frozen_until: Mutex<Option<Instant>>,
    /// Its replica, in the replicated world.
    pub(crate) replica: Option<Mutex<Replica>>,
}

/// What a master's replica has received, and when its link works.
pub(crate) struct Replica {
    /// The master's keys as of the last time the replica caught up.
    pub(crate) data: Snapshot,
    /// Receives nothing until then.
    pub(crate) behind_until: Option<Instant>,
}

impl Replica {
    /// When the replica receives again (now if it does).
    pub(crate) fn receives_from(&self, now: Instant) -> Instant {
        self.behind_until.map_or(now, |until| until.max(now))
    }
}

impl NodeState {
    /// The replica catches up with everything the master holds now, if it receives.
    pub(crate) fn replicate(&self) {
        if let Some(replica) = &self.replica {
            let mut replica = lock(replica);
            if replica.receives_from(Instant::now()) <= Instant::now() && !self.is_down() {
                replica.data = self.redis.snapshot();
            }
        }
    }

    /// Unreachable until `until` at least (faults that overlap add up).
    pub(crate) fn down_until(&self, until: Instant) {
        let mut down = lock(&self.down_until);
        *down = Some(down.map_or(until, |d| d.max(until)));
    }

    pub(crate) fn is_down(&self) -> bool {
        lock(&self.down_until).is_some_and(|until| until > Instant::now())
    }

    /// Waits until the node is not frozen.
    pub(crate) async fn thawed(&self) {
        sleep_past(&self.frozen_until).await;
    }
}

/// Sleeps until the instant `until` holds has passed — read again on waking: a fault that
/// struck meanwhile may have moved it later.
async fn sleep_past(until: &Mutex<Option<Instant>>) {
    loop {
        let at = *lock(until);
        match at {
            Some(at) if at > Instant::now() => tokio::time::sleep_until(at).await,
            _ => return,
        }
    }
}

/// A process, and what the faults do to it.
pub(crate) struct ProcState {
    pub(crate) paused_until: Mutex<Option<Instant>>,
    pub(crate) crashed: AtomicBool,
    /// Per node: until when its requests are slower, and by how much.
    pub(crate) slow: Mutex<Vec<(usize, Instant, Duration)>>,
    /// Per node: the next request is cut (after the server applied it: `true`).
    pub(crate) cuts: Mutex<Vec<(usize, bool)>>,
}

impl ProcState {
    pub(crate) fn is_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Waits until the process is not paused.
    pub(crate) async fn resumed(&self) {
        sleep_past(&self.paused_until).await;
    }

    pub(crate) fn slowness(&self, node: usize, at: Instant) -> Duration {
        (lock(&self.slow).iter())
            .filter(|(n, until, _)| *n == node && *until > at)
            .map(|(_, _, extra)| *extra)
            .sum()
    }

    pub(crate) fn take_cut(&self, node: usize) -> Option<bool> {
        let mut cuts = lock(&self.cuts);
        let index = cuts.iter().position(|(n, _)| *n == node)?;
        Some(cuts.remove(index).1)
    }
}

/// What every part of a run shares.
pub(crate) struct Shared {
    pub(crate) t0: Instant,
    pub(crate) latency: Duration,
    pub(crate) nodes: Vec<NodeState>,
    pub(crate) processes: Vec<Arc<ProcState>>,
    pub(crate) history: Mutex<History>,
    pub(crate) trace: Option<Mutex<Vec<String>>>,
    pub(crate) closed: AtomicBool,
    /// The run is ending: tasks finish what they hold and stop.
    pub(crate) stopping: AtomicBool,
    /// Requests at the latest instant: (when, how many).
    pub(crate) instant: Mutex<(Instant, u64)>,
    /// The tasks of each process (aborted when it crashes).
    pub(crate) tasks: Mutex<Vec<Vec<JoinHandle<()>>>>,
}

impl Shared {
    /// Now, since the run began.
    pub(crate) fn now(&self) -> Duration {
        Instant::now() - self.t0
    }

    pub(crate) fn at(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.t0)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Adds a line to the trace, when one is kept.
    pub(crate) fn note(&self, line: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            let at = self.now();
            let line = format!("[{:>11.6}] {}", at.as_secs_f64(), line());
            if std::env::var_os("REDMUTEX_SIM_LIVE").is_some() {
                eprintln!("{line}");
            }
            lock(trace).push(line);
        }
    }

    /// Counts a request the servers answer; `false` once requests pile up at one instant
    /// (the clients spin without time passing: a livelock, reported once), which closes
    /// the run.
    pub(crate) fn count_request(&self) -> bool {
        if self.is_closed() {
            return false;
        }
        let now = Instant::now();
        let mut instant = lock(&self.instant);
        match instant.0 == now {
            true => instant.1 += 1,
            false => *instant = (now, 1),
        }
        if instant.1 < SPIN_LIMIT {
            return true;
        }
        drop(instant);
        self.found(
            "livelock",
            format!("{SPIN_LIMIT} requests at one instant: the clients spin without time passing"),
        );
        self.closed.store(true, Ordering::SeqCst);
        false
    }

    pub(crate) fn history(&self) -> MutexGuard<'_, History> {
        lock(&self.history)
    }

    /// A violation seen as it happened.
    pub(crate) fn found(&self, rule: &'static str, text: String) {
        let at = self.now();
        self.note(|| format!("VIOLATION {rule}: {text}"));
        self.history().found.push((at, rule, text));
    }
}

/// Records a breach of the guarantees' conditions.
pub(crate) fn breach(world: &Shared, name: Option<String>, what: String) {
    let at = world.now();
    breach_between(world, at, at, name, what);
}

/// Records a breach that took effect at some moment between `at` and `until`; its index.
pub(crate) fn breach_between(
    world: &Shared,
    at: Duration,
    until: Duration,
    name: Option<String>,
    what: String,
) -> usize {
    let mut history = world.history();
    history.breaches.push(Breach {
        at,
        until,
        name,
        what,
        failover: false,
    });
    history.breaches.len() - 1
}
