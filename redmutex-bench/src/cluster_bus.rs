//! The cluster-bus workload: on the test kit's six-node cluster (three masters, a replica
//! each), N lockers (one per process in real life, each with its own cluster connection
//! and wake-up subscriber) take turns on one key. What it shows is what push wake-up costs
//! the cluster: a message published on one node is sent to every other node over the
//! cluster bus (`PUBLISH`), or only to the replicas of the key's shard (sharded Pub/Sub,
//! `SPUBLISH`). The figures are the nodes' own counters (`CLUSTER INFO`), summed over the
//! six, per acquisition.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redmutex::Locker;
use testkit::RedisCluster;
use tokio::time::Instant;

use crate::herd::HOLD;
use crate::workload::Row;

/// How many lockers take turns.
pub const LOCKERS: usize = 8;

/// The cluster-bus counters of every node, summed: messages sent, and of them the
/// publishes (`PUBLISH`'s and `SPUBLISH`'s).
#[derive(Default, Clone, Copy)]
struct Bus {
    sent: u64,
    publish: u64,
    publishshard: u64,
}

fn bus(cluster: &RedisCluster) -> Bus {
    let mut total = Bus::default();
    for node in cluster.nodes() {
        let info = node.command(&["CLUSTER", "INFO"]);
        let field = |name: &str| -> u64 {
            (info.lines())
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        total.sent += field("cluster_stats_messages_sent");
        total.publish += field("cluster_stats_messages_publish_sent");
        total.publishshard += field("cluster_stats_messages_publishshard_sent");
    }
    total
}

async fn connect(cluster: &RedisCluster) -> Result<ClusterConnection, String> {
    let client = redis::cluster::ClusterClient::builder(cluster.urls())
        .build()
        .map_err(|e| e.to_string())?;
    client
        .get_async_connection()
        .await
        .map_err(|e| e.to_string())
}

/// [`LOCKERS`] lockers with wake-up take turns on one key of a fresh six-node cluster for
/// `duration`; the notes give the cluster-bus messages per acquisition.
pub async fn cluster_bus(duration: Duration) -> Result<Row, String> {
    let cluster = RedisCluster::spawn();
    let key = "bench:cluster-bus";
    let mut lockers = Vec::new();
    for _ in 0..LOCKERS {
        let subscriber =
            redmutex::WakeUpSource::cluster(cluster.urls()).map_err(|e| e.to_string())?;
        let locker = (Locker::cluster(connect(&cluster).await?).with_wake_up([subscriber]))
            .map_err(|e| e.to_string())?;
        lockers.push(Arc::new(locker));
    }
    let before = bus(&cluster);
    let started = Instant::now();
    let deadline = started + duration;
    let runs = lockers.iter().map(|locker| {
        let locker = locker.clone();
        tokio::spawn(async move {
            let mut acquisitions = 0u64;
            while Instant::now() < deadline {
                let lock = (locker.acquire(key, Duration::from_secs(5)))
                    .retry(crate::contender::woken())
                    .deadline(Duration::from_secs(10))
                    .await
                    .map_err(|e| e.to_string())?;
                acquisitions += 1;
                tokio::time::sleep(HOLD).await;
                lock.release().await.map_err(|e| e.to_string())?;
            }
            Ok::<u64, String>(acquisitions)
        })
    });
    let mut acquisitions = 0;
    for run in futures_util::future::join_all(runs).await {
        acquisitions += run.map_err(|e| e.to_string())??;
    }
    let elapsed = started.elapsed();
    let after = bus(&cluster);
    let per = |n: u64| n as f64 / acquisitions.max(1) as f64;
    let notes = format!(
        "cluster bus per acquisition: {:.2} publish, {:.2} publishshard, {:.2} messages in all \
         (pings included); {LOCKERS} lockers, six nodes",
        per(after.publish - before.publish),
        per(after.publishshard - before.publishshard),
        per(after.sent - before.sent),
    );
    Ok(Row {
        workload: format!("cluster-bus {LOCKERS}"),
        implementation: "woken",
        ops: acquisitions,
        ops_per_s: acquisitions as f64 / elapsed.as_secs_f64(),
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        commands_per_op: None,
        notes,
        vs_baseline: None,
        vs_rslock: None,
    })
}
