//! A server that evicts keys is heard of without anyone asking: a locker looks at the
//! eviction policy once, alongside its first acquire, and warns through `tracing`.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use testkit::{RedisServer, ServerOptions};

/// The warnings emitted in this test binary, as text.
fn warnings() -> Arc<Mutex<Vec<String>>> {
    static RECORDED: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    RECORDED
        .get_or_init(|| {
            let recorded = Arc::new(Mutex::new(Vec::new()));
            tracing::subscriber::set_global_default(common::Recorder(recorded.clone()))
                .expect("the only subscriber of this test binary");
            recorded
        })
        .clone()
}

/// `INFO` requests the server has answered so far (the `INFO commandstats` that reads
/// them counts one more).
fn info_calls(server: &RedisServer) -> u64 {
    let info = server.command(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_server_is_warned_of_once_per_locker_without_a_request_per_acquire() {
    let recorded = warnings();
    let evicting = RedisServer::spawn_with(ServerOptions {
        extra_args: ["--maxmemory-policy", "allkeys-lru", "--maxmemory", "100mb"]
            .map(String::from)
            .to_vec(),
        ..ServerOptions::default()
    });
    let locker = redmutex::Locker::new(common::multiplexed(&evicting).await);
    let before = info_calls(&evicting);
    for _ in 0..20 {
        let lock = locker.acquire("job", Duration::from_secs(5)).await.unwrap();
        lock.release().await.unwrap();
    }
    let clone = locker.clone();
    clone
        .acquire("job", Duration::from_secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // The look runs in a task of its own: wait for what it says.
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while !recorded
        .lock()
        .unwrap()
        .iter()
        .any(|w| w.contains("allkeys-lru"))
    {
        assert!(std::time::Instant::now() < until, "no warning");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        info_calls(&evicting) - before - 1,
        1,
        "one look, at the first acquire, for the locker and its clones"
    );
    let seen: Vec<String> = recorded.lock().unwrap().clone();
    let about_eviction: Vec<&String> = seen
        .iter()
        .filter(|w| w.contains("maxmemory-policy"))
        .collect();
    assert_eq!(about_eviction.len(), 1, "{seen:#?}");
    assert!(
        about_eviction[0].starts_with("WARN"),
        "{}",
        about_eviction[0]
    );
    assert!(
        about_eviction[0].contains("allkeys-lru"),
        "{}",
        about_eviction[0]
    );
    assert!(
        about_eviction[0].contains("noeviction"),
        "{}",
        about_eviction[0]
    );

    // A fit server, and an evicting policy without a memory limit: nothing to say.
    let fit = RedisServer::spawn();
    let unlimited = RedisServer::spawn_with(ServerOptions {
        extra_args: ["--maxmemory-policy", "allkeys-lru", "--maxmemory", "0"]
            .map(String::from)
            .to_vec(),
        ..ServerOptions::default()
    });
    for server in [&fit, &unlimited] {
        let quiet = redmutex::Locker::new(common::multiplexed(server).await);
        let lock = quiet.acquire("job", Duration::from_secs(5)).await.unwrap();
        lock.release().await.unwrap();
    }
    // The look runs in a task of its own: give it time to say something, if it would.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after: usize = recorded
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.contains("maxmemory-policy"))
        .count();
    assert_eq!(
        after,
        1,
        "no warning for noeviction, nor without a memory limit: {:#?}",
        recorded.lock().unwrap()
    );
}
