//! One worker process: many tasks that acquire, hold and release a few keys until the
//! stop time, each reporting its critical sections as lines on stdout (see
//! [`crate::record`]). Tasks take turns being careful, lease, naive, fair, permit,
//! periodic, reader and writer holders (the last five careful too; fair and permit holders
//! are careful ones instead on Redlock, which has neither a fair lock nor a semaphore).

use std::future::IntoFuture;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{
    claim::Keys, connection::Connection, Acquire, Error, Locker, Replication, WakeUpSource, Writes,
};
use tokio::time::Instant;

use crate::clock::{instant_ns, now_ns};
use crate::record::{Answer, Ask, Guarded, Holder, Outcome, Release, Section, Write, PERMITS};
use crate::schedule::Mode;
use testkit::Rng;

/// Lock keys are `torture:k0`, `torture:k1`, …
pub const PREFIX: &str = "torture:";

/// The guarded resource, on a server no fault touches: it keeps the highest fence that
/// wrote each key and refuses writes with a lower one — the check the crate docs ask of
/// storage. It numbers every write so the checker can replay them in order.
const FENCED_WRITE: &str = r"
-- KEYS[1]: the resource's highest accepted fence; KEYS[2]: the write counter.
-- ARGV[1]: the writer's fence. Returns {accepted (1/0), write number}.
local seq = redis.call('incr', KEYS[2])
local highest = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) < highest then return {0, seq} end
redis.call('set', KEYS[1], ARGV[1])
return {1, seq}
";

/// The worker's command line (given by the coordinator).
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// This worker's index.
    #[arg(long)]
    pub id: u32,
    /// The topology.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Where to lock: one URL (single), five (redlock), the cluster's nodes, or the
    /// sentinels.
    #[arg(long = "url", required = true)]
    pub urls: Vec<String>,
    /// The guarded resource's server.
    #[arg(long)]
    pub storage: String,
    /// How many keys to contend for.
    #[arg(long)]
    pub keys: u32,
    /// Tasks in this process.
    #[arg(long)]
    pub tasks: u32,
    /// Lock TTL in milliseconds.
    #[arg(long)]
    pub ttl_ms: u64,
    /// Start and stop, on the shared monotonic clock (ns).
    #[arg(long)]
    pub start_at: u64,
    /// See `start_at`.
    #[arg(long)]
    pub stop_at: u64,
    /// The run's seed.
    #[arg(long)]
    pub seed: u64,
    /// Wait with push wake-up instead of polling alone.
    #[arg(long)]
    pub wake_up: bool,
    /// For the checker's own test: careful and permit holders trust a validity twice the TTL from
    /// when the lock arrived (a library that forgot the time the request took and the
    /// expiry) and hold that long, so the checker must find overlaps.
    #[arg(long, hide = true)]
    pub sabotage_validity: bool,
}

/// Runs the worker; exit code 0 when it ran to the stop time.
pub fn main(args: WorkerArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            println!("fatal {message}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: WorkerArgs) -> Result<(), String> {
    let storage = redis::Client::open(args.storage.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("storage: {e}"))?;
    let clients = (args.urls.iter())
        .map(|url| redis::Client::open(url.as_str()).map(WakeUpSource::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    match args.mode {
        Mode::Single => {
            let conn = redmutex::connection::connect(&args.urls[0])
                .await
                .map_err(|e| e.to_string())?;
            let locker = Locker::new(conn);
            drive(locker, clients, storage, args).await
        }
        Mode::Redlock => {
            let nodes = args
                .urls
                .iter()
                .map(|url| redmutex::connection::connect_lazy(url))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let locker = Locker::redlock(nodes).map_err(|e| e.to_string())?;
            drive(locker, clients, storage, args).await
        }
        Mode::Cluster => {
            let conn = redis::cluster::ClusterClient::builder(args.urls.clone())
                .connection_timeout(Duration::from_secs(1))
                .response_timeout(redmutex::connection::RESPONSE_TIMEOUT)
                .build()
                .map_err(|e| e.to_string())?
                .get_async_connection()
                .await
                .map_err(|e| format!("cluster: {e}"))?;
            let locker = Locker::cluster(conn);
            // One subscriber, on the shard channels of each key's master.
            let subscriber = WakeUpSource::cluster(args.urls.clone()).map_err(|e| e.to_string())?;
            drive(locker, vec![subscriber], storage, args).await
        }
        Mode::Sentinel | Mode::SentinelConfirmed => {
            let conn = redmutex::sentinel::connect(&args.urls, testkit::MASTER_NAME)
                .await
                .map_err(|e| format!("sentinel: {e}"))?;
            let locker = match args.mode {
                Mode::SentinelConfirmed => Locker::new(conn)
                    .with_replication(Replication::new(1, Duration::from_millis(100)))
                    .map_err(|e| e.to_string())?,
                _ => Locker::new(conn),
            };
            drive(locker, Vec::new(), storage, args).await
        }
    }
}

/// What a worker saw besides its sections.
#[derive(Default)]
struct Tally {
    not_obtained: u64,
    transient: u64,
    other: u64,
    /// Acquisitions lost before their holder asked for the fence: none was handed out.
    no_fence: u64,
    messages: Vec<String>,
}

impl Tally {
    fn failed(&mut self, e: &Error) {
        if e.is_not_obtained() {
            self.not_obtained += 1;
        } else if e.is_transient() {
            self.transient += 1;
        } else {
            self.other += 1;
            let message = e.to_string();
            if self.messages.len() < 5 && !self.messages.contains(&message) {
                self.messages.push(message);
            }
        }
    }
}

struct Shared {
    out: Mutex<std::io::BufWriter<std::io::Stdout>>,
    tally: Mutex<Tally>,
}

impl Shared {
    fn line(&self, line: &str) {
        let mut out = self.out.lock().unwrap();
        let _ = writeln!(out, "{line}");
    }
}

async fn drive<C: Connection>(
    locker: Locker<C>,
    clients: Vec<WakeUpSource>,
    storage: redis::aio::MultiplexedConnection,
    args: WorkerArgs,
) -> Result<(), String> {
    let locker = if args.wake_up {
        locker.with_wake_up(clients).map_err(|e| e.to_string())?
    } else {
        locker
    };
    let locker = locker.with_prefix(PREFIX);
    let shared = Arc::new(Shared {
        out: Mutex::new(std::io::BufWriter::new(std::io::stdout())),
        tally: Mutex::new(Tally::default()),
    });
    let wait = args.start_at.saturating_sub(now_ns());
    tokio::time::sleep(Duration::from_nanos(wait)).await;
    let tasks: Vec<_> = (0..args.tasks)
        .map(|task| {
            let kinds = Holder::ALL.len() as u32;
            let holder = match Holder::ALL[((args.id + task) % kinds) as usize] {
                // Redlock refuses both (see `Holder`): careful holders instead.
                Holder::Fair | Holder::Permit if args.mode == Mode::Redlock => Holder::Careful,
                holder => holder,
            };
            tokio::spawn(holder_task(
                locker.clone(),
                storage.clone(),
                shared.clone(),
                args.clone(),
                task,
                holder,
            ))
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| format!("task panicked: {e}"))?;
    }
    let tally = std::mem::take(&mut *shared.tally.lock().unwrap());
    shared.line(&format!(
        "tally not_obtained={} transient={} other={} no_fence={}",
        tally.not_obtained, tally.transient, tally.other, tally.no_fence
    ));
    for message in &tally.messages {
        shared.line(&format!("error {message}"));
    }
    let flushed = shared.out.lock().unwrap().flush();
    flushed.map_err(|e| e.to_string())
}

/// One acquisition by `acquire` and its fence — half take it with the keys, half ask for
/// it after (`always_eager`: all with the keys) — with the instant it was held from.
/// `Ok(None)`: nothing to hold (not obtained, a fault, lost before its fence), tallied and
/// paused after; `Err`: a fatal finding, reported.
///
/// Permits always take their fence with the keys: fences go up in the order they are
/// handed out, and for holders that overlap (permits do) a fence asked for later is not
/// handed out in the order the permits were, which the checker's order rule would read
/// as a violation. Exclusive holders hand out one fence at a time, whenever asked.
async fn acquire_fenced<C: Connection, P: redmutex::claim::Held>(
    acquire: Acquire<'_, C, P>,
    always_eager: bool,
    rng: &mut Rng,
    shared: &Shared,
) -> Result<Option<(redmutex::Lock<C, P>, u64, u64)>, ()> {
    let ms = |n: u64| Duration::from_millis(n);
    let eager = always_eager || rng.chance(0.5);
    let acquire = acquire.retry(retry::exponential(ms(2), ms(40)).jitter(Jitter::full()));
    let acquired = match eager {
        true => acquire.with_fence().await,
        false => acquire.await,
    };
    let lock = match acquired {
        Ok(lock) => lock,
        Err(e) => {
            shared.tally.lock().unwrap().failed(&e);
            // Not obtained within the TTL, or a fault: take a breath and go on.
            tokio::time::sleep(rng.between(ms(1), ms(10))).await;
            return Ok(None);
        }
    };
    let start = now_ns();
    if eager && lock.fence_if_taken().is_none() {
        shared.line("fatal an acquisition with_fence without a fence");
        return Err(());
    }
    match lock.fence().await {
        Ok(fence) => Ok(Some((lock, start, fence))),
        Err(e) => {
            // Lost before its fence could be taken (a fault, a frozen process): no fence is
            // handed out, so this holder cannot act; the lock is dropped (released).
            let mut tally = shared.tally.lock().unwrap();
            match e.is_not_held() {
                true => tally.no_fence += 1,
                false => tally.failed(&e),
            }
            Ok(None)
        }
    }
}

/// What a holder of `holder`'s kind does with its lock before the write: when it decided,
/// until when it believed the lock valid, whether it acts, and what it still holds.
async fn decide<C: Connection, P: redmutex::claim::Held>(
    holder: Holder,
    lock: redmutex::Lock<C, P>,
    start: u64,
    args: &WorkerArgs,
    rng: &mut Rng,
    shared: &Shared,
) -> Decision<C, P> {
    let ttl_ms = args.ttl_ms;
    let ms = |n: u64| Duration::from_millis(n);
    match holder {
        Holder::Careful | Holder::Permit if args.sabotage_validity => {
            tokio::time::sleep(rng.between(ms(ttl_ms / 2), ms(ttl_ms * 2))).await;
            let believed = start + 2 * ttl_ms * 1_000_000;
            (now_ns(), believed, Outcome::Kept, Held::Lock(lock), None)
        }
        Holder::Careful
        | Holder::Fair
        | Holder::Permit
        | Holder::Periodic
        | Holder::Reader
        | Holder::Writer => {
            tokio::time::sleep(rng.between(ms(0), ms(ttl_ms / 10))).await;
            let valid_until = lock.valid_until();
            let valid = instant_ns(valid_until.into_std());
            if Instant::now() < valid_until {
                (now_ns(), valid, Outcome::Kept, Held::Lock(lock), None)
            } else {
                // It stopped believing when its validity ran out.
                (valid, valid, Outcome::Expired, Held::Lock(lock), None)
            }
        }
        Holder::Naive => {
            tokio::time::sleep(rng.between(ms(0), ms(ttl_ms / 10))).await;
            let valid = instant_ns(lock.valid_until().into_std());
            (now_ns(), valid, Outcome::Kept, Held::Lock(lock), None)
        }
        // (Leaders hold a lease from their campaign and watchers hold nothing: neither
        // comes here.)
        Holder::Lease | Holder::Leader | Holder::Watcher => {
            let valid_before = instant_ns(lock.valid_until().into_std());
            match lock.keep_alive() {
                Ok(lease) => hold_lease(lease, rng, ttl_ms).await,
                Err(e) => {
                    // The lock was dropped (which releases it); still a section with a
                    // fence, ended before its holder acted.
                    shared.tally.lock().unwrap().failed(&e);
                    (now_ns(), valid_before, Outcome::Lost, Held::Dropped, None)
                }
            }
        }
    }
}

async fn holder_task<C: Connection>(
    locker: Locker<C>,
    storage: redis::aio::MultiplexedConnection,
    shared: Arc<Shared>,
    args: WorkerArgs,
    task: u32,
    holder: Holder,
) {
    let mut rng = Rng::stream(args.seed, (u64::from(args.id) << 32) | u64::from(task));
    let ttl = Duration::from_millis(args.ttl_ms);
    let mut section = Sections {
        storage,
        fenced_write: redis::Script::new(FENCED_WRITE),
        shared: &shared,
        args: &args,
        task,
        holder,
    };
    while now_ns() < args.stop_at {
        let key = rng.index(args.keys as usize) as u32;
        let name = format!("k{key}");
        let done = match holder {
            Holder::Fair => {
                // Its waiters' heartbeat as short as the TTL: a frozen worker's waiters
                // leave the line as soon as its locks expire.
                let fair = locker.fair_lock(&name).and_then(|f| f.with_heartbeat(ttl));
                let Ok(fair) = fair else {
                    shared.line("fatal a fair lock refused on a topology that has one");
                    return;
                };
                section.run(key, fair.acquire(ttl), &mut rng).await
            }
            Holder::Permit => {
                let Ok(semaphore) = locker.semaphore(format!("s{key}"), PERMITS) else {
                    shared.line("fatal a semaphore refused on a topology that has one");
                    return;
                };
                section.run(key, semaphore.acquire(1, ttl), &mut rng).await
            }
            Holder::Reader | Holder::Writer => {
                // Its waiting writers' heartbeat as short as the TTL, as for fair waiters.
                let rw = locker.rw_lock(&name).and_then(|rw| rw.with_heartbeat(ttl));
                let Ok(rw) = rw else {
                    shared.line("fatal a read-write lock refused");
                    return;
                };
                match holder {
                    Holder::Reader => section.run(key, rw.read(ttl), &mut rng).await,
                    _ => section.run(key, rw.write(ttl), &mut rng).await,
                }
            }
            Holder::Leader => {
                let election = locker.election(&name).and_then(|e| e.with_ttl(ttl));
                let Ok(election) = election else {
                    shared.line("fatal an election refused");
                    return;
                };
                section.lead(key, &election, &mut rng).await
            }
            Holder::Watcher => section.watch(key, &locker, &name, &mut rng).await,
            // At most one run per TTL: kept for a TTL from the acquire, however soon it is
            // released (not when sabotaged: the checker must then find the key taken early).
            Holder::Periodic if !args.sabotage_validity => {
                let acquire = locker.acquire(&name, ttl).min_hold(ttl);
                section.run(key, acquire, &mut rng).await
            }
            _ => section.run(key, locker.acquire(&name, ttl), &mut rng).await,
        };
        if done.is_err() {
            return;
        }
    }
}

/// What a task needs to run its critical sections.
struct Sections<'a> {
    storage: redis::aio::MultiplexedConnection,
    fenced_write: redis::Script,
    shared: &'a Shared,
    args: &'a WorkerArgs,
    task: u32,
    holder: Holder,
}

impl Sections<'_> {
    /// One critical section on `key`, taken by `acquire`, recorded as a line. `Err`: a
    /// fatal finding, reported; the task stops.
    async fn run<C: Connection, P: redmutex::claim::Held>(
        &mut self,
        key: u32,
        acquire: Acquire<'_, C, P>,
        rng: &mut Rng,
    ) -> Result<(), ()> {
        let (shared, args, holder) = (self.shared, self.args, self.holder);
        let asked = now_ns();
        let eager = matches!(holder, Holder::Permit | Holder::Reader);
        let (lock, start, fence) = match acquire_fenced(acquire, eager, rng, shared).await? {
            Some(acquired) => acquired,
            None => return Ok(()),
        };
        let decision = decide(holder, lock, start, args, rng, shared).await;
        self.finish(key, (asked, start, fence), decision).await;
        Ok(())
    }

    /// One leadership of the election of `key`: a campaign of at most a TTL (dropped after
    /// it: cancelled), then held as a lease holder holds its lease, writing with its term.
    async fn lead<C: Connection>(
        &mut self,
        key: u32,
        election: &redmutex::Election<C>,
        rng: &mut Rng,
    ) -> Result<(), ()> {
        let asked = now_ns();
        let ttl = election.ttl();
        let campaign = election.campaign(format!("t{}", self.task)).into_future();
        let campaign = tokio::time::timeout(ttl, campaign);
        let leadership = match campaign.await {
            Ok(Ok(leadership)) => leadership,
            Ok(Err(e)) => {
                self.shared.tally.lock().unwrap().failed(&e);
                tokio::time::sleep(
                    rng.between(Duration::from_millis(1), Duration::from_millis(10)),
                )
                .await;
                return Ok(());
            }
            Err(_) => {
                // Nobody let it lead within a TTL: as "not obtained".
                self.shared.tally.lock().unwrap().not_obtained += 1;
                return Ok(());
            }
        };
        let start = now_ns();
        let term = leadership.term();
        let decision = hold_lease(leadership, rng, self.args.ttl_ms).await;
        self.finish(key, (asked, start, term), decision).await;
        Ok(())
    }

    /// One wait for `key` to be free (at most a TTL), recorded as a watcher's section.
    async fn watch<C: Connection>(
        &mut self,
        key: u32,
        locker: &Locker<C>,
        name: &str,
        rng: &mut Rng,
    ) -> Result<(), ()> {
        // Half the time, first ask whoever holds it to let go (an operator's polite
        // revocation): kept-alive holders that hear it let go at once.
        if rng.chance(0.5) {
            self.ask(key, locker, name).await;
        }
        let asked = now_ns();
        let timeout = Duration::from_millis(self.args.ttl_ms);
        let outcome = match locker.wait_released(name, timeout).await {
            Ok(true) => Outcome::Kept,
            Ok(false) => Outcome::Expired,
            Err(e) => {
                self.shared.tally.lock().unwrap().failed(&e);
                Outcome::Lost
            }
        };
        let end = now_ns();
        let section = Section {
            worker: self.args.id,
            task: self.task,
            holder: Holder::Watcher,
            key,
            fence: 0,
            asked,
            start: asked,
            end,
            valid: end,
            outcome,
            write: Write::Skipped,
            guarded: Guarded::Skipped,
            release: Release::Released,
            heard: None,
        };
        self.shared.line(&section.to_string());
        tokio::time::sleep(rng.between(Duration::from_millis(0), Duration::from_millis(5))).await;
        Ok(())
    }

    /// Asks whoever holds `key` to let it go, recorded as an `ask` line.
    async fn ask<C: Connection>(&mut self, key: u32, locker: &Locker<C>, name: &str) {
        let sent = now_ns();
        let answer = match locker.request_release(name).await {
            Ok(Some(_)) => Answer::Asked,
            Ok(None) => Answer::Nobody,
            Err(e) => {
                self.shared.tally.lock().unwrap().failed(&e);
                Answer::Failed
            }
        };
        let ask = Ask {
            worker: self.args.id,
            task: self.task,
            key,
            sent,
            answered: now_ns(),
            answer,
        };
        self.shared.line(&ask.to_string());
    }

    /// The rest of a section once held: the write (after the decision, as in real code: a
    /// pause here is what only the fence can catch), the release, and the record.
    async fn finish<C: Connection, P: redmutex::claim::Held>(
        &mut self,
        key: u32,
        (asked, start, fence): (u64, u64, u64),
        (decided, mut valid, outcome, held, heard): Decision<C, P>,
    ) {
        let (shared, args, holder) = (self.shared, self.args, self.holder);
        // Permit holders and readers are several at once: the one-writer resource is not
        // theirs.
        let shared_holder = matches!(holder, Holder::Permit | Holder::Reader);
        let write = if outcome == Outcome::Kept && !shared_holder {
            let reply: Result<(u8, u64), _> = (self.fenced_write)
                .key(format!("resource:{{k{key}}}:fence"))
                .key("resource:writes")
                .arg(fence)
                .invoke_async(&mut self.storage)
                .await;
            match reply {
                Ok((1, seq)) => Write::Accepted(seq),
                Ok((_, seq)) => Write::Refused(seq),
                Err(_) => Write::Failed,
            }
        } else {
            Write::Skipped
        };
        let guarded = match shared_holder || args.mode == Mode::Redlock {
            true => Guarded::Skipped,
            false => guarded_write(key, &held, self.task, args).await,
        };
        // A holder that acted believes it holds the lock until it sends the release: its
        // write happened inside that. (Told "lost", it stopped believing when it decided.)
        let end = if outcome == Outcome::Kept {
            if let Held::Lease(lease) = &held {
                valid = instant_ns(lease.valid_until().into_std());
            }
            now_ns()
        } else {
            decided
        };
        let release = match held {
            Held::Lock(lock) => released(lock.release().await),
            Held::Lease(lease) => released(lease.release().await),
            Held::Dropped => Release::Failed,
        };
        let section = Section {
            worker: args.id,
            task: self.task,
            holder,
            key,
            fence,
            asked,
            start,
            end,
            valid,
            outcome,
            write,
            guarded,
            release,
            heard,
        };
        shared.line(&section.to_string());
    }
}

/// The holder's guarded write, whatever it believes (a holder that knows its lock expired
/// tries too: the server must refuse it): an entry pushed onto a list in the lock's hash
/// slot, kept for a TTL after the last write (gone, as locks are, when the run checks
/// what was left). Refused on Redlock (not called there).
async fn guarded_write<C: Connection, P: redmutex::claim::Held>(
    key: u32,
    held: &Held<C, P>,
    task: u32,
    args: &WorkerArgs,
) -> Guarded {
    let list = format!("{{{PREFIX}k{key}}}:guarded");
    let entry = format!("{}.{task}", args.id);
    let mut writes = Writes::new();
    writes.add(redis::cmd("RPUSH").arg(&list).arg(entry), [&list]);
    writes.add(redis::cmd("PEXPIRE").arg(&list).arg(args.ttl_ms), [&list]);
    let sent = now_ns();
    let written = match held {
        Held::Lock(lock) => lock.write_if_held(&writes).await,
        Held::Lease(lease) => lease.write_if_held(&writes).await,
        Held::Dropped => return Guarded::Skipped,
    };
    match written {
        Ok(_) => Guarded::Accepted(sent),
        Err(e) if e.is_not_held() => Guarded::Refused(sent),
        Err(_) => Guarded::Failed(sent),
    }
}

/// When a holder decided (or stopped believing), until when it believed its lock valid,
/// the outcome, what it still holds, and when it heard a request to let go.
type Decision<C, P> = (u64, u64, Outcome, Held<C, P>, Option<u64>);

/// Works under a kept-alive lease: mostly briefly, one time in four long enough to need
/// several renewals, stopping early when told "lost" — or when another process asks it to
/// let go (a watcher's request): it then acts and lets go at once, as a polite holder does.
/// Returns when the holder stopped believing (or decided to act), the lease's validity,
/// the outcome, and when it heard a request.
async fn hold_lease<C: Connection, P: redmutex::claim::Held>(
    lease: redmutex::Lease<C, P>,
    rng: &mut Rng,
    ttl_ms: u64,
) -> Decision<C, P> {
    let ms = Duration::from_millis;
    let work = match rng.index(4) {
        0 => rng.between(ms(ttl_ms), ms(ttl_ms * 2)),
        _ => rng.between(ms(0), ms(ttl_ms / 10)),
    };
    let mut heard = None;
    let lost_at = tokio::select! {
        _ = tokio::time::sleep(work) => None,
        _ = lease.lost() => Some(now_ns()),
        () = lease.release_requested() => {
            heard = Some(now_ns());
            None
        }
    };
    let valid_until = lease.valid_until();
    let valid = instant_ns(valid_until.into_std());
    let (end, outcome) = match lost_at {
        Some(at) => (at, Outcome::Lost),
        None if lease.is_lost() || Instant::now() >= valid_until => (now_ns(), Outcome::Lost),
        None => (now_ns(), Outcome::Kept),
    };
    (end, valid, outcome, Held::Lease(lease), heard)
}

/// What a holder releases once it has written.
enum Held<C: Connection, P: redmutex::claim::Held = Keys> {
    Lock(redmutex::Lock<C, P>),
    Lease(redmutex::Lease<C, P>),
    /// Dropped already (its keep-alive was refused): nothing to release.
    Dropped,
}

fn released(result: Result<(), Error>) -> Release {
    match result {
        Ok(()) => Release::Released,
        Err(e) if e.is_not_held() => Release::NotHeld,
        Err(_) => Release::Failed,
    }
}
