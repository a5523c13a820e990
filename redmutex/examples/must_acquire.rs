//! Seed pattern (a): a "must acquire with retry" helper — exponential backoff between
//! 20 ms and 1 s, a notify callback on every failed try — then release.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example must_acquire`

use std::time::Duration;

use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{connection::Connection, Error, Lock, Locker, TryFailure};

/// Waits for `key` with exponential backoff and reports every failed try; gives up after
/// `max_wait` (redmutex's deadline) — never hammers Redis, never spins forever.
async fn must_acquire<C: Connection>(
    locker: &Locker<C>,
    key: &str,
    ttl: Duration,
    max_wait: Duration,
) -> Result<Lock<C>, Error> {
    locker
        .acquire(key, ttl)
        .retry(
            retry::exponential(Duration::from_millis(20), Duration::from_secs(1))
                .jitter(Jitter::equal()),
        )
        .deadline(max_wait)
        .on_failed_try(|t| match &t.reason {
            TryFailure::Held { .. } => println!(
                "  notify: try {} found the lock held; next try in {:?}",
                t.attempt, t.next_delay
            ),
            TryFailure::Redis(e) => println!("  notify: try {} failed on Redis: {e}", t.attempt),
            _ => println!("  notify: try {} failed", t.attempt),
        })
        .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:");

    // Someone else holds the lock for 300 ms.
    let other = locker.acquire("must", Duration::from_secs(5)).await?;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = other.release().await;
    });

    println!("must_acquire: waiting for a lock another worker holds for 300 ms");
    let lock = must_acquire(
        &locker,
        "must",
        Duration::from_secs(5),
        Duration::from_secs(10),
    )
    .await?;
    println!(
        "must_acquire: got it (token {:?}); working, then releasing",
        lock.token()
    );
    lock.release().await?;

    // The same helper, bounded: a lock that stays held makes it give up with a typed error.
    let held = locker.acquire("forever", Duration::from_secs(30)).await?;
    let err = must_acquire(
        &locker,
        "forever",
        Duration::from_secs(5),
        Duration::from_millis(150),
    )
    .await
    .unwrap_err();
    println!("must_acquire: gave up as told: {err}");
    assert!(err.is_not_obtained());
    held.release().await?;
    Ok(())
}
