//! A read-write lock: readers of a price list share it, a writer takes it alone — and a
//! steady stream of readers does not starve the writer, because a waiting writer keeps new
//! readers out. Then the writer downgrades and keeps reading what it wrote.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example rw_lock`

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redmutex::state::LockKind;
use redmutex::{retry, Error, Locker};
use tokio::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Each party has a locker of its own, as a process would.
    let locker = || async {
        let client = redis::Client::open(url.as_str())?;
        Locker::new(redmutex::connection::connect(&url).await?)
            .with_prefix("example:")
            .with_wake_up([client])
    };
    let prices = locker().await?.rw_lock("prices")?;

    // Four readers, one after the other and overlapping, for as long as the writer waits.
    let written = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU32::new(0));
    let mut readers = Vec::new();
    for reader in 0..4 {
        let lock = locker().await?.rw_lock("prices")?;
        let (written, reads) = (written.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            while !written.load(Ordering::SeqCst) {
                let guard = (lock.read(Duration::from_secs(5)))
                    .metadata(format!("reader={reader}"))
                    .retry(retry::constant(Duration::from_millis(10)))
                    .deadline(Duration::from_secs(10))
                    .await?;
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await; // readers overlap
                guard.release().await?;
            }
            Ok::<_, Error>(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let readers_now = prices.inspect().await?.map_or(0, |held| held.holder_count);
    println!("{readers_now} readers share the lock");

    let asked = Instant::now();
    let writer = (prices.write(Duration::from_secs(5)))
        .with_fence()
        .retry(retry::constant(Duration::from_millis(50)))
        .deadline(Duration::from_secs(10))
        .await?;
    println!(
        "the writer got in after {:?}, while readers kept coming ({} reads so far); fence {}",
        asked.elapsed(),
        reads.load(Ordering::SeqCst),
        writer.fence().await?
    );
    assert!(prices
        .inspect()
        .await?
        .is_some_and(|held| held.kind != LockKind::Readers));
    let reader = writer.downgrade().await?;
    written.store(true, Ordering::SeqCst);
    println!("downgraded: reading what it wrote, others may read too");
    for reader in readers {
        reader.await.expect("reader")?;
    }
    reader.release().await?;
    assert!(prices.inspect().await?.is_none());
    Ok(())
}
