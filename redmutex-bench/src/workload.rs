//! The workloads, and the table they fill.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redmutex::{Lease, Locker};
use tokio::time::Instant;

use crate::connect;
use crate::contender::Contender;
use crate::stats::{self, Latencies};

/// One line of the table.
pub struct Row {
    pub workload: String,
    pub implementation: &'static str,
    /// Cycles (uncontended), acquisitions (contended) or renewals (keep-alive).
    pub ops: u64,
    pub ops_per_s: f64,
    pub p50: Duration,
    pub p99: Duration,
    /// Redis commands per op, script-internal commands included.
    pub commands_per_op: Option<f64>,
    pub notes: String,
    pub vs_baseline: Option<Ratio>,
    pub vs_rslock: Option<Ratio>,
}

/// This row against another: throughput ratio and p50 ratio.
#[derive(Clone, Copy)]
pub struct Ratio {
    pub throughput: f64,
    pub p50: f64,
}

/// `tasks` tasks, each on its own key, acquire and release as fast as they can.
pub async fn uncontended(
    workload: &str,
    contender: Arc<Contender>,
    tasks: usize,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let key = |task: usize| format!("bench:{}:{}:{task}", slug(workload), contender.name());
    // Warm up: connections, scripts loaded on the server.
    for _ in 0..50 {
        let held = contender
            .try_acquire(&key(0))
            .await?
            .ok_or("busy while warming up")?;
        contender.release(&key(0), held).await?;
    }
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let runs = (0..tasks).map(|task| {
        let contender = contender.clone();
        let key = key(task);
        tokio::spawn(async move {
            let mut latencies = Latencies::default();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let held = contender
                    .try_acquire(&key)
                    .await?
                    .ok_or_else(|| format!("{key} busy in an uncontended run"))?;
                contender.release(&key, held).await?;
                latencies.record(t0.elapsed());
            }
            Ok::<_, String>(latencies)
        })
    });
    let latencies = gather(runs).await?;
    let spent = window.close().await?;
    // The client's CPU per cycle: what the library itself costs (the servers run in
    // processes of their own).
    let notes = format!(
        "client CPU {:.2} µs/cycle",
        spent.cpu.as_secs_f64() * 1e6 / latencies.len().max(1) as f64
    );
    Ok(row(workload, &contender, latencies, &spent, notes))
}

/// How long a contended task waits between releasing the lock and wanting it again: the
/// work it does outside. Without it, on one client thread, the task that just released
/// would usually win again before any waiter had its turn, and the run would measure that.
const OUTSIDE: Duration = Duration::from_millis(1);

/// How the contended tasks wait for the lock.
#[derive(Clone, Copy)]
pub enum Waiting {
    /// Each implementation as it does best ([`Contender::acquire_waiting`]).
    Best,
    /// By polling with random pauses alone ([`Contender::acquire_polling`]).
    Polling,
}

/// `tasks` tasks take turns on one key: each waits for it, holds it for a moment (one
/// yield), releases it, and works outside for [`OUTSIDE`] before wanting it again.
pub async fn contended(
    workload: &str,
    contender: Arc<Contender>,
    tasks: usize,
    waiting: Waiting,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let key = format!("bench:{}:{}", slug(workload), contender.name());
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let runs = (0..tasks).map(|_| {
        let (contender, key, inside, overlaps) = (
            contender.clone(),
            key.clone(),
            inside.clone(),
            overlaps.clone(),
        );
        tokio::spawn(async move {
            let mut waits = Latencies::default();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let held = match waiting {
                    Waiting::Best => contender.acquire_waiting(&key).await?,
                    Waiting::Polling => contender.acquire_polling(&key).await?,
                };
                waits.record(t0.elapsed());
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                contender.release(&key, held).await?;
                tokio::time::sleep(OUTSIDE).await;
            }
            Ok::<_, String>(waits)
        })
    });
    let mut waits = gather(runs).await?;
    let spent = window.close().await?;
    let overlaps = overlaps.load(Ordering::SeqCst);
    let notes = format!(
        "p50/p99 = wait for the lock, longest {}; {overlaps} overlaps; client CPU {:.1} µs per \
         acquisition; per acquisition: {}",
        micros(waits.percentile(100.0)),
        spent.cpu.as_secs_f64() * 1e6 / waits.len().max(1) as f64,
        spent.after.per_op_since(&spent.before, waits.len() as u64)
    );
    Ok(row(workload, &contender, waits, &spent, notes))
}

/// `keys` distinct keys, each locked once and released, one after another (redmutex's
/// `fenced` variant takes each lock's fence): what the run leaves in Redis — keys, keys
/// without an expiry, memory.
pub async fn keyspace(
    contender: Arc<Contender>,
    keys: usize,
    stats_url: &str,
) -> Result<Row, String> {
    let workload = format!("keyspace {keys}");
    let mut admin = connect(stats_url).await?;
    let used = |info: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut memory = redis::cmd("INFO");
    memory.arg("memory");
    let info: String = memory
        .query_async(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let (memory_before, window) = (used(&info), Window::open(stats_url).await?);
    let mut latencies = Latencies::default();
    let prefix = format!("bench:keyspace:{}", contender.name());
    for i in 0..keys {
        let key = format!("{prefix}:{i}");
        let t0 = Instant::now();
        let held = contender.try_acquire(&key).await?.ok_or("busy")?;
        contender.release(&key, held).await?;
        latencies.record(t0.elapsed());
    }
    let spent = window.close().await?;
    let info: String = memory
        .query_async(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let left: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("*{prefix}*"))
        .query_async(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let mut forever = 0;
    for key in &left {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut admin)
            .await
            .map_err(|e| e.to_string())?;
        forever += u64::from(ttl == -1);
    }
    let grown = used(&info).saturating_sub(memory_before);
    let notes = format!(
        "left in Redis: {} keys ({forever} without an expiry), used_memory +{:.1} MB",
        left.len(),
        grown as f64 / 1e6
    );
    Ok(row(&workload, &contender, latencies, &spent, notes))
}

/// Many kept-alive leases held for a while: what renewing them costs.
pub async fn keep_alive(
    locker: Locker<MultiplexedConnection>,
    implementation: &'static str,
    leases: usize,
    hold: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let ttl = Duration::from_secs(3);
    let workload = format!("keepalive {leases}");
    let rss_before = stats::resident_bytes();
    let mut held: Vec<Lease<MultiplexedConnection>> = Vec::with_capacity(leases);
    for chunk in (0..leases).collect::<Vec<_>>().chunks(500) {
        let acquired = join_all(chunk.iter().map(|i| {
            let locker = &locker;
            async move { locker.acquire(format!("bench:keepalive:{i}"), ttl).await }
        }))
        .await;
        for lock in acquired {
            let lease = lock
                .and_then(redmutex::Lock::keep_alive)
                .map_err(|e| e.to_string())?;
            held.push(lease);
        }
    }
    let memory_per_lease = stats::resident_bytes().saturating_sub(rss_before) / leases as u64;
    // With wake-up, the leases' subscriptions are made in the background: the window opens
    // once they are (at most 10 s later).
    let subscribing = Instant::now();
    let mut channels = stats::pubsub_channels(stats_url).await?;
    while implementation == "woken" && (channels as usize) < leases {
        if subscribing.elapsed() > Duration::from_secs(10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        channels = stats::pubsub_channels(stats_url).await?;
    }
    let subscribed_in = subscribing.elapsed();
    let window = Window::open(stats_url).await?;
    tokio::time::sleep(hold).await;
    let Spent {
        elapsed,
        cpu,
        before,
        after,
        ..
    } = window.close().await?;
    let lost = held.iter().filter(|l| l.is_lost()).count();
    let renewals: u64 = held.iter().map(Lease::renewals).sum();
    let calls = after.of_since("evalsha", &before) + after.of_since("eval", &before);
    let commands = after.since(&before);
    let rounds = (elapsed.as_secs_f64() / (ttl.as_secs_f64() / 3.0)).max(1.0);
    let mut remaining = held;
    while !remaining.is_empty() {
        let batch: Vec<_> = remaining.drain(..remaining.len().min(500)).collect();
        join_all(batch.into_iter().map(Lease::release)).await;
    }
    let notes = format!(
        "{lost} lost; {:.1} renewal calls/round ({:.0} Redis cmds/round incl. script-internal); \
         CPU {:.1} µs/renewal; {} B/lease; {channels} channels subscribed (within {subscribed_in:.0?})",
        calls as f64 / rounds,
        commands as f64 / rounds,
        cpu.as_secs_f64() * 1e6 / renewals.max(1) as f64,
        memory_per_lease
    );
    Ok(Row {
        workload,
        implementation,
        ops: renewals,
        ops_per_s: renewals as f64 / elapsed.as_secs_f64(),
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        commands_per_op: Some(commands as f64 / renewals.max(1) as f64),
        notes,
        vs_baseline: None,
        vs_rslock: None,
    })
}

/// Waits for every task of a run and merges what they measured; the first error wins.
pub(crate) async fn gather(
    runs: impl Iterator<Item = tokio::task::JoinHandle<Result<Latencies, String>>>,
) -> Result<Latencies, String> {
    let mut all = Latencies::default();
    for run in join_all(runs).await {
        all.merge(run.map_err(|e| e.to_string())??);
    }
    Ok(all)
}

pub(crate) fn row(
    workload: &str,
    contender: &Contender,
    mut latencies: Latencies,
    spent: &Spent,
    notes: String,
) -> Row {
    let ops = latencies.len() as u64;
    Row {
        workload: workload.to_owned(),
        implementation: contender.name(),
        ops,
        ops_per_s: ops as f64 / spent.elapsed.as_secs_f64(),
        p50: latencies.percentile(50.0),
        p99: latencies.percentile(99.0),
        commands_per_op: Some(spent.after.since(&spent.before) as f64 / ops.max(1) as f64),
        notes,
        vs_baseline: None,
        vs_rslock: None,
    }
}

/// The measured stretch of a workload: from [`Window::open`] to [`Window::close`].
pub(crate) struct Window {
    admin: MultiplexedConnection,
    before: stats::Counts,
    cpu_before: Duration,
    server_cpu_before: Duration,
    pub(crate) started: Instant,
}

/// What a [`Window`] cost: wall time, this process's CPU, and the server's command counts
/// at both ends.
pub(crate) struct Spent {
    elapsed: Duration,
    cpu: Duration,
    server_cpu: Duration,
    before: stats::Counts,
    after: stats::Counts,
}

impl Spent {
    /// Script calls (`EVALSHA`, `EVAL`) the server ran.
    pub(crate) fn script_calls(&self) -> u64 {
        ["evalsha", "eval", "evalsha_ro", "eval_ro"]
            .iter()
            .map(|command| self.after.of_since(command, &self.before))
            .sum()
    }

    /// CPU time the server used.
    pub(crate) fn server_cpu(&self) -> Duration {
        self.server_cpu
    }

    /// Each command's calls per op (see [`stats::Counts::per_op_since`]).
    pub(crate) fn per_op(&self, ops: u64) -> String {
        self.after.per_op_since(&self.before, ops)
    }
}

impl Window {
    pub(crate) async fn open(stats_url: &str) -> Result<Window, String> {
        let mut admin = connect(stats_url).await?;
        let before = counts(&mut admin).await?;
        let server_cpu_before = server_cpu(&mut admin).await?;
        Ok(Window {
            admin,
            before,
            cpu_before: stats::cpu_time(),
            server_cpu_before,
            started: Instant::now(),
        })
    }

    pub(crate) async fn close(mut self) -> Result<Spent, String> {
        let elapsed = self.started.elapsed();
        let cpu = stats::cpu_time().saturating_sub(self.cpu_before);
        let after = counts(&mut self.admin).await?;
        let server_cpu = server_cpu(&mut self.admin).await?;
        Ok(Spent {
            elapsed,
            cpu,
            server_cpu: server_cpu.saturating_sub(self.server_cpu_before),
            before: self.before,
            after,
        })
    }
}

async fn server_cpu(admin: &mut MultiplexedConnection) -> Result<Duration, String> {
    stats::server_cpu(admin).await.map_err(|e| e.to_string())
}

async fn counts(admin: &mut MultiplexedConnection) -> Result<stats::Counts, String> {
    stats::command_counts(admin)
        .await
        .map_err(|e| e.to_string())
}

/// The median of one contender's rounds by throughput; with more than one round, its notes
/// gain the spread of throughput over all rounds.
pub fn median(mut rounds: Vec<Row>) -> Row {
    rounds.sort_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
    let (low, high) = (rounds[0].ops_per_s, rounds[rounds.len() - 1].ops_per_s);
    let count = rounds.len();
    let mut middle = rounds.swap_remove(count / 2);
    if count > 1 {
        let spread = format!("median of {count} rounds ({low:.0}–{high:.0} ops/s)");
        middle.notes = if middle.notes.is_empty() {
            spread
        } else {
            format!("{}; {spread}", middle.notes)
        };
    }
    middle
}

/// `rows` against `others`, round by round (measured side by side): the median of each
/// round's throughput ratio, and of its p50 ratio.
pub fn paired(rows: &[Row], others: &[Row]) -> Ratio {
    let median = |mut ratios: Vec<f64>| {
        ratios.sort_by(f64::total_cmp);
        let middle = ratios.len() / 2;
        match ratios.len() % 2 {
            1 => ratios[middle],
            _ => (ratios[middle - 1] + ratios[middle]) / 2.0,
        }
    };
    let pairs = || rows.iter().zip(others);
    Ratio {
        throughput: median(pairs().map(|(a, b)| a.ops_per_s / b.ops_per_s).collect()),
        p50: median(
            pairs()
                .map(|(a, b)| a.p50.as_secs_f64() / b.p50.as_secs_f64())
                .collect(),
        ),
    }
}

fn slug(workload: &str) -> String {
    workload
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Each row against the baseline and rslock rows of the same workload.
pub fn fill_ratios(rows: &mut [Row]) {
    let find = |rows: &[Row], workload: &str, implementation: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.implementation == implementation)
            .map(|r| (r.ops_per_s, r.p50))
    };
    let ratios: Vec<(Option<Ratio>, Option<Ratio>)> = rows
        .iter()
        .map(|row| {
            let against = |other: Option<(f64, Duration)>| {
                other.map(|(ops, p50)| Ratio {
                    throughput: row.ops_per_s / ops,
                    p50: row.p50.as_secs_f64() / p50.as_secs_f64(),
                })
            };
            (
                against(find(rows, &row.workload, "baseline")),
                against(find(rows, &row.workload, "rslock")),
            )
        })
        .collect();
    // Rows measured in rounds already have their ratios, paired round by round.
    for (row, (vs_baseline, vs_rslock)) in rows.iter_mut().zip(ratios) {
        row.vs_baseline = row.vs_baseline.or(vs_baseline);
        row.vs_rslock = row.vs_rslock.or(vs_rslock);
    }
}

pub fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<18} {:<9} {:>10} {:>9} {:>9} {:>7} {:>15} {:>15}  notes",
        "workload", "impl", "ops/s", "p50", "p99", "cmds/op", "×base ops/p50", "×rslock ops/p50"
    );
    for row in rows {
        let ratio = |r: Option<Ratio>| {
            r.map_or("-".to_owned(), |r| {
                format!("{:.2}/{:.2}", r.throughput, r.p50)
            })
        };
        println!(
            "{:<18} {:<9} {:>10.0} {:>9} {:>9} {:>7} {:>15} {:>15}  {}",
            row.workload,
            row.implementation,
            row.ops_per_s,
            micros(row.p50),
            micros(row.p99),
            row.commands_per_op
                .map_or("-".into(), |c| format!("{c:.2}")),
            ratio(row.vs_baseline),
            ratio(row.vs_rslock),
            row.notes
        );
    }
}

fn micros(d: Duration) -> String {
    if d.is_zero() {
        "-".into()
    } else {
        format!("{}µs", d.as_micros())
    }
}

impl Row {
    /// One JSON object (numbers in plain units: ops/s, microseconds).
    pub fn json(&self) -> String {
        let num = |v: Option<f64>| {
            v.filter(|v| v.is_finite())
                .map_or("null".into(), |v| format!("{v:.4}"))
        };
        format!(
            "{{\"workload\":\"{}\",\"impl\":\"{}\",\"ops\":{},\"ops_per_s\":{:.1},\"p50_us\":{},\"p99_us\":{},\
             \"commands_per_op\":{},\"throughput_vs_baseline\":{},\"p50_vs_baseline\":{},\
             \"throughput_vs_rslock\":{},\"p50_vs_rslock\":{},\"notes\":\"{}\"}}",
            self.workload,
            self.implementation,
            self.ops,
            self.ops_per_s,
            self.p50.as_micros(),
            self.p99.as_micros(),
            num(self.commands_per_op),
            num(self.vs_baseline.map(|r| r.throughput)),
            num(self.vs_baseline.map(|r| r.p50)),
            num(self.vs_rslock.map(|r| r.throughput)),
            num(self.vs_rslock.map(|r| r.p50)),
            self.notes.replace('"', "'")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(ops_per_s: f64, p50_us: u64) -> Row {
        Row {
            workload: "w".to_owned(),
            implementation: "x",
            ops: 1,
            ops_per_s,
            p50: Duration::from_micros(p50_us),
            p99: Duration::ZERO,
            commands_per_op: None,
            notes: String::new(),
            vs_baseline: None,
            vs_rslock: None,
        }
    }

    #[test]
    fn ratios_are_paired_round_by_round_and_their_median_kept() {
        // The host slows down 10-fold in the second round: both slow alike.
        let ours = [
            measured(110.0, 100),
            measured(11.0, 1000),
            measured(105.0, 100),
        ];
        let theirs = [
            measured(100.0, 200),
            measured(10.0, 2000),
            measured(100.0, 100),
        ];
        let ratio = paired(&ours, &theirs);
        assert!(
            (ratio.throughput - 1.1).abs() < 1e-9,
            "{}",
            ratio.throughput
        );
        assert!((ratio.p50 - 0.5).abs() < 1e-9, "{}", ratio.p50);
        // A ratio of medians would mix rounds: 105 / 100 here.
        let even = paired(&ours[..2], &theirs[..2]);
        assert!((even.throughput - 1.1).abs() < 1e-9);
    }

    #[test]
    fn rows_measured_in_rounds_keep_their_paired_ratios() {
        let mut base = measured(100.0, 100);
        base.implementation = "baseline";
        let mut ours = measured(90.0, 100);
        ours.implementation = "redmutex";
        ours.vs_baseline = Some(Ratio {
            throughput: 1.2,
            p50: 0.8,
        });
        let mut rows = [base, ours];
        fill_ratios(&mut rows);
        assert_eq!(rows[1].vs_baseline.map(|r| r.throughput), Some(1.2));
        assert_eq!(rows[0].vs_baseline.map(|r| r.throughput), Some(1.0));
    }
}
