//! A job every host starts on schedule, that must run at most once per period across the
//! fleet however fast it finishes (`min_hold`), and a deploy script that waits for the job
//! to finish without taking the lock itself (`wait_released`).
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example at_most_once_per_period`

use std::time::Duration;

use redmutex::{Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url.as_str())?;
    let locker = Locker::new(redmutex::connection::connect(&url).await?)
        .with_prefix("example:")
        .with_wake_up([client])?;
    let period = Duration::from_secs(2);

    // Three "hosts" fire at once; one runs the job, and nobody else within the period,
    // though the job itself takes 100 ms.
    let mut runs = 0;
    for host in ["web-1", "web-2", "web-3"] {
        let acquire = locker
            .acquire("sync", Duration::from_secs(30))
            .metadata(format!("host={host}"))
            .min_hold(period);
        match acquire.await {
            Ok(lock) => {
                tokio::time::sleep(Duration::from_millis(100)).await; // the job
                lock.release().await?; // the key stays until the period ends
                runs += 1;
                println!("{host}: ran the job");
            }
            Err(e) if e.is_not_obtained() => println!("{host}: already ran this period"),
            Err(e) => return Err(e),
        }
    }
    assert_eq!(runs, 1);

    // A deploy waits for the period (or the job) to end, without taking the lock.
    let started = std::time::Instant::now();
    assert!(
        locker
            .wait_released("sync", Duration::from_secs(10))
            .await?
    );
    println!(
        "free again after {:?}: the next period may run it",
        started.elapsed()
    );
    let next = locker.acquire("sync", Duration::from_secs(30)).await?;
    next.release().await?;
    Ok(())
}
