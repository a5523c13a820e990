//! `redmutex watch`: a line per change of a key's holder, through outages of Redis.

use std::io::Read;
use std::process::Stdio;
use std::thread;
use std::time::Instant;

use testkit::RedisServer;

use crate::common::*;

/// `watch` and `leader --watch` without Redis: they say so on stderr, print nothing of a
/// state nobody can read, and exit 69 once --wait-redis has passed without an answer.
#[test]
fn watches_exit_69_once_redis_is_gone_for_wait_redis() {
    let server = RedisServer::spawn();
    for watch in [&["watch", "job"][..], &["leader", "--watch", "svc"][..]] {
        server.restart();
        let mut child = redmutex(&server)
            .args(["--wait-redis", "1s"])
            .args(watch)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = lines_of(&mut child);
        let first = next_line(&lines);
        assert!(
            first.contains("free") || first == "none",
            "{watch:?}: {first}"
        );
        server.kill();
        let killed = Instant::now();
        let status = wait_child(&mut child, ms(15_000));
        assert_eq!(status.code(), Some(69), "{watch:?}");
        assert!(
            killed.elapsed() >= ms(1_000),
            "{watch:?}: waited --wait-redis"
        );
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(err.contains("waiting up to 1s"), "{watch:?}: {err}");
        assert!(
            lines.try_recv().is_err(),
            "{watch:?}: nothing printed meanwhile"
        );
    }
}

/// An outage shorter than --wait-redis does not end a watch: it reads on once the server is
/// back, and prints the next change.
#[test]
fn a_watch_goes_on_through_a_short_outage() {
    let server = RedisServer::spawn();
    let mut child = redmutex(&server)
        .args(["--wait-redis", "30s", "watch", "job"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    assert!(next_line(&lines).contains("free"));
    server.kill();
    thread::sleep(ms(600));
    server.restart();
    let out = run(redmutex(&server).args(["acquire", "--ttl", "30s", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        next_line(&lines).contains("job held by"),
        "the watch goes on"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// On Redlock, `watch` and `list` show who holds a key on a quorum of nodes: a holder left
/// on one node of three (a lock taken through that node alone) holds nothing there.
#[test]
fn redlock_watch_and_list_ignore_a_holder_on_a_minority_of_nodes() {
    let servers = RedisServer::spawn_many(3);
    let out =
        run(redmutex(&servers[0]).args(["acquire", "--ttl", "30s", "--metadata", "stale", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redlock(&servers).args(["list"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stdout(&out).contains("job"), "{}", stdout(&out));
    let mut child = redlock(&servers)
        .args(["watch", "job"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    let first = next_line(&lines);
    assert!(first.ends_with("job free"), "{first}");
    let out =
        run(redlock(&servers).args(["acquire", "--ttl", "30s", "--metadata", "owner", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let held = next_line(&lines);
    assert!(held.contains("owner") && !held.contains("stale"), "{held}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn watch_prints_a_line_per_change_of_holder() {
    let server = RedisServer::spawn();
    for json in [false, true] {
        let mut watch = redmutex(&server)
            .arg("watch")
            .args(json.then_some("--json"))
            .arg("w")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = lines_of(&mut watch);
        let first = next_line(&lines);
        let token = acquire(&server, &["--metadata", "who=one", "w"]);
        let taken = next_line(&lines);
        let out = run(redmutex(&server).args(["release", "--token", &token, "w"]));
        assert_eq!(code(&out), 0);
        let freed = next_line(&lines);
        acquire(&server, &["--metadata", "who=two", "--ttl", "1s", "w"]);
        let again = next_line(&lines);
        let expired = next_line(&lines);
        let _ = watch.kill();
        let _ = watch.wait();
        if json {
            assert!(
                first.ends_with(",\"key\":\"w\",\"held\":false,\"lock\":null}"),
                "{first}"
            );
            assert!(
                taken.contains("\"held\":true,\"lock\":{\"key\":\"w\",\"kind\":\"lock\""),
                "{taken}"
            );
            assert!(taken.contains("\"metadata\":\"who=one\""), "{taken}");
            assert!(freed.contains("\"held\":false"), "{freed}");
            assert!(again.contains("who=two") && expired.contains("\"held\":false"));
            assert_eq!(json_keys(&first)[..3], ["time", "key", "held"]);
        } else {
            let time = |line: &str| line.split(' ').next().unwrap().len();
            assert_eq!(time(&first), "2026-11-24T01:20:03Z".len(), "{first}");
            assert!(first.ends_with(" w free"), "{first}");
            assert!(taken.contains(" w held by who=one (lock, "), "{taken}");
            assert!(freed.ends_with(" w free"), "{freed}");
            assert!(again.contains(" w held by who=two (lock, "), "{again}");
            assert!(
                expired.ends_with(" w free"),
                "an expiry is a change too: {expired}"
            );
        }
    }
}
