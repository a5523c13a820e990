//! Polite revocation: asking a holder to let go, at a point of its choosing.
//!
//! A worker holds a lock, kept alive, for a long batch job made of small steps. A deploy
//! wants the lock: it asks the worker to let go rather than forcing the release. The
//! worker's next renewal brings the request — a signal of its own, distinct from loss —
//! so it finishes the step it is in, saves its place and releases; the deploy, waiting
//! meanwhile, gets the lock. Nothing was taken from anyone: a worker that ignored the
//! request would have kept the lock.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example polite_revocation`

use std::time::Duration;

use redmutex::Locker;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Two lockers, as two processes would have.
    let connect = || async {
        Ok::<_, redmutex::Error>(
            Locker::new(redmutex::connection::connect(&url).await?).with_prefix("example:"),
        )
    };
    let (worker, deploy) = (connect().await?, connect().await?);

    let ttl = Duration::from_secs(3);
    let lease = worker
        .acquire("batch", ttl)
        .metadata("host=worker-1")
        .await?
        .keep_alive()?;
    println!("the worker holds the lock (renewed every {:?})", ttl / 3);
    let batch = tokio::spawn(async move {
        let mut step = 0;
        loop {
            tokio::select! {
                biased;
                reason = lease.lost() => return Err(format!("lost at step {step}: {reason}")),
                () = lease.release_requested() => break,
                () = tokio::time::sleep(Duration::from_millis(200)) => step += 1, // one step
            }
        }
        println!("the worker was asked to let go: it saves its place at step {step} and releases");
        lease.release().await.map_err(|e| e.to_string())?;
        Ok(step)
    });

    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = deploy.request_release("batch").await?.expect("it is held");
    println!("the deploy asked {:?} to let go", held.holders[0].metadata);
    let lock = deploy
        .acquire("batch", Duration::from_secs(10))
        .retry(redmutex::retry::constant(Duration::from_millis(50)))
        .deadline(Duration::from_secs(5))
        .await?;
    let steps = batch.await??;
    println!("the deploy holds the lock; the worker stopped cleanly after {steps} steps");
    lock.release().await?;
    Ok(())
}
