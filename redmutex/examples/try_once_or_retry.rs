//! Seed pattern (b): one try then give up, versus N tries at a fixed interval.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example try_once_or_retry`

use std::time::{Duration, Instant};

use redmutex::retry::{self, RetryExt};
use redmutex::{Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:");
    let ttl = Duration::from_secs(5);

    let holder = locker.acquire("busy", ttl).await?;

    // GetLock: one try, answer at once.
    let started = Instant::now();
    match locker.acquire("busy", ttl).await {
        Err(e) if e.is_not_obtained() => {
            println!("one try: busy, gave up after {:?}", started.elapsed())
        }
        other => panic!("expected not obtained, got {other:?}"),
    }

    // RetryLock(retryCount = 5, backOff = 100ms): five tries, 100 ms apart.
    let started = Instant::now();
    match locker
        .acquire("busy", ttl)
        .retry(retry::constant(Duration::from_millis(100)).max_tries(5))
        .await
    {
        Err(Error::NotObtained(n)) => println!(
            "five tries: busy, gave up after {} tries in {:?}",
            n.attempts,
            started.elapsed()
        ),
        other => panic!("expected not obtained, got {other:?}"),
    }

    // The same retry succeeds once the holder lets go in the meantime.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let _ = holder.release().await;
    });
    let started = Instant::now();
    let lock = locker
        .acquire("busy", ttl)
        .retry(retry::constant(Duration::from_millis(100)).max_tries(5))
        .await?;
    println!(
        "five tries: obtained after {:?} once the holder released",
        started.elapsed()
    );
    lock.release().await?;
    Ok(())
}
