//! An operator's forced release that keeps mutual exclusion (a lock-delay).
//!
//! A worker holds a lock, kept alive, for a job that hangs. An operator forces the lock's
//! release: a tombstone keeps the worker's place until its TTL ends, so the standby that
//! waits for the lock cannot start while the worker may still believe it holds. The
//! worker's next renewal finds itself gone — its lease's lost signal fires, and it stops —
//! and the standby takes the lock as the tombstone ends.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example forced_release`

use std::time::Duration;

use redmutex::Locker;
use tokio::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Three lockers, as three processes would have.
    let connect = || async {
        Ok::<_, redmutex::Error>(
            Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:"),
        )
    };
    let (worker, standby, operator) = (connect().await?, connect().await?, connect().await?);

    let ttl = Duration::from_secs(2);
    let lease = worker
        .acquire("nightly", ttl)
        .metadata("host=worker-1")
        .await?
        .keep_alive()?;
    println!("the worker holds the lock (renewed every {:?})", ttl / 3);
    let waiting = tokio::spawn(async move {
        let lock = standby
            .acquire("nightly", Duration::from_secs(10))
            .retry(redmutex::retry::constant(Duration::from_millis(100)))
            .deadline(Duration::from_secs(10))
            .await;
        (Instant::now(), lock)
    });

    tokio::time::sleep(Duration::from_millis(300)).await;
    let was = operator
        .force_release("nightly")
        .await?
        .expect("it was held");
    let forced_at = Instant::now();
    println!(
        "the operator forced the release of {} (held by {:?})",
        was.key_lossy(),
        was.holders[0].metadata
    );
    let tombstone = operator.describe("nightly").await?.expect("a tombstone");
    println!("a tombstone keeps it for {:?}", tombstone.ttl);
    assert_eq!(tombstone.forced, 1);

    let reason = lease.lost().await;
    println!("the worker is told at its next renewal: {reason}; it stops");

    let (taken_at, lock) = waiting.await?;
    let lock = lock?;
    let waited = taken_at - forced_at;
    println!(
        "the standby took the lock {waited:?} after the forced release, once the tombstone ended"
    );
    assert!(waited + Duration::from_millis(50) >= tombstone.ttl.unwrap_or_default());
    lock.release().await?;
    Ok(())
}
