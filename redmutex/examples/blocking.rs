//! Locks in a program that is not async: a build step that must run alone, kept alive
//! while this thread is busy, and a semaphore that lets two of four threads upload at a
//! time. No async code, no runtime to set up: the locker runs its own.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --features blocking --example blocking`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use redmutex::{blocking, retry, Error};

fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locker = blocking::Locker::connect(&url)?; // with push wake-up

    // One build at a time, everywhere: wait up to 10 s for another one to finish.
    let lock = locker
        .acquire("example:build", Duration::from_secs(1))
        .metadata(format!("pid={}", std::process::id()))
        .retry(retry::constant(Duration::from_millis(500)))
        .deadline(Duration::from_secs(10))
        .call()?;
    // The build takes three TTLs; the lease is renewed on the locker's own thread while
    // this one is busy, and says so if it is ever lost.
    let lease = lock.keep_alive()?;
    for step in 1..=3 {
        thread::sleep(Duration::from_secs(1)); // a step of the build, blocking
        if lease.is_lost() {
            eprintln!("lost the build lock at step {step}: stopping");
            return Err(Error::NotHeld);
        }
    }
    println!(
        "build done under one lock, renewed {} times",
        lease.renewals()
    );
    lease.release()?;

    // At most two uploads at once, from four threads.
    let uploads = locker.semaphore("example:uploads", 2)?;
    let (running, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let threads: Vec<_> = (0..4)
        .map(|n| {
            let (uploads, running, most) = (uploads.clone(), running.clone(), most.clone());
            thread::spawn(move || -> Result<(), Error> {
                let permit = uploads
                    .acquire(1, Duration::from_secs(5))
                    .metadata(format!("thread={n}"))
                    .retry(retry::constant(Duration::from_secs(1))) // woken by releases first
                    .deadline(Duration::from_secs(20))
                    .call()?;
                most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(200)); // the upload
                running.fetch_sub(1, Ordering::SeqCst);
                permit.release() // or drop it: the drop releases and waits for it
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("an upload thread panicked")?;
    }
    let most = most.load(Ordering::SeqCst);
    println!("4 uploads done, at most {most} at once");
    assert_eq!(most, 2, "the semaphore let {most} run at once");
    Ok(())
}
