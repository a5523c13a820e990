//! Seed pattern (c): obtain, check the TTL, refresh, check it again, watch it expire.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example ttl_refresh`

use std::time::Duration;

use redmutex::{Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:");

    let mut lock = locker.acquire("my-key", Duration::from_millis(100)).await?;
    println!("I have a lock!");

    tokio::time::sleep(Duration::from_millis(50)).await;
    let ttl = lock.ttl().await?;
    println!("after 50 ms: {ttl:?} left — yay, I still have my lock!");

    lock.refresh(Duration::from_millis(100)).await?;
    println!("refreshed: {:?} left", lock.ttl().await?);

    tokio::time::sleep(Duration::from_millis(150)).await;
    match lock.ttl().await {
        Err(e) if e.is_not_held() => println!("after 150 ms more: now, my lock has expired ({e})"),
        other => panic!("expected the lock to have expired, got {other:?}"),
    }
    assert!(lock
        .refresh(Duration::from_millis(100))
        .await
        .unwrap_err()
        .is_not_held());
    println!("refreshing an expired lock is refused: it is not recreated");
    Ok(())
}
