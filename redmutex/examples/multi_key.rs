//! Seed pattern (e): a lock over several keys, all or nothing.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example multi_key`

use std::time::Duration;

use redmutex::{Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:");
    let ttl = Duration::from_secs(5);

    // A transfer locks both accounts.
    let transfer = locker
        .acquire_all(["account:17", "account:42"], ttl)
        .await?;
    println!("transfer holds account:17 and account:42");

    // Another transfer touching account:42 gets nothing — not even account:99.
    let err = locker
        .acquire_all(["account:42", "account:99"], ttl)
        .await
        .unwrap_err();
    println!("second transfer: {err}");
    println!(
        "account:99 held? {}",
        locker.inspect("account:99").await?.held
    );
    assert!(!locker.inspect("account:99").await?.held);

    transfer.release().await?;
    let second = locker
        .acquire_all(["account:42", "account:99"], ttl)
        .await?;
    println!("after release, the second transfer holds both of its accounts");
    second.release().await?;
    Ok(())
}
