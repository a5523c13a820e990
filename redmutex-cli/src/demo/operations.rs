//! The demo's operations scene: what `redmutex list` shows of locks of every kind, and
//! what the waiting line of a waiting `exec` says until the lock is taken.

use std::future::IntoFuture;
use std::time::Duration;

use redmutex::retry;
use redmutex::{connection::Connection, Locker};
use tokio::time::Instant;

use crate::exit::Failure;
use crate::metadata::default_metadata;
use crate::output::outln;
use crate::waiting::{self, Progress};
use crate::{duration, list};

/// What the scene saw, for the summary.
pub struct Operations {
    /// Locks the listing showed.
    pub listed: usize,
    /// Lines the waiting line showed before the lock was taken.
    pub waiting_lines: usize,
    /// How long the waiter waited.
    pub waited: Duration,
}

pub async fn scene<C: Connection>(
    locker: &Locker<C>,
    say: impl Fn(String),
) -> Result<Operations, Failure> {
    outln!()?;
    outln!(
        "scene 4: operations: who holds what (`redmutex list`), and who waits (the waiting line)"
    )?;
    let fail = |e: redmutex::Error| Failure::from_lock_error(&e, &[]);
    let ttl = Duration::from_secs(30);
    let deploy = (locker.acquire("deploy", ttl))
        .metadata(default_metadata("./deploy.sh"))
        .await
        .map_err(fail)?;
    let workers = locker.semaphore("workers", 3).map_err(fail)?;
    let mut permits = Vec::new();
    for worker in 1..=2 {
        let permit = workers.acquire(1, ttl).metadata(format!("worker={worker}"));
        permits.push(permit.await.map_err(fail)?);
    }
    let catalog = locker.rw_lock("catalog").map_err(fail)?;
    let mut readers = Vec::new();
    for reader in ["export", "report"] {
        let read = catalog.read(ttl).metadata(format!("reader={reader}"));
        readers.push(read.await.map_err(fail)?);
    }

    let mut listing = locker.list("*").map_err(fail)?;
    let mut rows = Vec::new();
    while let Some(page) = listing.next_page().await.map_err(fail)? {
        rows.extend(page.iter().map(list::row));
    }
    rows.sort();
    outln!("  $ redmutex --prefix redmutex-demo: list")?;
    for line in list::table_lines(&rows) {
        outln!("  {line}")?;
    }

    // Someone else wants `deploy`; its waiting line, as a terminal shows it (redrawn in
    // place there; one snapshot per line here).
    say("a second deploy waits for `deploy`; the holder finishes in 1.5 s".to_owned());
    let progress = Progress::default();
    let waiter = (locker.acquire("deploy", ttl))
        .metadata(default_metadata("./deploy.sh"))
        .retry(retry::constant(Duration::from_millis(50)))
        .deadline(Duration::from_secs(10))
        .on_failed_try({
            let progress = progress.clone();
            move |failed| progress.record(failed)
        });
    let started = Instant::now();
    let wait = tokio::spawn(waiter.into_future());
    let mut waiting_lines = 0;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(450)).await;
        let line = waiting::line_text(locker, &progress, "deploy", started).await;
        outln!("  | {line}")?;
        waiting_lines += 1;
    }
    deploy.release().await.map_err(fail)?;
    let taken = wait
        .await
        .map_err(|e| Failure::new(crate::exit::LOST, e.to_string()))?;
    let waited = started.elapsed();
    say(format!(
        "the holder released: the waiter (trying every 50 ms) took it after {}; its line is cleared",
        duration::format(waited)
    ));
    taken.map_err(fail)?.release().await.map_err(fail)?;
    for permit in permits {
        permit.release().await.map_err(fail)?;
    }
    for reader in readers {
        reader.release().await.map_err(fail)?;
    }
    Ok(Operations {
        listed: rows.len(),
        waiting_lines,
        waited,
    })
}
