//! The fairness workload: separate lockers (one per process in real life) take turns on
//! one key, each holding it a while and wanting it again at once. What it shows is how the
//! acquisitions spread over the lockers — Jain's index, 1.0 when all got the same — and
//! the longest any of them waited, next to the throughput.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::contender::Contender;
use crate::stats::Latencies;
use crate::workload::{self, Row, Window};

/// How long each locker holds the key per turn.
pub const HOLD: Duration = Duration::from_millis(20);

/// What one locker did in a run.
struct Share {
    acquisitions: u64,
    waits: Latencies,
}

/// Jain's fairness index of `shares`: (Σx)² / (n·Σx²), 1.0 when all are equal, 1/n when
/// one got everything.
pub fn jain(shares: &[u64]) -> f64 {
    let sum: f64 = shares.iter().map(|&x| x as f64).sum();
    let squares: f64 = shares.iter().map(|&x| (x as f64) * (x as f64)).sum();
    match squares > 0.0 {
        true => sum * sum / (shares.len() as f64 * squares),
        false => 0.0,
    }
}

/// `lockers` (each its own contender, with its own connections) take turns on one key
/// for `duration`: wait for it as each implementation does best, hold it [`HOLD`],
/// release, want it again at once.
pub async fn fairness(
    workload: &str,
    lockers: Vec<Arc<Contender>>,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let name = lockers.first().map_or("?", |c| c.name());
    let key = format!("bench:fairness:{name}");
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let runs = lockers.iter().map(|contender| {
        let (contender, key) = (contender.clone(), key.clone());
        tokio::spawn(async move {
            let mut share = Share {
                acquisitions: 0,
                waits: Latencies::default(),
            };
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let held = contender.acquire_waiting(&key).await?;
                share.waits.record(t0.elapsed());
                share.acquisitions += 1;
                tokio::time::sleep(HOLD).await;
                contender.release(&key, held).await?;
            }
            Ok::<_, String>(share)
        })
    });
    let mut shares = Vec::new();
    for run in futures_util::future::join_all(runs).await {
        shares.push(run.map_err(|e| e.to_string())??);
    }
    let spent = window.close().await?;
    let counts: Vec<u64> = shares.iter().map(|s| s.acquisitions).collect();
    let mut waits = Latencies::default();
    for share in shares {
        waits.merge(share.waits);
    }
    let longest = waits.percentile(100.0);
    let notes = format!(
        "Jain {:.3}; longest wait {} ms; acquisitions per locker {:?}; p50/p99 = wait",
        jain(&counts),
        longest.as_millis(),
        counts
    );
    let contender = lockers.first().ok_or("no lockers")?;
    Ok(workload::row(workload, contender, waits, &spent, notes))
}

#[cfg(test)]
mod tests {
    use super::jain;

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_gets_all() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!((jain(&[8, 0, 0, 0]) - 0.25).abs() < 1e-12);
        // The measurement of the plain lock: 14, 1, 231, 1, 654, 1, 10, 2.
        let starved = jain(&[14, 1, 231, 1, 654, 1, 10, 2]);
        assert!((starved - 0.2169).abs() < 1e-3, "{starved}");
    }
}
