//! Leader election: two schedulers (here tasks with lockers of their own, in real life
//! processes on two hosts) campaign; one leads, the other waits; an observer follows who
//! leads. The leader proclaims a new value, then resigns, and the other takes over with a
//! higher term.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redmutex --example election`

use std::time::Duration;

use futures_util::StreamExt;
use redmutex::{Error, Locker};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Each party has a locker of its own, as a process would.
    let election = || async {
        let client = redis::Client::open(url.as_str())?;
        Locker::new(redmutex::connection::connect(&url).await?)
            .with_prefix("example:")
            .with_wake_up([client])?
            .election("scheduler")?
            .with_ttl(Duration::from_secs(5))
    };
    let observer = election().await?;
    let mut changes = Box::pin(observer.observe());
    let follow = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(change) = changes.next().await {
            let leader = change?;
            match &leader {
                Some(leader) => {
                    println!("observed: {} leads, term {:?}", leader.value, leader.term)
                }
                None => println!("observed: nobody leads"),
            }
            seen.push(leader.map(|l| l.value));
            if seen.len() == 5 {
                return Ok::<_, Error>(seen);
            }
        }
        Ok(seen)
    });

    let mut first = election().await?.campaign("scheduler-a").await?;
    println!("scheduler-a leads in term {}", first.term());
    let second = election().await?;
    let waiting = tokio::spawn(async move { second.campaign("scheduler-b").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "one leader at a time");

    first.proclaim("scheduler-a (draining)").await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let term = first.term();
    first.resign().await?;
    let next = waiting.await.expect("candidate")?;
    println!("scheduler-b took over in term {} (was {term})", next.term());
    assert!(next.term() > term);
    next.resign().await?;

    let seen = tokio::time::timeout(Duration::from_secs(5), follow)
        .await
        .expect("the observer saw every change")
        .expect("observer")?;
    let values: Vec<Option<&str>> = seen.iter().map(Option::as_deref).collect();
    println!("the observer saw: {values:?}");
    assert_eq!(values.first(), Some(&None));
    assert!(values.contains(&Some("scheduler-a (draining)")));
    assert!(values.contains(&Some("scheduler-b")));
    Ok(())
}
