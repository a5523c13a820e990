//! A real Redis Cluster on loopback: six `redis-server` processes (three masters, three
//! replicas) joined with `redis-cli --cluster create`.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::{RedisServer, ServerOptions};

/// How long the cluster may take to form (or to settle after a failover).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A six-node cluster, every node killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// One node as `CLUSTER NODES` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node's port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a master now.
    pub master: bool,
    /// Whether the others consider it failed.
    pub failed: bool,
    /// The hash slot ranges it serves (masters), inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts six nodes (node timeout 1 s, so a failover takes a few seconds), creates the
    /// cluster with one replica per master, and waits until every node reports
    /// `cluster_state:ok` and every replica is in sync.
    ///
    /// # Panics
    /// When a node does not start or the cluster does not form in time (with the output of
    /// `redis-cli`).
    pub fn spawn() -> RedisCluster {
        Self::spawn_with(&[])
    }

    /// As [`spawn`](RedisCluster::spawn), with further `redis-server` arguments for every
    /// node, e.g. `["--appendonly", "yes", "--appendfsync", "always"]` so that a node
    /// killed and restarted comes back with its data.
    ///
    /// # Panics
    /// As [`spawn`](RedisCluster::spawn).
    pub fn spawn_with(extra_args: &[&str]) -> RedisCluster {
        let options = ServerOptions {
            extra_args: [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                // Replicas sync at once instead of after the default 5 s batching delay.
                "--repl-diskless-sync-delay",
                "0",
            ]
            .iter()
            .chain(extra_args)
            .map(|arg| arg.to_string())
            .collect(),
            ..ServerOptions::default()
        };
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| RedisServer::spawn_with(options.clone()))
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let output = create
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}); install redis-tools"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_until_settled();
        cluster
    }

    /// The six nodes, in the order they were started (masters first, at creation).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://127.0.0.1:PORT` of every node: the seed list for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The cluster as a running node sees it now.
    pub fn topology(&self) -> Vec<ClusterNode> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a running node");
        parse_nodes(&bulk(&node.command(&["CLUSTER", "NODES"])))
    }

    /// The index (in [`nodes`](RedisCluster::nodes)) of the master that serves `key` now.
    pub fn master_of(&self, key: &str) -> usize {
        let node = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a running node");
        let slot: u16 = node.command(&["CLUSTER", "KEYSLOT", key])[1..]
            .trim()
            .parse()
            .expect("a slot number");
        let master = self
            .topology()
            .into_iter()
            .find(|n| {
                n.master && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
            .expect("a master for the slot");
        self.nodes
            .iter()
            .position(|n| n.port() == master.port)
            .expect("one of our nodes")
    }

    /// Waits until every running node reports `cluster_state:ok`, sees the same masters,
    /// and every running replica's link to its master is up.
    ///
    /// # Panics
    /// After 30 s.
    pub fn wait_until_settled(&self) {
        let until = Instant::now() + SETTLE_TIMEOUT;
        loop {
            if self.settled() {
                return;
            }
            assert!(
                Instant::now() < until,
                "the cluster did not settle: {:?}",
                self.topology()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn settled(&self) -> bool {
        let running: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.pid().is_some()).collect();
        let mut views = Vec::new();
        for node in &running {
            if !bulk(&node.command(&["CLUSTER", "INFO"])).contains("cluster_state:ok") {
                return false;
            }
            // Each node lists the others in its own order.
            let mut masters: Vec<(u16, Vec<(u16, u16)>)> =
                parse_nodes(&bulk(&node.command(&["CLUSTER", "NODES"])))
                    .into_iter()
                    .filter(|n| n.master && !n.failed && !n.slots.is_empty())
                    .map(|n| (n.port, n.slots))
                    .collect();
            masters.sort();
            views.push(masters);
            let replication = bulk(&node.command(&["INFO", "replication"]));
            if replication.contains("role:slave") && !replication.contains("master_link_status:up")
            {
                return false;
            }
        }
        views.windows(2).all(|w| w[0] == w[1])
            && views.first().is_some_and(|masters| {
                masters
                    .iter()
                    .map(|(_, slots)| {
                        slots
                            .iter()
                            .map(|(a, b)| usize::from(b - a) + 1)
                            .sum::<usize>()
                    })
                    .sum::<usize>()
                    == 16384
            })
    }
}

/// The text of a RESP bulk-string reply.
fn bulk(reply: &str) -> String {
    match reply.split_once("\r\n") {
        Some((header, body)) if header.starts_with('$') => body.trim_end().to_owned(),
        _ => reply.to_owned(),
    }
}

fn parse_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields.get(1)?;
            let port = address
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags = fields.get(2)?;
            let slots = fields
                .iter()
                .skip(8)
                .filter(|f| !f.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => {
                        let slot = range.parse().ok()?;
                        Some((slot, slot))
                    }
                })
                .collect();
            Some(ClusterNode {
                port,
                // Flags are comma-separated words; `nofailover` is not `fail`, and `fail?`
                // is only one node's suspicion.
                master: flags.split(',').any(|f| f == "master"),
                failed: flags.split(',').any(|f| f == "fail"),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        let text = "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                    b2 127.0.0.1:7001@17001 slave,nofailover a1 0 1 1 connected\n\
                    c3 127.0.0.1:7002@17002 master,fail - 0 1 2 disconnected 5461 5463-5470 [5462->-x]\n";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].port, 7000);
        assert!(nodes[0].master && !nodes[0].failed);
        assert_eq!(nodes[0].slots, [(0, 5460)]);
        assert!(!nodes[1].master && !nodes[1].failed && nodes[1].slots.is_empty());
        assert!(nodes[2].failed);
        assert_eq!(nodes[2].slots, [(5461, 5461), (5463, 5470)]);
    }
}
