//! What a run records, for the checker: every critical section as its holder saw it,
//! every acquire and wait, every forced release and fault, and what the servers held
//! while the run was quiet. Times are [`Duration`]s since the run began, on the
//! processes' clock (tokio's; each server's clock runs at its own rate against it).

use std::time::Duration;

use crate::plan::{Primitive, Style};

/// One holder's critical section: from the moment its acquire returned to the moment it
/// released, gave up or stopped.
#[derive(Clone, Debug)]
pub struct Section {
    /// The task that recorded it (its number in the plan).
    pub task: usize,
    /// The task's simulated process.
    pub process: usize,
    /// What it held or waited for.
    pub primitive: Primitive,
    /// How the holder behaved.
    pub style: Style,
    /// The name (key) worked on.
    pub name: &'static str,
    /// The fence (a leader's term) when taken.
    pub fence: Option<u64>,
    /// When the acquire was called (its first request is sent then, unless it waits).
    pub asked: Duration,
    /// When the acquire returned.
    pub start: Duration,
    /// The latest end of its validity that the library gave it.
    pub valid: Duration,
    /// A minimum hold: from `asked` (no later than the library's own start of it).
    pub keep_until: Option<Duration>,
    /// The last time it acted believing it held the lock.
    pub last_act: Option<Duration>,
    /// It acted after `valid` (a naive holder, or one paused between check and act).
    pub overran: bool,
    /// When it called the release (or downgraded, resigned); `None` when it never did.
    pub released: Option<Duration>,
    /// The release found the claim still held.
    pub release_held: Option<bool>,
    /// When it was told "lost".
    pub told_lost: Option<Duration>,
    /// When its lease heard a request to let go (`request_release`).
    pub heard_ask: Option<Duration>,
    /// A refresh set its key to end sooner than it would have: waiters in other processes
    /// learned the longer TTL from their last try.
    pub shortened: bool,
    /// A kept-alive holder (a lease, a leader): the TTL its renewals ask for.
    pub renewed_with: Option<Duration>,
}

impl Section {
    /// Until when no other holder may get in, by the guarantees: its validity, ended
    /// early by its release — unless the release kept it for a minimum hold.
    pub fn protected_end(&self) -> Duration {
        let mut end = match self.released {
            Some(released) => self.valid.min(released),
            None => self.valid,
        };
        if let (Some(keep), Some(true)) = (self.keep_until, self.release_held) {
            end = end.max(keep);
        }
        // Once told "lost", a holder believes nothing more (the library may already have
        // let the key go, to spare others the wait).
        if let Some(told) = self.told_lost {
            end = end.min(told);
        }
        end
    }
}

/// One acquire (or campaign), for the liveness rule.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// The task that recorded it (its number in the plan).
    pub task: usize,
    /// The task's simulated process.
    pub process: usize,
    /// What it held or waited for.
    pub primitive: Primitive,
    /// The name (key) worked on.
    pub name: &'static str,
    /// A second name taken with it, all or nothing.
    pub also: Option<&'static str>,
    /// When it was called.
    pub asked: Duration,
    /// When it returned (or was dropped); `None` while still running at the end.
    pub ended: Option<Duration>,
    /// It returned a lock.
    pub obtained: bool,
    /// Its locker waits with push wake-up.
    pub wake_up: bool,
    /// It was dropped before it returned.
    pub cancelled: bool,
    /// Its deadline, from `asked`.
    pub deadline: Duration,
    /// Its failed tries.
    pub failures: Vec<FailedTry>,
}

/// One failed try of an acquire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedTry {
    /// When it failed.
    pub at: Duration,
    /// It found the name held (otherwise it failed for another reason — no quorum, an
    /// error — and the retry pause follows).
    pub held: bool,
    /// Redlock: the nodes that could not be asked (they timed out, or answered an error).
    pub unreachable: Vec<usize>,
}

/// One `wait_released`.
#[derive(Clone, Debug)]
pub struct Watch {
    /// The task that recorded it (its number in the plan).
    pub task: usize,
    /// The name (key) worked on.
    pub name: &'static str,
    /// When it was called.
    pub asked: Duration,
    /// When it answered.
    pub answered: Duration,
    /// It answered "free".
    pub free: bool,
}

/// One item an election's observer saw.
#[derive(Clone, Debug)]
pub struct Observation {
    /// The task that recorded it (its number in the plan).
    pub task: usize,
    /// The election's name.
    pub name: &'static str,
    /// When the observer asked for the next change (the item read after this).
    pub since: Duration,
    /// When the item came.
    pub at: Duration,
    /// The leader's value and term (`None`: nobody leads).
    pub leader: Option<(String, Option<u64>)>,
}

/// Something that ends what holders are vouched for: data lost (a restart, an
/// eviction), or a forced release.
#[derive(Clone, Debug)]
pub struct Breach {
    /// When it may have taken effect, from `at` to `until` (a forced release runs
    /// somewhere between its call and its answer).
    pub at: Duration,
    /// See `at`.
    pub until: Duration,
    /// The names it touched; `None`: every name on the node.
    pub name: Option<String>,
    /// What it was, for messages.
    pub what: String,
    /// A failover to a replica that may have missed the last writes (the lockers did not
    /// wait for it to confirm them).
    pub failover: bool,
}

/// One guarded write of an exclusive holder: in one call, only while it holds, it read
/// the name's data key and wrote its own mark there.
#[derive(Clone, Debug)]
pub struct GuardedWrite {
    /// The section (its index in [`History::sections`]) whose holder wrote: its mark.
    pub section: usize,
    /// The name whose data key it wrote.
    pub name: &'static str,
    /// When it was sent.
    pub sent: Duration,
    /// When it answered.
    pub answered: Duration,
    /// It ran (the holder held); otherwise it was refused as not held.
    pub landed: bool,
    /// The mark it found there before writing its own (a section's index), if any.
    pub found: Option<usize>,
}

/// One forced release that answered and found the name held (`force_release`, with its
/// lock-delay, or `force_release_now`): whoever held it then holds it no more — its next
/// renewal, refresh or release finds itself gone.
#[derive(Clone, Debug)]
pub struct Forced {
    /// The task that forced it.
    pub task: usize,
    /// The name forced.
    pub name: &'static str,
    /// When it was called.
    pub called: Duration,
    /// When it answered.
    pub answered: Duration,
}

/// One request that whoever holds a name let it go (`request_release`): stored somewhere
/// between `sent` and `until` — its answer, or, unanswered, the end of the run.
#[derive(Clone, Debug)]
pub struct Ask {
    /// The task that asked.
    pub task: usize,
    /// The name asked about.
    pub name: &'static str,
    /// When it was sent.
    pub sent: Duration,
    /// When it answered (or, unanswered, the end of the run).
    pub until: Duration,
}

/// One sample of what the servers hold, per name: whether an acquire of each primitive
/// could succeed now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Free {
    /// The name's key is free (a lock, a fair lock, a leader, a writer: no writer and no
    /// readers).
    pub exclusive: bool,
    /// A reader could get in (no writer, no waiting writer).
    pub read: bool,
    /// A semaphore permit is free.
    pub permit: bool,
    /// The name's key is being handed to a locker in line (its value is the locker's id
    /// with the flag HANDED: `mutex.lua`).
    pub handed: bool,
}

impl Free {
    /// Whether an acquire of `primitive` could get in.
    pub fn for_primitive(&self, primitive: Primitive) -> bool {
        match primitive {
            Primitive::Read => self.read,
            Primitive::Permit(_) => self.permit,
            _ => self.exclusive,
        }
    }
}

/// What a run recorded.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Every critical section.
    pub sections: Vec<Section>,
    /// Every acquire and campaign.
    pub attempts: Vec<Attempt>,
    /// Every `wait_released` that answered.
    pub watches: Vec<Watch>,
    /// What elections' observers saw (errors left out).
    pub observations: Vec<Observation>,
    /// Every breach of the guarantees' conditions.
    pub breaches: Vec<Breach>,
    /// Samples of the quiet part, per name: (when, what was free).
    pub samples: Vec<(Duration, &'static str, Free)>,
    /// Violations found while the run went on (a lease past its validity, not told; a
    /// key without a TTL; a panic).
    pub found: Vec<(Duration, &'static str, String)>,
    /// Requests cut, as they were: when, the process, the node.
    pub cuts: Vec<(Duration, usize, usize)>,
    /// Writes the fenced store accepted and refused.
    pub writes: (u64, u64),
    /// Every guarded write (`write_if_held`) that answered.
    pub guarded: Vec<GuardedWrite>,
    /// The fenced store: per name, the highest fence it accepted.
    pub highest: Vec<(&'static str, u64)>,
    /// Every request to let go.
    pub asks: Vec<Ask>,
    /// Every forced release that found the name held.
    pub forced: Vec<Forced>,
}
