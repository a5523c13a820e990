//! Seed pattern (g): Redlock over independent nodes — in parallel, with per-node timeouts,
//! validity after clock drift, and every failed attempt undone on every node.
//!
//! Run: `REDLOCK_URLS=redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381 \
//!       cargo run -p redmutex --example redlock`

use std::time::Duration;

use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{Error, Locker, QuorumSettings};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let urls = std::env::var("REDLOCK_URLS").unwrap_or_else(|_| {
        "redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381".into()
    });
    let nodes = urls
        .split(',')
        .map(redmutex::connection::connect_lazy)
        .collect::<Result<Vec<_>, _>>()?;
    let locker = Locker::redlock(nodes)?
        .with_prefix("example:")
        .with_quorum_settings(QuorumSettings::new().node_timeout(Duration::from_millis(50)));
    let n = locker.nodes().len();

    let lock = locker
        .acquire("my_redlock", Duration::from_secs(30))
        .retry(
            retry::exponential(Duration::from_millis(20), Duration::from_millis(200))
                .jitter(Jitter::full()),
        )
        .deadline(Duration::from_secs(2))
        .await?;
    println!(
        "holding my_redlock on a quorum of {n} nodes; valid for {:?}",
        lock.remaining_validity()
    );

    // Anyone can see who holds it, node by node.
    let info = locker.inspect("my_redlock").await?;
    for node in &info.nodes {
        println!(
            "  node {}: held = {}",
            node.node,
            node.info.as_ref().is_ok_and(|i| i.held)
        );
    }

    // A second client gets a typed answer with every node's view.
    match locker.acquire("my_redlock", Duration::from_secs(30)).await {
        Err(Error::NotObtained(n)) => {
            let failure = n.no_quorum.expect("per-node details");
            println!(
                "second client: not obtained — held elsewhere on {} nodes, {} unreachable",
                failure.held(),
                failure.unreachable()
            );
        }
        other => panic!("two holders: {:?}", other.map(|_| ())),
    }

    lock.release().await?; // on every node
    println!("released on every node");
    Ok(())
}
