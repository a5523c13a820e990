//! Guarded writes: state in Redis written only while the lock is held, without fences.
//!
//! Holder A takes the lock with a short TTL and "pauses" (sleeps) past it; holder B takes
//! the lock over and writes through it. When A wakes up and writes through its lock, Redis
//! itself refuses: the owner check and the writes are one script call, so B's write
//! stands. (Compare `fenced_storage.rs`, where the store must check the fence.)
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example guarded_writes`

use std::time::Duration;

use redmutex::{Locker, Writes};

/// The job's state and a count of its runs, set in one go.
fn finish(by: &str) -> Writes {
    let mut writes = Writes::new();
    writes
        .add(
            redis::cmd("SET")
                .arg("example:report:state")
                .arg(format!("written by {by}")),
            ["example:report:state"],
        )
        .add(
            redis::cmd("INCR").arg("example:report:runs"),
            ["example:report:runs"],
        );
    writes
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:");
    let mut raw = redmutex::connection::connect(&url).await?;

    let a = locker.acquire("report", Duration::from_millis(300)).await?;
    println!("A holds the lock, then pauses past its TTL");
    tokio::time::sleep(Duration::from_millis(400)).await;

    let b = locker.acquire("report", Duration::from_secs(10)).await?;
    let replies = b.write_if_held(&finish("B")).await?;
    println!("B takes it over and writes: {replies:?}");

    // A wakes up, unaware, and writes through its lock: nothing is written.
    let late = a.write_if_held(&finish("A")).await;
    println!("A's late write: {late:?}");
    assert!(late.unwrap_err().is_not_held());
    let state: String = redis::cmd("GET")
        .arg("example:report:state")
        .query_async(&mut raw)
        .await?;
    assert_eq!(state, "written by B");
    println!("the state is {state:?}");

    b.release().await?;
    redis::cmd("DEL")
        .arg("example:report:state")
        .arg("example:report:runs")
        .query_async::<()>(&mut raw)
        .await?;
    Ok(())
}
