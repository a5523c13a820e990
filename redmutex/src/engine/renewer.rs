//! The renewer: one background task per locker that keeps all of its leases alive.
//!
//! Thousands of leases must not mean thousands of timers each sending its own request. The
//! renewer keeps every lease in one table and sleeps until the next event of any of them —
//! a renewal falling due, or a lease running out. When it wakes it renews, in one script
//! call per batch, every lease whose renewal is due within a quarter of its interval (an
//! early renewal costs nothing, and it makes leases that were taken at nearly the same
//! time share round trips). Its single timer also enforces the loss deadline: a lease whose
//! renewals do not come back in time is declared lost when its validity ends, even while
//! the requests are still hanging on a frozen server.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

use crate::backend::common::Renewal;
use crate::backend::Backend;
use crate::connection::Connection;
use crate::engine::lost::{loss_margin, LeaseState, LostReason};
use crate::engine::meter::Meter;
use crate::scripts::Claim;
use crate::token::Token;

/// At most this many leases share one renewal call, so that one call never blocks Redis
/// for long (each lease costs a few commands per key inside the script).
const MAX_BATCH_LEASES: usize = 1000;

/// The least time between a lease's renewal and one a prompt asks for
/// ([`Registration::prompt`]): a flood of prompts costs each lease at most ten renewals a
/// second, and a request that arrives just after a renewal waits no longer than this.
const PROMPT_GAP: Duration = Duration::from_millis(100);

/// Where a locker's renewer task is reached; the task is started on first use.
pub(crate) struct RenewerSlot<C> {
    sender: Mutex<Option<UnboundedSender<Command>>>,
    next_id: AtomicU64,
    connection: PhantomData<fn() -> C>,
}

/// A lease's place in the renewer; dropping it does not unregister (the lease does that).
pub(crate) struct Registration {
    id: u64,
    sender: UnboundedSender<Command>,
}

impl Registration {
    /// Stops renewing this lease. Harmless if the renewer already dropped it.
    pub(crate) fn unregister(&self) {
        let _ = self.sender.send(Command::Unregister(self.id));
    }

    /// What renews this lease soon when called (a request to let go was announced): see
    /// `Tracked::prompt`.
    pub(crate) fn prompt(&self) -> Arc<dyn Fn() + Send + Sync> {
        let (id, sender) = (self.id, self.sender.clone());
        Arc::new(move || {
            let _ = sender.send(Command::RenewNow(id));
        })
    }
}

/// What the renewer needs to know about a lease.
pub(crate) struct Entry {
    pub(crate) claim: Arc<dyn Claim>,
    pub(crate) token: Token,
    pub(crate) ttl: Duration,
    /// The clock-drift allowance the servers' clocks call for (of a lease's TTL, or of a
    /// last renewal's shorter one).
    pub(crate) drift: crate::quorum::Drift,
    pub(crate) interval: Duration,
    pub(crate) next_renewal: Instant,
    pub(crate) valid_until: Instant,
    pub(crate) hold_until: Option<Instant>,
    /// A minimum hold time's end: a lost lease's release keeps what is held until then.
    pub(crate) keep_until: Option<Instant>,
    pub(crate) state: Arc<LeaseState>,
    /// Tells the locker's waiters that the lease is lost (its key gone or soon to be):
    /// those that queued behind it without a try must not wait for its validity.
    pub(crate) on_loss: Option<Box<dyn Fn() + Send + Sync>>,
}

pub(crate) enum Command {
    Register(u64, Box<Entry>),
    Unregister(u64),
    /// Renew this lease now (see [`Registration::prompt`]).
    RenewNow(u64),
}

impl<C: Connection> RenewerSlot<C> {
    pub(crate) fn new() -> RenewerSlot<C> {
        RenewerSlot {
            sender: Mutex::new(None),
            next_id: AtomicU64::new(0),
            connection: PhantomData,
        }
    }

    /// Hands a lease to the renewer, starting the renewer task on the current tokio runtime
    /// if it is not running (first lease, or its runtime has shut down since).
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::spawn`.
    pub(crate) fn register(
        &self,
        backend: &Backend<C>,
        meter: &Arc<Meter>,
        entry: Entry,
    ) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut slot = self.sender.lock().unwrap_or_else(|p| p.into_inner());
        let sender = match slot.as_ref() {
            Some(sender) if !sender.is_closed() => sender.clone(),
            _ => {
                let (sender, commands) = mpsc::unbounded_channel();
                let renewer = Renewer {
                    backend: backend.clone(),
                    meter: meter.clone(),
                    leases: BTreeMap::new(),
                    commands,
                };
                tokio::spawn(renewer.run());
                *slot = Some(sender.clone());
                sender
            }
        };
        // The receiver is alive: it was either just created or found open under the lock.
        let _ = sender.send(Command::Register(id, Box::new(entry)));
        Registration { id, sender }
    }
}

/// A lease as the renewer tracks it.
struct Tracked {
    entry: Entry,
    /// A renewal request for it is on the way.
    in_flight: bool,
    /// When its last renewal was sent: a prompt (see [`Command::RenewNow`]) renews no
    /// sooner than [`PROMPT_GAP`] after it.
    last_sent: Option<Instant>,
    /// A prompt came while a renewal was on the way (which may have read the key before
    /// the request it announces was stored): it renews again once that one is back.
    prompted: bool,
    /// False once the hold-time limit leaves no room for another renewal.
    renewing: bool,
    last_error: Option<redis::RedisError>,
}

impl Tracked {
    /// Renews soon, for a request to let go or a forced release that may have been
    /// announced: at once, or after the renewal on the way. Prompts are messages anyone may
    /// publish: however many come, a lease is renewed for them at most once per
    /// [`PROMPT_GAP`]. A lease already asked to let go still renews when prompted: the
    /// prompt may announce that a forced release took its claim (simulator seed 87).
    fn prompt(&mut self) {
        if !self.renewing {
            return;
        }
        if self.in_flight {
            self.prompted = true;
            return;
        }
        let now = Instant::now();
        let earliest = (self.last_sent).map_or(now, |sent| (sent + PROMPT_GAP).max(now));
        self.entry.next_renewal = self.entry.next_renewal.min(earliest);
    }

    /// When the lease must be declared lost: a little before its validity ends, so that
    /// the signal reaches the work while the lock is still certainly held.
    fn lost_at(&self) -> Instant {
        let margin = loss_margin(self.entry.ttl);
        self.entry
            .valid_until
            .checked_sub(margin)
            .unwrap_or(self.entry.valid_until)
    }

    fn next_event(&self) -> Instant {
        let lost_at = self.lost_at();
        if self.renewing && !self.in_flight {
            lost_at.min(self.entry.next_renewal)
        } else {
            lost_at
        }
    }
}

/// A lease in a renewal call.
#[derive(Clone, Copy)]
struct Due {
    id: u64,
    /// The TTL the call sets.
    ttl: Duration,
    /// The TTL was cut to end at the hold limit: after this renewal, no other.
    last: bool,
}

/// The answer to one renewal call.
struct BatchDone {
    /// Each lease in the call.
    leases: Vec<Due>,
    /// What became of each lease, in the same order.
    result: redis::RedisResult<Vec<Renewal>>,
}

/// The renewer task's state. It is built before the task is spawned so that, whenever
/// the task is dropped — its runtime shut down, even before it first ran — `Drop` still
/// sees every lease, in the table or still on the way to it.
struct Renewer<C> {
    backend: Backend<C>,
    meter: Arc<Meter>,
    leases: BTreeMap<u64, Tracked>,
    commands: UnboundedReceiver<Command>,
}

impl<C> Drop for Renewer<C> {
    /// Nobody will renew these leases any more: they are declared lost at once rather
    /// than left to expire behind their owners' backs.
    fn drop(&mut self) {
        let lost = || LostReason::Unreachable { last_error: None };
        for (_, tracked) in std::mem::take(&mut self.leases) {
            tracked.entry.state.end(lost());
        }
        while let Ok(command) = self.commands.try_recv() {
            if let Command::Register(_, entry) = command {
                entry.state.end(lost());
            }
        }
    }
}

impl<C: Connection> Renewer<C> {
    async fn run(mut self) {
        let Renewer {
            backend,
            meter,
            leases,
            commands,
        } = &mut self;
        let ends = Ends { backend, meter };
        // Redis Cluster: a renewal call may only touch keys of one hash slot.
        let per_slot = backend.is_cluster();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<BatchDone>();
        loop {
            // Deadlines first, on every pass: a flood of commands or replies must never
            // delay a loss.
            let now = Instant::now();
            if leases
                .values()
                .map(Tracked::next_event)
                .min()
                .is_some_and(|wake| wake <= now)
            {
                expire(leases, now, &ends);
                send_due(leases, now, backend, &done_tx, per_slot);
            }
            let wake = leases.values().map(Tracked::next_event).min();
            tokio::select! {
                biased;
                () = sleep_until(wake) => {}
                command = commands.recv() => {
                    let Some(command) = command else {
                        // Every locker, lock and lease of this renewer is gone.
                        return;
                    };
                    register_or_drop(leases, command);
                    // Take in everything queued before looking at the clock again.
                    while let Ok(command) = commands.try_recv() {
                        register_or_drop(leases, command);
                    }
                }
                Some(done) = done_rx.recv() => {
                    apply(leases, done, &ends);
                    while let Ok(done) = done_rx.try_recv() {
                        apply(leases, done, &ends);
                    }
                }
            }
        }
    }
}

fn register_or_drop(leases: &mut BTreeMap<u64, Tracked>, command: Command) {
    match command {
        Command::Register(id, mut entry) => {
            // A hold limit that ends before the lock would expire: shorten it now.
            if entry.hold_until.is_some_and(|h| h < entry.valid_until) {
                entry.next_renewal = Instant::now();
            }
            let tracked = Tracked {
                entry: *entry,
                in_flight: false,
                last_sent: None,
                prompted: false,
                renewing: true,
                last_error: None,
            };
            leases.insert(id, tracked);
        }
        Command::Unregister(id) => {
            leases.remove(&id);
        }
        Command::RenewNow(id) => {
            if let Some(tracked) = leases.get_mut(&id) {
                tracked.prompt();
            }
        }
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(wake) => tokio::time::sleep_until(wake).await,
        None => std::future::pending().await,
    }
}

/// Declares lost every lease whose validity is (about to be) over.
fn expire<C: Connection>(leases: &mut BTreeMap<u64, Tracked>, now: Instant, ends: &Ends<'_, C>) {
    let expired: Vec<u64> = leases
        .iter()
        .filter(|(_, t)| t.lost_at() <= now)
        .map(|(id, _)| *id)
        .collect();
    for id in expired {
        let tracked = leases.remove(&id).expect("listed above");
        let reason = if tracked.renewing {
            LostReason::Unreachable {
                last_error: tracked.last_error,
            }
        } else {
            LostReason::HoldLimitReached
        };
        ends.lose(tracked.entry, reason);
    }
}

/// What the renewer needs to end a lease, and to count what becomes of renewals.
struct Ends<'r, C> {
    backend: &'r Backend<C>,
    meter: &'r Meter,
}

impl<C: Connection> Ends<'_, C> {
    /// Tells the lease's watchers (and the application's traces and metrics), and removes
    /// whatever may still hold its token so that nobody waits for a lock its owner has
    /// already given up on.
    fn lose(&self, entry: Entry, reason: LostReason) {
        let left = entry.valid_until.saturating_duration_since(Instant::now());
        let (name, kind) = (lock_name(&*entry.claim), entry.claim.kind());
        let validity_left_ms = left.as_millis() as u64;
        let label = match &reason {
            LostReason::NotHeld => "not_held",
            LostReason::HoldLimitReached => "hold_limit",
            _ => "unreachable",
        };
        self.meter.lost(label);
        if let LostReason::HoldLimitReached = reason {
            tracing::info!(lock.name = %name, kind, "redmutex: lease ended at its hold limit");
        } else {
            tracing::warn!(
                lock.name = %name,
                kind,
                reason = %reason,
                validity_left_ms,
                "redmutex: lease lost"
            );
        }
        entry.state.end(reason);
        if let Some(on_loss) = &entry.on_loss {
            on_loss();
        }
        (self.backend).release_in_background(entry.claim, entry.token, entry.keep_until);
    }
}

/// The first key of a claim, as text, for traces.
fn lock_name(claim: &dyn Claim) -> String {
    let first = claim.keys().get(0).unwrap_or_default();
    String::from_utf8_lossy(first).into_owned()
}

/// Sends one renewal call per batch of leases that are due: per renewal script (one per
/// primitive) and, on a cluster, per hash slot.
fn send_due<C: Connection>(
    leases: &mut BTreeMap<u64, Tracked>,
    now: Instant,
    backend: &Backend<C>,
    done_tx: &UnboundedSender<BatchDone>,
    per_slot: bool,
) {
    let due = collect_due(leases, now);
    for batch in batches(leases, due, per_slot) {
        let script = leases[&batch[0].id].entry.claim.renewal_script();
        let mut call = script.prepare_invoke();
        for due in &batch {
            let entry = &leases[&due.id].entry;
            let ttl_ms = due.ttl.as_millis() as u64;
            entry.claim.add_renewal(&mut call, &entry.token, ttl_ms);
        }
        let backend = backend.clone();
        let done_tx = done_tx.clone();
        tokio::spawn(async move {
            let ttls: Vec<Duration> = batch.iter().map(|due| due.ttl).collect();
            let result = backend.renew(&call, &ttls).await;
            let _ = done_tx.send(BatchDone {
                leases: batch,
                result,
            });
        });
    }
}

/// The leases whose renewal is due (within a quarter of their interval), marked in flight,
/// with the TTL each renewal sets (cut short at a hold limit).
fn collect_due(leases: &mut BTreeMap<u64, Tracked>, now: Instant) -> Vec<Due> {
    let mut due: Vec<Due> = Vec::new();
    for (id, tracked) in leases.iter_mut() {
        let entry = &tracked.entry;
        if !tracked.renewing || tracked.in_flight || entry.next_renewal > now + entry.interval / 4 {
            continue;
        }
        let mut ttl = entry.ttl;
        let mut last = false;
        if let Some(hold_until) = entry.hold_until {
            // The last renewal is cut short so that the lock ends at the hold limit.
            let left = hold_until.saturating_duration_since(now);
            if left < Duration::from_millis(1) {
                tracked.renewing = false;
                continue;
            }
            if left <= ttl {
                ttl = left;
                last = true;
            }
        }
        if last {
            // The shortened TTL may take effect even if the reply never comes.
            let entry = &mut tracked.entry;
            entry.valid_until = entry
                .valid_until
                .min(now + ttl.saturating_sub(entry.drift.of(ttl)));
            entry.state.set_valid_until(entry.valid_until);
        }
        tracked.in_flight = true;
        tracked.last_sent = Some(now);
        due.push(Due {
            id: *id,
            ttl: Duration::from_millis(ttl.as_millis() as u64),
            last,
        });
    }
    due
}

/// Groups due leases into calls: one renewal script per call (a primitive's), keys of one
/// hash slot per call on a cluster, at most [`MAX_BATCH_LEASES`] each.
fn batches(leases: &BTreeMap<u64, Tracked>, due: Vec<Due>, per_slot: bool) -> Vec<Vec<Due>> {
    // One script hash and (on a cluster) one hash-slot computation — a CRC of the key — per
    // lease, not one per comparison.
    let mut keyed: Vec<(&str, u16, Due)> = due
        .into_iter()
        .map(|due| {
            let claim = &leases[&due.id].entry.claim;
            let script = claim.renewal_script().get_hash();
            let slot = match per_slot {
                true => crate::fence::hash_slot(claim.keys().get(0).expect("a claim has keys")),
                false => 0,
            };
            (script, slot, due)
        })
        .collect();
    keyed.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    keyed
        .chunk_by(|a, b| (a.0, a.1) == (b.0, b.1))
        .flat_map(|same| same.chunks(MAX_BATCH_LEASES))
        .map(|chunk| chunk.iter().map(|(_, _, due)| *due).collect())
        .collect()
}

/// Takes in the answer to a renewal call.
fn apply<C: Connection>(leases: &mut BTreeMap<u64, Tracked>, done: BatchDone, ends: &Ends<'_, C>) {
    let renewals = match done.result {
        Ok(renewals) => renewals,
        Err(e) => return retry_later(leases, &done.leases, e, ends.meter),
    };
    for (due, renewal) in done.leases.iter().zip(renewals) {
        let id = due.id;
        // A lease released, stopped or lost meanwhile is no longer in the table.
        let Some(tracked) = leases.get_mut(&id) else {
            continue;
        };
        tracked.in_flight = false;
        match renewal {
            // Confirmed after the loss deadline (the reply won a race with the timer): too
            // late to count; the next pass declares the lease lost.
            Renewal::Renewed { .. } if Instant::now() >= tracked.lost_at() => {}
            Renewal::Renewed {
                sent_at,
                valid_until,
                asked,
            } => {
                if asked {
                    tracked.entry.state.ask_release();
                }
                tracked.renewing = !due.last;
                let entry = &mut tracked.entry;
                entry.valid_until = entry.valid_until.max(valid_until);
                entry.next_renewal = sent_at + entry.interval;
                tracked.last_error = None;
                entry.state.renewed(entry.valid_until);
                ends.meter.renewal(true);
                if std::mem::take(&mut tracked.prompted) {
                    tracked.prompt();
                }
            }
            Renewal::NotHeld => {
                let tracked = leases.remove(&id).expect("found above");
                ends.lose(tracked.entry, LostReason::NotHeld);
            }
            Renewal::Failed(e) => retry_later(leases, std::slice::from_ref(due), e, ends.meter),
        }
    }
}

/// A renewal call failed: try those leases again soon; they are declared lost if no
/// renewal gets through before their validity ends.
fn retry_later(
    leases: &mut BTreeMap<u64, Tracked>,
    batch: &[Due],
    error: redis::RedisError,
    meter: &Meter,
) {
    let now = Instant::now();
    // One event per failed call (not per lease: a call renews up to a thousand), naming
    // the lease that runs out first.
    let soonest = (batch.iter())
        .filter_map(|due| leases.get(&due.id))
        .min_by_key(|tracked| tracked.entry.valid_until);
    if let Some(tracked) = soonest {
        let left = tracked.entry.valid_until.saturating_duration_since(now);
        tracing::warn!(
            lock.name = %lock_name(&*tracked.entry.claim),
            kind = tracked.entry.claim.kind(),
            leases = batch.len(),
            error = %error,
            validity_left_ms = left.as_millis() as u64,
            "redmutex: renewal failed; retrying while the lease is valid"
        );
    }
    for due in batch {
        if let Some(tracked) = leases.get_mut(&due.id) {
            meter.renewal(false);
            tracked.in_flight = false;
            // (The retry reads the key afresh: it answers a prompt that came meanwhile.)
            tracked.prompted = false;
            tracked.entry.next_renewal =
                now + (tracked.entry.interval / 4).max(Duration::from_millis(1));
            tracked.last_error = Some(error.clone());
        }
    }
}
