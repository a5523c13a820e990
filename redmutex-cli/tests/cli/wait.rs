//! `redmutex wait`: waiting for a key to be free without taking it.

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use testkit::RedisServer;

use crate::common::*;

/// `wait` returns once the key is free (woken by the release), takes nothing, and gives up
/// with 75 after `--timeout`.
#[test]
fn wait_exits_0_once_free_and_75_after_its_timeout() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["wait", "free"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["acquire", "--ttl", "1m", "busy"]));
    let token = stdout(&out).trim().to_owned();
    let started = Instant::now();
    let out = run(redmutex(&server).args(["wait", "--timeout", "300ms", "busy"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("still held after 300ms"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() < ms(3_000));
    let mut waiter = redmutex(&server)
        .args(["wait", "--timeout", "30s", "busy"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // The holder is marked as observed ('o' after its token): its release is announced,
    // while inspect and list say nobody waits to take it.
    let until = Instant::now() + Duration::from_secs(5);
    while !server
        .command(&["GET", "busy"])
        .contains(&format!("{token}o"))
    {
        assert!(Instant::now() < until, "never marked");
        thread::sleep(ms(20));
    }
    let inspected = stdout(&run(redmutex(&server).args(["inspect", "busy", "--json"])));
    assert!(inspected.contains("\"awaited\":false"), "{inspected}");
    let listed = stdout(&run(redmutex(&server).args(["list", "--json"])));
    assert!(
        listed.contains("\"key\":\"busy\",\"kind\":\"lock\""),
        "{listed}"
    );
    assert!(!listed.contains("\"awaited\":true"), "{listed}");
    thread::sleep(ms(1_200)); // past its first polls: only the release wakes it quickly
    let released = Instant::now();
    let out = run(redmutex(&server).args(["release", "--token", &token, "busy"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(wait_child(&mut waiter, Duration::from_secs(5)).success());
    assert!(released.elapsed() < ms(900), "{:?}", released.elapsed());
    assert!(!exists(&server, "busy"), "wait took nothing");
}

/// `-w` is the wait, as flock's, on exec, acquire and wait, and `--timeout` the same on
/// each: a held key is given up after it with 75.
#[test]
fn wait_is_dash_w_or_timeout_everywhere() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["acquire", "busy"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for args in [
        &["exec", "-w", "200ms", "busy", "true"][..],
        &["exec", "--timeout", "200ms", "busy", "true"],
        &["acquire", "-w", "200ms", "busy"],
        &["acquire", "--timeout", "200ms", "busy"],
        &["wait", "-w", "200ms", "busy"],
        &["wait", "--timeout", "200ms", "busy"],
        &["wait", "--wait", "200ms", "busy"],
    ] {
        let started = Instant::now();
        let out = run(redmutex(&server).args(args));
        assert_eq!(code(&out), 75, "{args:?}: {}", stderr(&out));
        assert!(started.elapsed() >= ms(200), "{args:?}");
    }
}
