//! A guard dropped as the program ends — `main` returning, or a `?` early return, with the
//! runtime shut down right after — is released all the same, on both runtime flavours, for
//! a `Lock` and a `Lease`; and a guard dropped outside any runtime too.
//!
//! Each case runs in a process of its own (this test binary, started again as a child), so
//! that the end of the program is real: the child takes the lock, lets its guard go as
//! `main` would, drops the runtime and exits at once. The parent then looks at the key.

mod common;

use std::process::Command;
use std::time::Duration;

use testkit::RedisServer;

/// The child's instructions: `flavour guard url key`.
const CHILD: &str = "REDMUTEX_SHUTDOWN_CHILD";
/// How many times each case runs.
const RUNS: usize = 10;

/// The child: what a user's `main` does, then the end of the process. Does nothing when
/// not started as a child.
#[test]
fn child_program() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [flavour, guard, url, key] = parts[..] else {
        panic!("bad {CHILD}: {spec}");
    };
    let runtime = match flavour {
        "current_thread" => tokio::runtime::Builder::new_current_thread(),
        _ => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(2);
            builder
        }
    }
    .enable_all()
    .build()
    .unwrap();
    let outside = runtime.block_on(user_main(guard, url, key));
    drop(runtime);
    // A guard that outlived its runtime is dropped with no runtime at all.
    drop(outside);
    // As `main` returning does: exit at once (exit handlers run, no destructors).
    std::process::exit(0);
}

/// A guard that outlives the runtime it was taken on.
type Outside = Option<redmutex::Lock<redis::aio::ConnectionManager>>;

/// Takes the lock, then returns early as `?` would, dropping the guard on the way out —
/// or, for `outside`, hands the guard out of the runtime. `url` may list several nodes
/// (Redlock). For `stalled`, the server stops serving writes before the guard goes. For
/// `reconnecting`, the connection goes through a proxy that cuts it and then swallows
/// every byte, so the release finds the connection manager reconnecting — with a timer on
/// this runtime, which ends with `main`.
async fn user_main(guard: &str, url: &str, key: &str) -> Outside {
    let proxy = (guard == "reconnecting").then(|| {
        let port = url.rsplit(':').next().unwrap().parse().unwrap();
        testkit::Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
    });
    let url = proxy.as_ref().map_or(url.to_owned(), testkit::Proxy::url);
    let nodes: Vec<_> = url
        .split(',')
        .map(|u| redmutex::connection::connect_lazy(u).unwrap())
        .collect();
    let locker = match <[_; 1]>::try_from(nodes) {
        Ok([one]) => redmutex::Locker::new(one),
        Err(nodes) => redmutex::Locker::redlock(nodes).unwrap(),
    };
    let lock = locker.acquire(key, Duration::from_secs(60)).await.unwrap();
    if guard == "stalled" {
        let mut raw = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(10_000)
            .arg("WRITE")
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    if let Some(proxy) = &proxy {
        proxy.blackhole(true);
        proxy.cut();
        // Time for the manager to see the cut and start reconnecting on this runtime.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed: Result<(), &str> = Err("some error in the user's code");
    match guard {
        "lock" | "stalled" | "reconnecting" => {
            let _lock = lock;
            failed.map(|_| None).unwrap_or(None)
        }
        "lease" => {
            let _lease = lock.keep_alive().unwrap();
            tokio::task::yield_now().await;
            failed.map(|_| None).unwrap_or(None)
        }
        _ => Some(lock),
    }
}

/// Runs the child program once; returns how long it took.
fn child(servers: &[RedisServer], flavour: &str, guard: &str, key: &str) -> Duration {
    child_with_stderr(servers, flavour, guard, key).0
}

/// Runs the child program once; returns how long it took and what it wrote to stderr.
fn child_with_stderr(
    servers: &[RedisServer],
    flavour: &str,
    guard: &str,
    key: &str,
) -> (Duration, String) {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let started = std::time::Instant::now();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_program",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, format!("{flavour} {guard} {} {key}", urls.join(",")))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{flavour} {guard}: child failed: {}\n{stderr}",
        output.status
    );
    (started.elapsed(), stderr)
}

/// Runs the child program `RUNS` times for a case; returns how many times the key was
/// still held (on any node) right after the child exited.
fn left_held(servers: &[RedisServer], flavour: &str, guard: &str) -> usize {
    let mut held = 0;
    for run in 0..RUNS {
        let key = format!("{flavour}-{guard}-{run}");
        child(servers, flavour, guard, &key);
        if servers
            .iter()
            .any(|s| s.command(&["EXISTS", &key]) == ":1\r\n")
        {
            held += 1;
        }
    }
    held
}

#[test]
fn guards_dropped_as_the_program_ends_are_released() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let one = [RedisServer::spawn()];
    let three = RedisServer::spawn_many(3);
    let mut report = Vec::new();
    for flavour in ["current_thread", "multi_thread"] {
        for guard in ["lock", "lease", "outside"] {
            let held = left_held(&one, flavour, guard);
            report.push(format!("{flavour} {guard}: {held} of {RUNS} left held"));
        }
        let held = left_held(&three, flavour, "lock");
        report.push(format!(
            "{flavour} redlock lock: {held} of {RUNS} left held"
        ));
    }
    eprintln!("{report:#?}");
    assert!(
        report.iter().all(|line| line.contains(": 0 of")),
        "{report:#?}"
    );
}

/// A server that stops serving writes while the program ends: the release cannot get
/// through, and the process still exits within the documented bound (it waits for pending
/// releases for at most 2 s), leaving the key to its TTL.
#[test]
fn an_unreachable_server_delays_the_exit_by_a_bounded_time() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let server = [RedisServer::spawn()];
    for flavour in ["current_thread", "multi_thread"] {
        let took = child(&server, flavour, "stalled", &format!("stalled-{flavour}"));
        assert!(
            took < Duration::from_secs(8),
            "{flavour}: the exit waited {took:?}: 2 s at most, plus start-up (the TTL is 60 s)"
        );
        assert_eq!(
            server[0].command(&["EXISTS", &format!("stalled-{flavour}")]),
            ":1\r\n"
        );
        assert_eq!(server[0].command(&["CLIENT", "UNPAUSE"]), "+OK\r\n");
    }
}

/// The program ends while the connection manager is reconnecting on the runtime that is
/// ending, to a server that no longer answers: the release handed over is left to the
/// key's TTL, and the process exits 0 within the exit bound. Polling that manager from
/// redmutex's release thread may panic inside tokio (its reconnection's timer belongs to
/// the runtime that ended): the panic is caught there and the release counted finished
/// (`background`'s unit test), its report printed by the panic hook — from that thread
/// alone, saying just that.
#[test]
fn a_release_through_a_manager_reconnecting_at_the_end_exits_cleanly() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let server = [RedisServer::spawn()];
    for flavour in ["current_thread", "multi_thread"] {
        for run in 0..3 {
            let key = format!("reconnecting-{flavour}-{run}");
            let (took, stderr) = child_with_stderr(&server, flavour, "reconnecting", &key);
            for report in stderr.lines().filter(|line| line.contains("panicked")) {
                assert!(
                    report.starts_with("thread 'redmutex-release'")
                        && stderr.contains("being shutdown"),
                    "{flavour}: {stderr}"
                );
            }
            assert!(
                took < Duration::from_secs(8),
                "{flavour}: the exit waited {took:?}"
            );
        }
    }
}
