//! Wake-up on Redis Cluster, kept on the key's shard.
//!
//! Two workers (two lockers, as two processes would have) take turns on one job key. The
//! second waits with a fallback poll of 30 s, yet gets the key within moments of its
//! release: the release is announced on a shard channel in the key's hash slot
//! (`SPUBLISH`), which only the key's master and its replicas see, and the waiter's
//! subscriber listens on that master. (A plain `PUBLISH` would cross the cluster bus to
//! every node.) On Redis 6.2, without shard channels, the same works over `PUBLISH`.
//!
//! Run: `REDIS_CLUSTER_URLS=redis://127.0.0.1:7000,redis://127.0.0.1:7001 \
//!       cargo run -p redmutex --example cluster_wake_up --features cluster`

use std::time::{Duration, Instant};

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redmutex::{retry, Locker, WakeUpSource};

/// A worker's locker: a cluster connection for its locks and, for wake-up, a subscriber
/// that finds each key's master from the same seed nodes.
async fn worker(urls: &[&str]) -> Result<Locker<ClusterConnection>, Box<dyn std::error::Error>> {
    let conn = ClusterClientBuilder::new(urls.to_vec())
        .build()?
        .get_async_connection()
        .await?;
    let subscriber = WakeUpSource::cluster(urls.to_vec())?;
    Ok(Locker::cluster(conn)
        .with_wake_up([subscriber])?
        .with_prefix("example:"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls = std::env::var("REDIS_CLUSTER_URLS")
        .unwrap_or_else(|_| "redis://127.0.0.1:7000,redis://127.0.0.1:7001".into());
    let urls: Vec<&str> = urls.split(',').collect();
    let (first, second) = (worker(&urls).await?, worker(&urls).await?);

    let held = first
        .acquire("nightly-report", Duration::from_secs(30))
        .await?;
    println!("first worker holds the report job");
    let waiting = tokio::spawn(async move {
        let lock = second
            .acquire("nightly-report", Duration::from_secs(30))
            .retry(retry::constant(Duration::from_secs(30)))
            .deadline(Duration::from_secs(60))
            .await?;
        Ok::<_, redmutex::Error>((lock, second))
    });
    tokio::time::sleep(Duration::from_millis(300)).await; // the second one waits now
    let released = Instant::now();
    held.release().await?;
    let (lock, second) = waiting.await??;
    let after = released.elapsed();
    println!("second worker got it {after:?} after the release (its poll: every 30 s)");
    assert!(
        after < Duration::from_secs(10),
        "woken by the release, not its poll"
    );
    println!("wake-up: {:?}", second.wake_up_state());
    lock.release().await?;
    Ok(())
}
