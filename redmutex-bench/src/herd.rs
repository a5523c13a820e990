//! The herd workload: N separate lockers (one per process in real life, each with its own
//! connection and wake-up subscriber) on one key, each holding it [`HOLD`] and wanting it
//! again at once. What it shows is what one hand-off costs as N grows: the server's
//! commands (script calls apart) and CPU per acquisition, and the hand-off latency — from
//! the release sent to the next holder's acquire returning. A lock whose release wakes
//! every waiting process pays per hand-off in proportion to N; one that hands the key to
//! one process pays the same whatever N.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contender::Contender;
use crate::stats::Latencies;
use crate::workload::{self, Row, Spent, Window};

/// How long each locker holds the key per turn.
pub const HOLD: Duration = Duration::from_millis(1);

/// How many lockers the herd rows run with.
pub const SIZES: [usize; 4] = [2, 8, 32, 64];

/// `lockers` take turns on one key; what is measured is `duration` of the steady state,
/// once every locker has held the key once (its subscriber connected, its scripts loaded,
/// its place in line taken): a start-up paid once per process is not a hand-off's cost.
/// The row's p50/p99 are the hand-off latency; its notes give script calls and server CPU
/// per acquisition.
pub async fn herd(
    workload: &str,
    lockers: Vec<Arc<Contender>>,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let name = lockers.first().map_or("?", |c| c.name());
    let key = format!("bench:herd:{name}:{}", lockers.len());
    // When the latest release was sent; the next holder takes it and measures from it.
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let phase = Arc::new(Phase::default());
    let runs = lockers.iter().map(|contender| {
        let (contender, key) = (contender.clone(), key.clone());
        let (released_at, phase) = (released_at.clone(), phase.clone());
        tokio::spawn(async move {
            let mut handoffs = Latencies::default();
            let mut first = true;
            while !phase.stopped.load(Ordering::Relaxed) {
                let held = contender.acquire_waiting(&key).await?;
                let since = released_at.lock().expect("not poisoned").take();
                if let (Some(since), true) = (since, phase.measuring.load(Ordering::Relaxed)) {
                    handoffs.record(since.elapsed());
                }
                if std::mem::take(&mut first) {
                    phase.started.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(HOLD).await;
                *released_at.lock().expect("not poisoned") = Some(Instant::now());
                contender.release(&key, held).await?;
            }
            Ok::<_, String>(handoffs)
        })
    });
    let runs: Vec<_> = runs.collect();
    let spent = phase.measure(lockers.len(), duration, stats_url).await;
    let handoffs = workload::gather(runs.into_iter()).await?;
    let spent = spent?;
    let acquisitions = (handoffs.len() as u64).max(1);
    let scripts = spent.script_calls();
    let notes = format!(
        "p50/p99 = hand-off; script calls {:.1}/acq; server CPU {:.0} µs/acq; {}",
        scripts as f64 / acquisitions as f64,
        spent.server_cpu().as_secs_f64() * 1e6 / acquisitions as f64,
        spent.per_op(acquisitions),
    );
    let contender = lockers.first().ok_or("no lockers")?;
    Ok(workload::row(workload, contender, handoffs, &spent, notes))
}

/// Where a herd run is: how many lockers held the key once, whether hand-offs are being
/// measured, and whether the lockers should stop.
#[derive(Default)]
struct Phase {
    started: AtomicUsize,
    measuring: AtomicBool,
    stopped: AtomicBool,
}

impl Phase {
    /// Waits (at most 30 s) until all `lockers` held the key once, then measures
    /// `duration`; the lockers are told to stop either way.
    async fn measure(
        &self,
        lockers: usize,
        duration: Duration,
        stats_url: &str,
    ) -> Result<Spent, String> {
        let warm_until = Instant::now() + Duration::from_secs(30);
        while self.started.load(Ordering::Relaxed) < lockers && Instant::now() < warm_until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let measured = async {
            let window = Window::open(stats_url).await?;
            self.measuring.store(true, Ordering::Relaxed);
            tokio::time::sleep(duration).await;
            self.measuring.store(false, Ordering::Relaxed);
            window.close().await
        };
        let spent = measured.await;
        self.stopped.store(true, Ordering::Relaxed);
        spent
    }
}
