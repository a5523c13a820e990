//! The read-mostly workload: tasks of separate lockers read a key nine times for every
//! write, each access holding it a moment. A read-write lock lets the reads run side by
//! side; the other implementations have only exclusive locks, so every access waits for
//! every other. What it shows: accesses per second, the wait for any access, and the
//! writes' own wait (a stream of readers must not starve a writer).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::contender::Contender;
use crate::stats::Latencies;
use crate::workload::{self, Row, Window};

/// How long each access holds the key.
pub const HOLD: Duration = Duration::from_millis(2);

/// One access in this many is a write.
pub const WRITE_EVERY: u64 = 10;

/// What one task measured.
#[derive(Default)]
struct Waits {
    all: Latencies,
    writes: Latencies,
}

/// `lockers` (each its own contender, with its own connections) access one key for
/// `duration`, nine reads to a write, each holding it [`HOLD`]. Counts overlaps the lock
/// should have prevented (a write beside anyone).
pub async fn read_mostly(
    workload: &str,
    lockers: Vec<Arc<Contender>>,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let name = lockers.first().map_or("?", |c| c.name());
    let key = format!("bench:read-mostly:{name}");
    // Readers inside, or -1 while a writer is.
    let inside = Arc::new(AtomicI64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let runs = lockers.iter().enumerate().map(|(task, contender)| {
        let (contender, key) = (contender.clone(), key.clone());
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        tokio::spawn(async move {
            let mut waits = Waits::default();
            // Tasks write at different turns, so writes are spread over time.
            let mut turn = task as u64;
            while Instant::now() < deadline {
                turn += 1;
                let write = turn.is_multiple_of(WRITE_EVERY);
                let t0 = Instant::now();
                let held = contender.acquire_to(&key, write).await?;
                let waited = t0.elapsed();
                waits.all.record(waited);
                let clash = match write {
                    true => inside.swap(-1, Ordering::SeqCst) != 0,
                    false => inside.fetch_add(1, Ordering::SeqCst) < 0,
                };
                if clash {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                if write {
                    waits.writes.record(waited);
                }
                tokio::time::sleep(HOLD).await;
                match write {
                    true => inside.store(0, Ordering::SeqCst),
                    false => {
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                contender.release(&key, held).await?;
            }
            Ok::<_, String>(waits)
        })
    });
    let mut all = Latencies::default();
    let mut writes = Latencies::default();
    for run in futures_util::future::join_all(runs).await {
        let waits = run.map_err(|e| e.to_string())??;
        all.merge(waits.all);
        writes.merge(waits.writes);
    }
    let spent = window.close().await?;
    let notes = format!(
        "p50/p99 = wait for an access; writes ({}) waited p50 {} ms, p99 {} ms, longest {} \
         ms; {} overlaps",
        writes.len(),
        writes.percentile(50.0).as_millis(),
        writes.percentile(99.0).as_millis(),
        writes.percentile(100.0).as_millis(),
        overlaps.load(Ordering::SeqCst)
    );
    let contender = lockers.first().ok_or("no lockers")?;
    Ok(workload::row(workload, contender, all, &spent, notes))
}

/// The semaphore's limit in the permits workload.
pub const PERMITS: u32 = 4;

/// `lockers` (each its own contender) share [`PERMITS`] permits of one semaphore for
/// `duration`, each holding one [`HOLD`] and wanting one again at once. Counts moments
/// with more than [`PERMITS`] holders (there must be none).
pub async fn permits(
    workload: &str,
    lockers: Vec<Arc<Contender>>,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let name = lockers.first().map_or("?", |c| c.name());
    let key = format!("bench:permits:{name}");
    let inside = Arc::new(AtomicI64::new(0));
    let overflows = Arc::new(AtomicU64::new(0));
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let runs = lockers.iter().map(|contender| {
        let (contender, key) = (contender.clone(), key.clone());
        let (inside, overflows) = (inside.clone(), overflows.clone());
        tokio::spawn(async move {
            let mut waits = Latencies::default();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let held = contender.acquire_permit(&key, PERMITS).await?;
                waits.record(t0.elapsed());
                if inside.fetch_add(1, Ordering::SeqCst) >= i64::from(PERMITS) {
                    overflows.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(HOLD).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                contender.release(&key, held).await?;
            }
            Ok::<_, String>(waits)
        })
    });
    // Per locker, how many permits it got (for Jain's index), and every wait.
    let mut shares = Vec::new();
    let mut waits = Latencies::default();
    for run in futures_util::future::join_all(runs).await {
        let run = run.map_err(|e| e.to_string())??;
        shares.push(run.len() as u64);
        waits.merge(run);
    }
    let spent = window.close().await?;
    let (mean, longest) = (waits.mean(), waits.percentile(100.0));
    let notes = format!(
        "p50/p99 = wait for a permit, mean {:.1} ms, longest {} ms ({:.1} × the mean); Jain \
         {:.3} across lockers; {} over the limit of {PERMITS}; the others try {PERMITS} slot \
         keys in turn",
        mean.as_secs_f64() * 1e3,
        longest.as_millis(),
        longest.as_secs_f64() / mean.as_secs_f64().max(1e-9),
        crate::fairness::jain(&shares),
        overflows.load(Ordering::SeqCst)
    );
    let contender = lockers.first().ok_or("no lockers")?;
    Ok(workload::row(workload, contender, waits, &spent, notes))
}

/// How long a leader leads in the handover workload.
pub const TERM: Duration = Duration::from_millis(20);

/// `lockers` (each its own contender, a candidate in its own process in real life) lead
/// one key in turn for `duration`: each waits to lead, leads [`TERM`], steps down, and
/// wants to lead again at once. What it shows is the handover: from one leader stepping
/// down to the next one leading (p50/p99), the gap nobody leads. Counts two leaders at
/// once (there must be none).
pub async fn handover(
    workload: &str,
    lockers: Vec<Arc<Contender>>,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let name = lockers.first().map_or("?", |c| c.name());
    let key = format!("bench:handover:{name}");
    let leading = Arc::new(AtomicI64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let runs = lockers.iter().map(|contender| {
        let (contender, key) = (contender.clone(), key.clone());
        let (leading, overlaps) = (leading.clone(), overlaps.clone());
        tokio::spawn(async move {
            // (took over at, stepped down at) of each term.
            let mut terms: Vec<(Instant, Instant)> = Vec::new();
            while Instant::now() < deadline {
                let held = contender.acquire_waiting(&key).await?;
                let took = Instant::now();
                if leading.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(TERM).await;
                leading.fetch_sub(1, Ordering::SeqCst);
                let stepped_down = Instant::now();
                contender.release(&key, held).await?;
                terms.push((took, stepped_down));
            }
            Ok::<_, String>(terms)
        })
    });
    let mut terms = Vec::new();
    for run in futures_util::future::join_all(runs).await {
        terms.extend(run.map_err(|e| e.to_string())??);
    }
    let spent = window.close().await?;
    terms.sort();
    let mut gaps = Latencies::default();
    for pair in terms.windows(2) {
        gaps.record(pair[1].0.saturating_duration_since(pair[0].1));
    }
    let notes = format!(
        "p50/p99 = handover, from one leader stepping down to the next leading (longest {} \
         ms); {} terms; {} overlaps",
        gaps.percentile(100.0).as_millis(),
        terms.len(),
        overlaps.load(Ordering::SeqCst)
    );
    let contender = lockers.first().ok_or("no lockers")?;
    Ok(workload::row(workload, contender, gaps, &spent, notes))
}

/// How long the holder holds the key, and how long it leaves it free, in the wait workload.
pub const HOLD_FREE: Duration = Duration::from_millis(20);

/// The first of `lockers` holds one key [`HOLD_FREE`], releases it, leaves it free as
/// long, and again, for `duration`; the others wait for it to be free without taking it
/// (each wait begins while the key is held). What it shows is how soon a waiter knows:
/// from the holder sending its release to the wait returning.
pub async fn wait_free(
    workload: &str,
    lockers: Vec<Arc<Contender>>,
    duration: Duration,
    stats_url: &str,
) -> Result<Row, String> {
    let name = lockers.first().map_or("?", |c| c.name());
    let key = format!("bench:wait:{name}");
    let started = Instant::now();
    // Nanoseconds from `started` to the latest release, and how many releases so far.
    let released_at = Arc::new(AtomicU64::new(0));
    let releases = Arc::new(AtomicU64::new(0));
    let held = Arc::new(AtomicI64::new(0));
    let window = Window::open(stats_url).await?;
    let deadline = window.started + duration;
    let (holder, watchers) = lockers.split_first().ok_or("no lockers")?;
    let holding = {
        let (holder, key) = (holder.clone(), key.clone());
        let (released_at, releases, held) = (released_at.clone(), releases.clone(), held.clone());
        tokio::spawn(async move {
            while Instant::now() < deadline {
                let lock = holder.acquire_waiting(&key).await?;
                held.store(1, Ordering::SeqCst);
                tokio::time::sleep(HOLD_FREE).await;
                released_at.store(started.elapsed().as_nanos() as u64, Ordering::SeqCst);
                releases.fetch_add(1, Ordering::SeqCst);
                held.store(0, Ordering::SeqCst);
                holder.release(&key, lock).await?;
                tokio::time::sleep(HOLD_FREE).await;
            }
            Ok::<_, String>(())
        })
    };
    let runs = watchers.iter().map(|watcher| {
        let (watcher, key) = (watcher.clone(), key.clone());
        let (released_at, releases, held) = (released_at.clone(), releases.clone(), held.clone());
        tokio::spawn(async move {
            let mut waits = Latencies::default();
            while Instant::now() < deadline {
                // Begin each wait while the key is held.
                if held.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let before = releases.load(Ordering::SeqCst);
                watcher.wait_free(&key).await?;
                let now = started.elapsed().as_nanos() as u64;
                if releases.load(Ordering::SeqCst) > before {
                    let at = released_at.load(Ordering::SeqCst);
                    waits.record(Duration::from_nanos(now.saturating_sub(at)));
                }
                // Until the holder takes it again.
                while held.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            Ok::<_, String>(waits)
        })
    });
    let mut waits = workload::gather(runs).await?;
    holding.await.map_err(|e| e.to_string())??;
    let spent = window.close().await?;
    let notes = format!(
        "p50/p99 = from the release sent to a waiter knowing the key is free (longest {} \
         ms); {} releases, {} waiters",
        waits.percentile(100.0).as_millis(),
        releases.load(Ordering::SeqCst),
        watchers.len()
    );
    Ok(workload::row(workload, holder, waits, &spent, notes))
}
