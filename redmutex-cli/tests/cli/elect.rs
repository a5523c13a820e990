//! `redmutex elect`: a command run while leading, stepping down on request, campaigning again.

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use testkit::RedisServer;

use crate::common::*;

/// `elect` runs its command only while leading: a second `elect` waits, and runs once the
/// first command is done (its leadership resigned); `leader` prints who leads (text and
/// JSON), `leader --watch` a line per change; with `--again`, a lost leadership stops the
/// command and campaigns anew.
#[test]
fn elect_runs_the_command_while_leading_and_leader_shows_who() {
    let server = RedisServer::spawn();
    let dir = scratch("elect");
    let out = run(redmutex(&server).args(["leader", "svc"]));
    assert_eq!(
        (code(&out), stdout(&out).trim()),
        (0, "none"),
        "{}",
        stderr(&out)
    );
    // Every documented field, null when there is no leader.
    let out = run(redmutex(&server).args(["leader", "--json", "svc"]));
    assert_eq!(
        stdout(&out),
        "{\"key\":\"svc\",\"leader\":null,\"term\":null,\"ttl_ms\":null}\n"
    );
    let mut watch = redmutex(&server)
        .args(["leader", "--watch", "svc"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let watched = lines_of(&mut watch);
    // The watcher's first line is the state it found: wait for it, so that it cannot
    // find the first leader already in place.
    assert_eq!(next_line(&watched), "none");
    let release = dir.join("release");
    let lead = |name: &str| {
        format!(
            "echo \"$REDMUTEX_FENCE\" > {}; while [ ! -e {} ]; do sleep 0.02; done",
            dir.join(name).display(),
            release.display()
        )
    };
    let mut first = redmutex(&server)
        .args([
            "elect",
            "--value",
            "first",
            "svc",
            "--",
            "sh",
            "-c",
            &lead("a"),
        ])
        .spawn()
        .unwrap();
    let term_a: u64 = wait_for_file(&dir.join("a"), Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    let out = run(redmutex(&server).args(["leader", "--json", "svc"]));
    assert!(
        stdout(&out).starts_with(&format!(
            "{{\"key\":\"svc\",\"leader\":\"first\",\"term\":{term_a},\"ttl_ms\":"
        )),
        "{}",
        stdout(&out)
    );
    let mut second = redmutex(&server)
        .args([
            "elect",
            "--value",
            "second",
            "svc",
            "--",
            "sh",
            "-c",
            &lead("b"),
        ])
        .spawn()
        .unwrap();
    thread::sleep(ms(500));
    assert!(!dir.join("b").exists(), "two leaders");
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut first, Duration::from_secs(10)).success());
    let term_b: u64 = wait_for_file(&dir.join("b"), Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    assert!(term_b > term_a);
    assert!(wait_child(&mut second, Duration::from_secs(10)).success());
    let out = run(redmutex(&server).args(["leader", "svc"]));
    assert_eq!(stdout(&out).trim(), "none");
    // The watcher saw each leader in turn (perhaps nobody between them), then nobody;
    // a missing line is a panic of next_line's.
    let first_line = next_line(&watched);
    assert!(
        first_line.starts_with(&format!("first term {term_a} ")),
        "{first_line}"
    );
    let second_term = format!("second term {term_b} ");
    let mut between = next_line(&watched);
    if between == "none" {
        between = next_line(&watched);
    }
    assert!(between.starts_with(&second_term), "{between}");
    assert_eq!(next_line(&watched), "none");
    watch.kill().unwrap();
    watch.wait().unwrap();

    // --again: the key deleted under the leader (its leadership lost) stops the command,
    // and the next campaign runs it again.
    let log = dir.join("runs");
    let mut again = redmutex(&server)
        .args([
            "elect", "--again", "--ttl", "900ms", "--grace", "1s", "svc", "--",
        ])
        .args(["sh", "-c"])
        .arg(format!("echo run >> {}; sleep 30", log.display()))
        .spawn()
        .unwrap();
    wait_for_file(&log, Duration::from_secs(10));
    server.command(&["DEL", "svc"]);
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&log).unwrap().lines().count() < 2 {
        assert!(Instant::now() < until, "not run again after the loss");
        thread::sleep(ms(20));
    }
    unsafe {
        libc::kill(again.id() as i32, libc::SIGTERM);
    }
    let status = wait_child(&mut again, Duration::from_secs(10));
    assert!(!status.success());
    assert!(!exists(&server, "svc"));
    let out = run(redmutex(&server).args(["elect", "--ttl", "1ms", "svc", "--", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

/// `elect`: a leader asked to step down signals its command (SIGTERM by default), and
/// the leadership ends with it.
#[test]
fn a_leader_asked_to_step_down_signals_its_command() {
    let server = RedisServer::spawn();
    let dir = scratch("ask-leader");
    let trapped = dir.join("trapped");
    let script = format!(
        "trap 'echo term > {}; exit 0' TERM; sleep 20 & wait",
        trapped.display()
    );
    let mut leader = redmutex(&server)
        .args([
            "elect", "--ttl", "900ms", "leader", "--", "sh", "-c", &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_exists(&server, "leader", Duration::from_secs(5));
    let out = run(redmutex(&server).args(["release", "--ask", "leader"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = wait_child(&mut leader, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0));
    assert_eq!(wait_for_file(&trapped, ms(100)).trim(), "term");
    assert!(!exists(&server, "leader"));
}

/// `elect --again` asked to step down lets its command end, lets the candidate that waits
/// lead, and stays a candidate: it leads again (a second run of its command) once that one
/// steps down in turn. An outside SIGTERM, passed on to the command, still ends it.
#[test]
fn elect_again_steps_down_on_request_and_campaigns_again() {
    let server = RedisServer::spawn();
    let dir = scratch("ask-again");
    let runs = dir.join("runs");
    let candidate = |name: &str, again: bool| {
        let script = format!(
            "echo {name} >> {}; trap 'exit 0' TERM; sleep 30 & wait",
            runs.display()
        );
        let mut args = vec!["elect", "--ttl", "900ms"];
        if again {
            args.push("--again");
        }
        args.extend(["leader", "--", "sh", "-c", &script]);
        redmutex(&server)
            .args(&args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let until_runs = |expected: &str| {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&runs).unwrap_or_default();
            if text == expected {
                return;
            }
            assert!(
                Instant::now() < until,
                "runs {text:?}, expected {expected:?}"
            );
            thread::sleep(ms(20));
        }
    };
    let mut again = candidate("again", true);
    until_runs("again\n");
    let mut other = candidate("other", false);
    thread::sleep(ms(300)); // campaigning
    let out = run(redmutex(&server).args(["release", "--ask", "leader"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    until_runs("again\nother\n");
    assert!(
        again.try_wait().unwrap().is_none(),
        "--again stays a candidate"
    );
    let out = run(redmutex(&server).args(["release", "--ask", "leader"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        wait_child(&mut other, Duration::from_secs(5)).code(),
        Some(0)
    );
    until_runs("again\nother\nagain\n");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(again.id() as i32, libc::SIGTERM) };
    assert_eq!(
        wait_child(&mut again, Duration::from_secs(5)).code(),
        Some(0)
    );
    assert!(piped_stderr(&mut again).contains("stepped down on request; campaigning again"));
}
