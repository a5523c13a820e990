//! Seed pattern (d): acquire with metadata, read it back — as the owner and as a bystander.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example metadata`

use std::time::Duration;

use redmutex::{Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:");

    let who = format!("host={} pid={} job=nightly", hostname(), std::process::id());
    let lock = locker
        .acquire("nightly", Duration::from_secs(10))
        .metadata(&who)
        .await?;
    println!("owner sees:     {:?}", lock.metadata());

    // Any other process can see who holds the lock, without being able to release it.
    let info = locker.inspect("nightly").await?;
    println!(
        "bystander sees: held={} ttl={:?} metadata={:?}",
        info.held, info.ttl, info.metadata
    );
    assert_eq!(info.metadata.as_deref(), Some(who.as_str()));

    lock.release().await?;
    let info = locker.inspect("nightly").await?;
    println!(
        "after release:  held={} metadata={:?}",
        info.held, info.metadata
    );
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}
