//! A counting semaphore: at most three exports run at once, however many workers (here
//! eight tasks, in real life processes on many hosts) want to run one.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example semaphore`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redmutex::{retry, Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url.as_str())?;
    let locker = Locker::new(redmutex::connection::connect(&url).await?)
        .with_prefix("example:")
        .with_wake_up([client])?;
    let exports = locker.semaphore("exports", 3)?;

    let running = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut workers = Vec::new();
    for worker in 0..8 {
        let (exports, running, most) = (exports.clone(), running.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let permit = exports
                .acquire(1, Duration::from_secs(5))
                .metadata(format!("worker={worker}"))
                .retry(retry::constant(Duration::from_secs(1))) // woken by releases first
                .deadline(Duration::from_secs(30))
                .await?;
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            // The export, under a lease: renewed while it runs, released when done.
            let lease = permit.keep_alive()?;
            let done = lease
                .run(tokio::time::sleep(Duration::from_millis(150)))
                .await;
            running.fetch_sub(1, Ordering::SeqCst);
            if let Err(lost) = done {
                panic!("permit lost: {lost}");
            }
            Ok::<(), Error>(())
        }));
    }
    let info = loop {
        if let Some(info) = exports.inspect().await? {
            break info;
        }
        tokio::task::yield_now().await;
    };
    for holder in &info.holders {
        println!(
            "holding: {} permit(s), {:?} left, {:?}",
            holder.permits.unwrap_or(1),
            holder.ttl,
            holder.metadata
        );
    }
    for worker in workers {
        worker.await.expect("worker")?;
    }
    let most = most.load(Ordering::SeqCst);
    println!(
        "8 exports ran, at most {most} at once (limit {})",
        exports.limit()
    );
    assert!(most <= 3);
    Ok(())
}
