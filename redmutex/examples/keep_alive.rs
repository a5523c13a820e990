//! Seed pattern (f): a watchdog that renews the lock while a long job runs — and, unlike the
//! seeds' silent watchdog, says when the lock is lost so that the job stops.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example keep_alive`

use std::time::Duration;

use redmutex::{Error, Locker, LostReason};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let conn = redmutex::connection::connect(&url).await?;
    let locker = Locker::new(conn.clone()).with_prefix("example:");

    // A 2 s job under a 600 ms lock: renewed every 200 ms while it runs.
    let lease = locker
        .acquire("report", Duration::from_millis(600))
        .await?
        .keep_alive()?;
    let done = lease.run(tokio::time::sleep(Duration::from_secs(2))).await;
    println!("long job: {done:?} (finished; the lock outlived its TTL and was released)");
    assert!(done.is_ok());

    // The same job, but someone deletes the lock midway: the job is cancelled.
    let lease = locker
        .acquire("report", Duration::from_millis(600))
        .await?
        .keep_alive()?;
    let mut admin = conn;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _: Result<i64, _> = redis::cmd("DEL")
            .arg("example:report")
            .query_async(&mut admin)
            .await;
    });
    match lease.run(tokio::time::sleep(Duration::from_secs(2))).await {
        Err(LostReason::NotHeld) => println!("second job: stopped early — the lock was lost"),
        other => panic!("the loss went unnoticed: {other:?}"),
    }
    Ok(())
}
