//! A fair lock: workers that ask one after the other (here tasks with lockers of their
//! own, in real life processes on many hosts) get the ledger in the order they asked, and
//! one that dies while waiting holds nobody up for longer than its heartbeat.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example fair_lock`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redmutex::{retry, Error, Locker};
use tokio::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Each worker has a locker of its own, as a process would.
    let locker = || async {
        let client = redis::Client::open(url.as_str())?;
        Locker::new(redmutex::connection::connect(&url).await?)
            .with_prefix("example:")
            .with_wake_up([client])
    };
    let heartbeat = Duration::from_millis(600);
    let ledger = locker()
        .await?
        .fair_lock("ledger")?
        .with_heartbeat(heartbeat)?;
    let first = ledger.acquire(Duration::from_secs(5)).await?;

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let mine = locker()
            .await?
            .fair_lock("ledger")?
            .with_heartbeat(heartbeat)?;
        let order = order.clone();
        let acquire = mine
            .acquire(Duration::from_secs(5))
            .metadata(format!("worker={worker}"))
            .retry(retry::constant(Duration::from_secs(1))) // woken by its turn first
            .deadline(Duration::from_secs(30));
        let mut waiting = Box::pin(async move {
            let guard = acquire.await?;
            order.lock().unwrap().push(worker);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await
        });
        // Let it take its place in line before the next one asks.
        if tokio::time::timeout(Duration::from_millis(50), &mut waiting)
            .await
            .is_ok()
        {
            unreachable!("the ledger is held");
        }
        if worker == 1 {
            // This worker's process dies while it waits: it never tries again (leaking its
            // acquire stands in for a killed process: nothing cleans up).
            std::mem::forget(waiting);
            println!("worker 1 vanished while in line");
            continue;
        }
        workers.push(tokio::spawn(waiting));
    }
    let waiting = ledger.inspect().await?.and_then(|held| held.waiters);
    println!("{} waiting in line behind the holder", waiting.unwrap_or(0));
    let released = Instant::now();
    first.release().await?;
    for worker in workers {
        worker.await.expect("worker")?;
    }
    let order = order.lock().unwrap().clone();
    println!(
        "served in arrival order: {order:?}, in {:?} (the vanished one held the line for at \
         most its heartbeat, {heartbeat:?})",
        released.elapsed()
    );
    assert_eq!(order, [0, 2, 3]);
    Ok(())
}
