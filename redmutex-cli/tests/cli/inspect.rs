//! `redmutex inspect`: whether a key is held, by whom, and who waits for it.

use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::RedisServer;

use crate::common::*;

/// A key (or metadata) with a newline or an escape sequence cannot fake a line of
/// `inspect`'s text output: control characters are escaped.
#[test]
fn inspect_escapes_control_characters() {
    let server = RedisServer::spawn();
    let key = "job\nother: held, ttl 1h\u{1b}[2J";
    let out = run(redmutex(&server).args([
        "acquire",
        "--ttl",
        "1m",
        "--metadata",
        "line one\nline two",
        key,
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["inspect", key]));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text:?}");
    assert!(
        text.starts_with("job\\nother: held, ttl 1h\\u{1b}[2J: held, ttl "),
        "{text:?}"
    );
    assert!(
        text.ends_with("metadata: line one\\nline two\n"),
        "{text:?}"
    );
    let out = run(redmutex(&server).args(["inspect", "--json", key]));
    assert!(stdout(&out).contains("\"job\\nother: held, ttl 1h\\u001b[2J\""));
}

/// Execs of other processes waiting for a lock or a semaphore stand in its line, one place
/// each: `inspect` and `list` count them as its waiters (a semaphore's keys carry no flag
/// that would say it otherwise).
#[test]
fn waiting_processes_are_counted_by_inspect_and_list() {
    let server = RedisServer::spawn();
    let take = |args: &[&str]| {
        let out = run(redmutex(&server).arg("acquire").args(args));
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        stdout(&out).trim().to_owned()
    };
    let job = take(&["--ttl", "30s", "job"]);
    let pool = take(&["--limit", "1", "--ttl", "30s", "pool"]);
    let mut waiting: Vec<Child> = Vec::new();
    for _ in 0..2 {
        for args in [&["job"][..], &["--limit", "1", "pool"][..]] {
            let child = (redmutex(&server).args(["exec", "-w", "20s"]).args(args))
                .arg("true")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            waiting.push(child);
        }
    }
    let inspect = |args: &[&str]| stdout(&run(redmutex(&server).arg("inspect").args(args)));
    let started = Instant::now();
    while !(inspect(&["--json", "job"]).contains("\"waiters\":2")
        && inspect(&["--json", "pool"]).contains("\"waiters\":2"))
    {
        assert!(
            started.elapsed() < ms(10_000),
            "{}",
            inspect(&["--json", "pool"])
        );
        thread::sleep(ms(100));
    }
    let pool_json = inspect(&["--json", "pool"]);
    assert!(pool_json.contains("\"awaited\":true"), "{pool_json}");
    assert!(pool_json.contains("\"kind\":\"semaphore\""), "{pool_json}");
    assert!(
        inspect(&["pool"]).contains("waiting: 2"),
        "{}",
        inspect(&["pool"])
    );
    assert!(
        inspect(&["job"]).contains(", 2 waiting"),
        "{}",
        inspect(&["job"])
    );
    let listed = stdout(&run(redmutex(&server).args(["list", "--json"])));
    assert_eq!(listed.matches("\"waiters\":2").count(), 2, "{listed}");
    for child in &mut waiting {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // Their heartbeats in the lines end: nobody waits, whatever flag the lock's value
    // still carries.
    let started = Instant::now();
    while !inspect(&["--json", "job"]).contains("\"waiters\":0") {
        assert!(
            started.elapsed() < ms(10_000),
            "{}",
            inspect(&["--json", "job"])
        );
        thread::sleep(ms(100));
    }
    assert!(inspect(&["--json", "job"]).contains("\"awaited\":false"));
    assert!(
        !inspect(&["job"]).contains("awaited"),
        "{}",
        inspect(&["job"])
    );
    for (token, key) in [(&job, "job"), (&pool, "pool")] {
        let out = run(redmutex(&server).args(["release", "--token", token, key]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
}

/// `inspect` on Redlock where the nodes that answer cannot decide (held on one, free on
/// another, the third frozen) asks again, as `list`, `wait` and `watch` do, until
/// `--wait-redis` has passed: it answers once the frozen node does, and exits 69 if it
/// never does.
#[test]
fn redlock_inspect_waits_out_an_undecided_key_up_to_wait_redis() {
    let out = undecided_key_waited_out(&["inspect", "job"]);
    assert!(
        stdout(&out).starts_with("job: held, ttl "),
        "{}",
        stdout(&out)
    );
}

/// `inspect` on a semaphore's key says who holds its permits, not "foreign data" (the key
/// is not a lock's); once the permits are given back, the key is free.
#[test]
fn inspect_says_what_holds_a_semaphore() {
    let server = RedisServer::spawn();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let permit = runtime.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let exports = redmutex::Locker::new(conn).semaphore("exports", 3).unwrap();
        (exports.acquire(2, Duration::from_secs(30)))
            .metadata("job=export-17")
            .await
            .unwrap()
    });
    let out = run(redmutex(&server).args(["inspect", "exports"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("exports: held by job=export-17 [2 permits] (semaphore, ttl "),
        "{text}"
    );
    assert!(text.trim_end().ends_with(", 2/3 permits)"), "{text}");
    runtime.block_on(permit.release()).unwrap();
    let out = run(redmutex(&server).args(["inspect", "exports"]));
    assert_eq!(stdout(&out).trim(), "exports: free");
}
