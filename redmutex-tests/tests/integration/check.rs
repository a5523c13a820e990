//! `Locker::check_server`: what makes a server unfit for locks (an evicting policy), what
//! weakens a guarantee (no persistence, appendfsync, a replica, a cluster's state, missing
//! permissions), and what an ACL user may not read — on real servers of each kind.

use crate::common;
use redmutex::{check::Check, check::Level, check::ServerCheck, Locker};
use testkit::{RedisServer, ServerOptions};

fn server(args: &[&str]) -> RedisServer {
    RedisServer::spawn_with(ServerOptions {
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        ..ServerOptions::default()
    })
}

/// The finding of `check` on `node`.
fn found(report: &ServerCheck, node: usize, check: Check) -> (Level, String) {
    let finding = report
        .findings
        .iter()
        .find(|f| f.node == node && f.check == check)
        .unwrap_or_else(|| panic!("no {} finding on node {node}: {report:#?}", check.name()));
    (finding.level, finding.detail.clone())
}

#[tokio::test]
async fn a_default_server_is_fit_and_says_why_it_is_not_durable() {
    let server = RedisServer::spawn();
    let report = common::locker(&server).await.check_server().await;
    assert!(report.is_fit(), "{report:#?}");
    assert_eq!(found(&report, 0, Check::Eviction).0, Level::Fine);
    assert_eq!(found(&report, 0, Check::Role).0, Level::Fine);
    let (level, version) = found(&report, 0, Check::Version);
    assert_eq!(level, Level::Fine);
    assert!(
        version.starts_with("Redis ") || version.starts_with("Valkey "),
        "{version}"
    );
    // The test kit's servers keep no data: a restart forgets every lock.
    let (level, detail) = found(&report, 0, Check::Persistence);
    assert_eq!(level, Level::Warning);
    assert!(detail.contains("restart"), "{detail}");
    assert_eq!(found(&report, 0, Check::Permissions).0, Level::Fine);
    // Only the probe's fence counter is left (unless it expired already), and it expires
    // within a second.
    let left = server.command(&["DBSIZE"]);
    assert!(left == ":1\r\n" || left == ":0\r\n", "{left}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.command(&["DBSIZE"]) != ":0\r\n" {
        assert!(
            std::time::Instant::now() < until,
            "the probe left keys behind"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_evicting_policy_is_unsafe() {
    for policy in ["allkeys-lru", "volatile-lru", "allkeys-random"] {
        let server = server(&["--maxmemory-policy", policy, "--maxmemory", "100mb"]);
        let report = common::locker(&server).await.check_server().await;
        assert!(!report.is_fit(), "{policy}: {report:#?}");
        let (level, detail) = found(&report, 0, Check::Eviction);
        assert_eq!(level, Level::Unsafe, "{policy}");
        assert!(
            detail.contains(policy) && detail.contains("noeviction"),
            "{detail}"
        );
        assert_eq!(report.at(Level::Unsafe).count(), 1);
    }
    // No memory limit: nothing is evicted as long as none is set.
    let unlimited = server(&["--maxmemory-policy", "allkeys-lru", "--maxmemory", "0"]);
    let report = common::locker(&unlimited).await.check_server().await;
    assert!(report.is_fit(), "{report:#?}");
    let (level, detail) = found(&report, 0, Check::Eviction);
    assert_eq!(level, Level::Warning);
    assert!(detail.contains("maxmemory is 0"), "{detail}");
}

#[tokio::test]
async fn appendfsync_short_of_always_is_a_warning() {
    let everysec = server(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let report = common::locker(&everysec).await.check_server().await;
    assert!(report.is_fit());
    assert_eq!(found(&report, 0, Check::Persistence).0, Level::Fine);
    let (level, detail) = found(&report, 0, Check::Fsync);
    assert_eq!(level, Level::Warning);
    assert!(detail.contains("everysec"), "{detail}");
    let always = server(&["--appendonly", "yes", "--appendfsync", "always"]);
    let report = common::locker(&always).await.check_server().await;
    assert_eq!(found(&report, 0, Check::Fsync).0, Level::Fine);
}

#[tokio::test]
async fn a_replica_is_a_warning_and_its_probe_lock_fails() {
    let master = RedisServer::spawn();
    let port = master.port().to_string();
    let replica = server(&["--replicaof", "127.0.0.1", &port]);
    let report = common::locker(&replica).await.check_server().await;
    let (level, detail) = found(&report, 0, Check::Role);
    assert_eq!(level, Level::Warning);
    assert!(detail.contains("replica"), "{detail}");
    let (level, detail) = found(&report, 0, Check::Permissions);
    assert_eq!(level, Level::Unknown);
    assert!(detail.to_lowercase().contains("read only"), "{detail}");
}

/// The minimal ACL rule: INFO and CONFIG are not in it, so those checks say "could not
/// check" (not a failure); everything redmutex does is allowed, wake-up included. A user
/// without `+time` (fences) or without the channels (wake-up) is warned of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_users_get_could_not_check_and_missing_permissions() {
    let minimal = format!("locker on >pw {}", redmutex::check::acl_rule("app:"));
    let no_time = minimal.replace(" +time", "");
    let no_channels = minimal.replace("&app:*", "");
    let args: Vec<String> = [minimal, no_time.replacen("locker", "notime", 1)]
        .iter()
        .chain([no_channels.replacen("locker", "nochannel", 1)].iter())
        .flat_map(|rule| testkit::acl_user(rule))
        .collect();
    let server = RedisServer::spawn_with(ServerOptions {
        extra_args: args,
        ..ServerOptions::default()
    });
    let locker_for = |user: &str| {
        let url = format!("redis://{user}:pw@127.0.0.1:{}", server.port());
        async move {
            Locker::new(redmutex::connection::connect(&url).await.unwrap())
                .with_prefix("app:")
                .with_wake_up([redis::Client::open(url.as_str()).unwrap()])
                .unwrap()
        }
    };
    let report = locker_for("locker").await.check_server().await;
    assert!(report.is_fit(), "{report:#?}");
    let (level, detail) = found(&report, 0, Check::Eviction);
    assert_eq!(level, Level::Unknown);
    assert!(detail.contains("could not check"), "{detail}");
    assert_eq!(found(&report, 0, Check::Permissions).0, Level::Fine);
    assert_eq!(found(&report, 0, Check::WakeUp).0, Level::Fine);
    assert_eq!(report.at(Level::Warning).count(), 0, "{report:#?}");

    let report = locker_for("notime").await.check_server().await;
    let (level, detail) = found(&report, 0, Check::Permissions);
    assert_eq!(level, Level::Warning, "{detail}");
    assert!(detail.contains("fenced"), "{detail}");

    let report = locker_for("nochannel").await.check_server().await;
    assert_eq!(found(&report, 0, Check::Permissions).0, Level::Fine);
    assert_eq!(found(&report, 0, Check::WakeUp).0, Level::Warning);
}

/// Redlock: each node is judged on its own; a dead one is reported, not an error.
#[tokio::test]
async fn redlock_nodes_are_checked_one_by_one() {
    let servers = [
        RedisServer::spawn(),
        server(&["--maxmemory-policy", "allkeys-lfu", "--maxmemory", "100mb"]),
        RedisServer::spawn(),
    ];
    servers[2].kill();
    let nodes: Vec<_> = servers
        .iter()
        .map(|s| redmutex::connection::connect_lazy(&s.url()).unwrap())
        .collect();
    let report = Locker::redlock(nodes).unwrap().check_server().await;
    assert!(!report.is_fit());
    assert!(report.reached_any());
    assert_eq!(found(&report, 0, Check::Eviction).0, Level::Fine);
    assert_eq!(found(&report, 1, Check::Eviction).0, Level::Unsafe);
    assert_eq!(found(&report, 2, Check::Reachable).0, Level::Unknown);
    let (level, detail) = found(&report, 0, Check::Persistence);
    assert_eq!(level, Level::Warning);
    assert!(detail.contains("keep it out"), "Redlock's advice: {detail}");
}

/// A cluster connection: every master is looked at, and the cluster's state.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_checked_master_by_master() {
    let cluster = testkit::RedisCluster::spawn();
    let conn = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let report = Locker::cluster(conn).check_server().await;
    assert!(report.is_fit(), "{report:#?}");
    let versions = report
        .findings
        .iter()
        .filter(|f| f.check == Check::Version)
        .count();
    assert_eq!(versions, 3, "one per master: {report:#?}");
    assert_eq!(found(&report, 0, Check::Cluster).0, Level::Fine);
    assert_eq!(found(&report, 0, Check::Permissions).0, Level::Fine);
}
