//! The herd workload: N separate lockers (one per process in real life, each with its own
//! connection and wake-up subscriber) on one key, each holding it [`HOLD`] and wanting it
//! again at once. What it shows is what one hand-off costs as N grows: the server's
//! commands (script calls apart) and CPU per acquisition, and the hand-off latency — from
//! the release sent to the next holder's acquire returning. A lock whose release wakes
//! every waiting process pays per hand-off in proportion to N; one that hands the key to
//! one process pays the same whatever N.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contender::Contender;
use crate::stats::Latencies;
use crate::workload::{self, Row, Window};

/// How long each locker holds the key per turn.
pub const HOLD: Duration = Duration::from_millis(1);

/// How many lockers the herd rows run with.
pub const SIZES: [usize; 4] = [2, 8, 32, 64];

/// `lockers` take turns on one key for `duration`. The row's p50/p99 are the hand-off
/// latency; its notes give script calls and server CPU per acquisition.
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
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let runs = lockers.iter().map(|contender| {
        let (contender, key) = (contender.clone(), key.clone());
        let released_at = released_at.clone();
        tokio::spawn(async move {
            let mut handoffs = Latencies::default();
            while Instant::now() < deadline {
                let held = contender.acquire_waiting(&key).await?;
                let since = released_at.lock().expect("not poisoned").take();
                if let Some(since) = since {
                    handoffs.record(since.elapsed());
                }
                tokio::time::sleep(HOLD).await;
                *released_at.lock().expect("not poisoned") = Some(Instant::now());
                contender.release(&key, held).await?;
            }
            Ok::<_, String>(handoffs)
        })
    });
    let handoffs = workload::gather(runs).await?;
    let spent = window.close().await?;
    let acquisitions = handoffs.len() as u64 + 1;
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
