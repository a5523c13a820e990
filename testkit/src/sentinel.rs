//! A Sentinel-monitored group on loopback: one master, one replica and three sentinels.

use std::thread;
use std::time::{Duration, Instant};

use crate::{RedisServer, ServerOptions};

/// How long the group may take to form, or a failover to complete.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The name the sentinels know the group by.
pub const MASTER_NAME: &str = "mymaster";

/// One master, one replica, three sentinels (quorum 2, master down after 1 s); every
/// process killed on drop.
#[derive(Debug)]
pub struct SentinelGroup {
    /// `[master, replica]` as started; roles change with failovers.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Starts the master and its replica, waits for the replica to sync, starts the three
    /// sentinels and waits until each knows the replica and the other two sentinels.
    ///
    /// # Panics
    /// When a process does not start or the group does not form in time.
    pub fn spawn() -> SentinelGroup {
        let master = RedisServer::spawn_with(ServerOptions {
            extra_args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
            ..ServerOptions::default()
        });
        let replica = RedisServer::spawn_with(ServerOptions {
            extra_args: ["--replicaof", "127.0.0.1", &master.port().to_string()]
                .into_iter()
                .chain(["--repl-diskless-sync-delay", "0"])
                .map(String::from)
                .collect(),
            ..ServerOptions::default()
        });
        wait_for("the replica to sync", || {
            replica
                .command(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            master.port()
        );
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::spawn_with(ServerOptions {
                    config: Some(config.clone()),
                    extra_args: vec!["--sentinel".into()],
                    ..ServerOptions::default()
                })
            })
            .collect();
        let group = SentinelGroup {
            servers: vec![master, replica],
            sentinels,
        };
        wait_for("the sentinels to know the replica and each other", || {
            group.sentinels.iter().all(|s| {
                let replicas = s.command(&["SENTINEL", "REPLICAS", MASTER_NAME]);
                let others = s.command(&["SENTINEL", "SENTINELS", MASTER_NAME]);
                replicas.starts_with("*1") && others.starts_with("*2")
            })
        });
        group
    }

    /// The master and the replica, in the order they were started.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// `redis://127.0.0.1:PORT` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The name of the monitored group.
    pub fn master_name(&self) -> &'static str {
        MASTER_NAME
    }

    /// The port of the master that the first running sentinel names now.
    pub fn master_port(&self) -> u16 {
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.pid().is_some())
            .expect("a running sentinel");
        let reply = sentinel.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
        // *2 $9 127.0.0.1 $N PORT
        reply
            .split("\r\n")
            .nth(4)
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no master address in {reply:?}"))
    }

    /// The index in [`servers`](SentinelGroup::servers) of the master the sentinels name.
    pub fn master(&self) -> usize {
        let port = self.master_port();
        self.servers
            .iter()
            .position(|s| s.port() == port)
            .expect("one of our servers")
    }

    /// Waits until the sentinels name a master other than the one at `old_port`, and that
    /// server says it is a master.
    ///
    /// # Panics
    /// After 30 s.
    pub fn wait_for_failover_from(&self, old_port: u16) {
        wait_for("the failover", || {
            let port = self.master_port();
            port != old_port
                && self
                    .servers
                    .iter()
                    .find(|s| s.port() == port)
                    .is_some_and(|s| s.command(&["ROLE"]).contains("master"))
        });
    }

    /// Makes the server that is not the master a replica of the master (as Sentinel does
    /// with an old master that comes back, at its next look) and waits until it is in
    /// sync, so that it can be promoted again.
    ///
    /// # Panics
    /// After 30 s.
    pub fn resync_replica(&self) {
        let master = self.master();
        let port = self.servers[master].port().to_string();
        let replica = &self.servers[1 - master];
        replica.command(&["REPLICAOF", "127.0.0.1", &port]);
        wait_for("the replica to sync", || {
            let info = replica.command(&["INFO", "replication"]);
            info.contains("master_link_status:up") && info.contains(&format!("master_port:{port}"))
        });
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + SETTLE_TIMEOUT;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}
