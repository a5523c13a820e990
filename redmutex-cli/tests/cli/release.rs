//! `redmutex release`: by token (in `acquire`'s tests), `--force` from whoever holds it, and
//! `--ask` its holders to let go.

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use testkit::RedisServer;

use crate::common::*;

/// A forced release on Redlock that finds a holder on a minority of nodes only says so:
/// that was no lock anyone could count on (and still, it is removed).
#[test]
fn a_forced_release_of_a_minoritys_leftover_on_redlock_says_so() {
    let servers = RedisServer::spawn_many(3);
    let out =
        run(redmutex(&servers[0]).args(["acquire", "--ttl", "30s", "--metadata", "stale", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redlock(&servers).args(["release", "--force", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("stale"), "{text}");
    assert!(text.contains("on 1 of 3 nodes only: a minority"), "{text}");
    // A holder on a quorum is released without that remark.
    let out =
        run(redlock(&servers).args(["acquire", "--ttl", "30s", "--metadata", "owner", "job2"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redlock(&servers).args(["release", "--force", "job2"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("owner") && !text.contains("minority"),
        "{text}"
    );
}

#[test]
fn release_force_takes_the_lock_says_from_whom_and_the_holder_loses_it() {
    let server = RedisServer::spawn();
    let dir = scratch("force");
    let lost = dir.join("stopped");
    let mut holder = redmutex(&server)
        .args([
            "exec",
            "--ttl",
            "1500ms",
            "--metadata",
            "host=h pid=42",
            "stuck",
            "--",
        ])
        .args([
            "sh",
            "-c",
            &format!(
                "trap 'echo stopped > {}; exit 1' TERM; sleep 20 & wait",
                lost.display()
            ),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !exists(&server, "stuck") {
        assert!(Instant::now() < until, "the holder never took the lock");
        thread::sleep(ms(20));
    }

    let out = run(redmutex(&server).args(["release", "--force", "stuck"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.starts_with("released stuck: held by host=h pid=42 (lock, fence "),
        "{said}"
    );
    assert!(
        said.contains("Nobody else gets it until its ttl ends"),
        "{said}"
    );
    let audit = stderr(&out);
    assert!(audit.starts_with("redmutex: audit: "), "{audit}");
    assert!(
        audit.contains("forced release of \"stuck\" (lock, fence "),
        "{audit}"
    );
    assert!(
        audit.contains("holders [\"host=h pid=42\"]") && audit.contains(" pid="),
        "{audit}"
    );
    // A tombstone keeps everyone out until the holder's TTL ends; `inspect` says so.
    let tombstone = run(redmutex(&server).args(["inspect", "stuck"]));
    assert!(
        stdout(&tombstone).contains("released by force"),
        "{}",
        stdout(&tombstone)
    );
    let out = run(redmutex(&server).args(["acquire", "-n", "stuck"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));

    // The holder finds out at its next renewal (every 500 ms) and stops its command.
    let status = wait_child(&mut holder, Duration::from_secs(10));
    assert_eq!(status.code(), Some(70));
    assert_eq!(
        wait_for_file(&lost, Duration::from_secs(2)).trim(),
        "stopped"
    );
    // Forced again while the tombstone lasts: said, changed nothing.
    if exists(&server, "stuck") {
        let out = run(redmutex(&server).args(["release", "--force", "stuck"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("released by force already"),
            "{}",
            stdout(&out)
        );
    }
    let until = Instant::now() + Duration::from_secs(5);
    while exists(&server, "stuck") {
        assert!(
            Instant::now() < until,
            "the tombstone outlived the holder's TTL"
        );
        thread::sleep(ms(20));
    }

    // --now: gone at once, the holder not told.
    let out = run(redmutex(&server).args(["acquire", "--ttl", "30s", "dead"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["release", "--force", "--now", "dead"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("The holder is not told"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("forced release at once of \"dead\""),
        "{}",
        stderr(&out)
    );
    assert!(!exists(&server, "dead"));

    // Nothing to release, foreign data left alone: exit 1; usage errors: 64.
    let out = run(redmutex(&server).args(["release", "--force", "stuck"]));
    assert_eq!(
        (code(&out), stderr(&out).trim()),
        (1, "redmutex: stuck was not held")
    );
    server.command(&["SET", "theirs", "x"]);
    let out = run(redmutex(&server).args(["release", "--force", "theirs"]));
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("left alone"));
    assert_eq!(server.command(&["GET", "theirs"]), "$1\r\nx\r\n");
    for args in [
        vec!["release", "k"],
        vec![
            "release",
            "--force",
            "--token",
            "AAAAAAAAAAAAAAAAAAAAAA",
            "k",
        ],
        vec!["release", "--force", ""],
        vec!["release", "--now", "k"],
    ] {
        let out = run(redmutex(&server).args(&args));
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
    }
}

/// `release --ask`: the holder (an `exec`) hears it at its next renewal, sends its command
/// `--on-revoke`'s signal, and releases once the command ends; `--on-revoke none` keeps
/// the lock. Nobody to ask is exit 1.
#[test]
fn release_ask_makes_exec_signal_its_command_and_let_go_when_it_ends() {
    let server = RedisServer::spawn();
    let dir = scratch("ask");
    let trapped = dir.join("trapped");
    let script = format!(
        "trap 'echo $1 > {}; exit 0' USR1; sleep 20 & wait",
        trapped.display()
    );
    let mut holder = redmutex(&server)
        .args([
            "exec",
            "--ttl",
            "900ms",
            "--on-revoke",
            "SIGUSR1",
            "job",
            "--",
        ])
        .args(["sh", "-c", &script, "sh", "usr1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_exists(&server, "job", Duration::from_secs(5));
    let out = run(redmutex(&server).args(["release", "--ask", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("asked to let job go: held by "),
        "{}",
        stdout(&out)
    );
    let status = wait_child(&mut holder, Duration::from_secs(5));
    let err = piped_stderr(&mut holder);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("asked to let job go: sent SIGUSR1 to the command"),
        "{err}"
    );
    assert_eq!(wait_for_file(&trapped, ms(100)).trim(), "usr1");
    assert!(!exists(&server, "job"), "released when the command ended");

    // Ignored: the command runs to its end, holding the lock throughout.
    let mut stubborn = redmutex(&server)
        .args(["exec", "--ttl", "900ms", "--on-revoke", "none", "job", "--"])
        .args(["sleep", "1.5"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_exists(&server, "job", Duration::from_secs(5));
    let asked = Instant::now();
    let out = run(redmutex(&server).args(["release", "--ask", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    thread::sleep(ms(700));
    assert!(exists(&server, "job"), "kept: a request is not a release");
    let status = wait_child(&mut stubborn, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0));
    assert!(asked.elapsed() >= ms(1_000), "the command ran to its end");
    let err = piped_stderr(&mut stubborn);
    assert!(err.contains("ignored (--on-revoke none)"), "{err}");

    let out = run(redmutex(&server).args(["release", "--ask", "job"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("job was not held"),
        "{}",
        stderr(&out)
    );
    let out = run(redmutex(&server).args(["release", "--ask", "--token", "x", "job"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["release", "--ask", "--now", "job"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["exec", "--on-revoke", "BOGUS", "job", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(!exists(&server, "job"));
}

/// `release --ask` on a read-write lock's readers says it asked them all and names each
/// beyond the first by count; with stdout on a full disk, the request is still made, and
/// the error says so (a caller must not retry as if nothing happened).
#[test]
fn release_ask_names_every_reader_and_a_lost_answer_says_the_request_was_made() {
    let server = RedisServer::spawn();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (first, second) = runtime.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let config = redmutex::Locker::new(conn).rw_lock("config").unwrap();
        let ttl = Duration::from_secs(30);
        let first = config.read(ttl).metadata("host=a").await.unwrap();
        let second = config.read(ttl).metadata("host=b").await.unwrap();
        (first, second)
    });
    let out = run(redmutex(&server).args(["release", "--ask", "config"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("asked all 2 holders to let config go: held by 2 readers: host="),
        "{text}"
    );
    assert!(text.contains(", +1 more (rw_lock_read"), "{text}");
    assert!(text.contains("Each hears the request"), "{text}");

    assert_eq!(server.command(&["DEL", "{config}:ask"]), ":1\r\n");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = run(redmutex(&server)
        .args(["release", "--ask", "config"])
        .stdout(full));
    assert_eq!(code(&out), 74, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("asked to let config go, but cannot write to stdout"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        server.command(&["ZCARD", "{config}:ask"]),
        ":2\r\n",
        "both readers were asked"
    );
    runtime.block_on(async {
        first.release().await.unwrap();
        second.release().await.unwrap();
    });
}
