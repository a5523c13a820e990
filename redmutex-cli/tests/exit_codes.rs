//! Every exit code of docs/CLI.md's table, produced by the real binary for each subcommand
//! where it applies, on one server and on Redlock over three.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::RedisServer;

mod common;

use common::*;

/// The servers a run talks to: one, or three Redlock nodes.
struct Topology {
    servers: Vec<RedisServer>,
}

impl Topology {
    fn new(nodes: usize) -> Topology {
        Topology {
            servers: RedisServer::spawn_many(nodes),
        }
    }

    fn redlock(&self) -> bool {
        self.servers.len() > 1
    }

    /// `redmutex` over these servers, a short wait for them, a clean environment.
    fn redmutex(&self) -> Command {
        urls_command(self.servers.iter().map(RedisServer::url))
    }

    /// Runs `args` and checks the exit code, saying which case failed.
    fn expect(&self, args: &[&str], expected: i32) -> Output {
        let out = run(self.redmutex().args(args).stdin(Stdio::null()));
        let topology = if self.redlock() {
            "Redlock"
        } else {
            "one server"
        };
        assert_eq!(
            code(&out),
            expected,
            "{args:?} on {topology}: {}",
            stderr(&out)
        );
        out
    }

    /// The config of every node.
    fn config_set(&self, name: &str, value: &str) {
        for server in &self.servers {
            server.command(&["CONFIG", "SET", name, value]);
        }
    }
}

fn urls_command(urls: impl IntoIterator<Item = String>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    for url in urls {
        cmd.arg("--redis").arg(url);
    }
    cmd.args(["--wait-redis", "500ms"]);
    cmd.env_remove("REDMUTEX_REDIS")
        .env_remove("REDIS_URL")
        .env_remove("REDMUTEX_NO_FENCES");
    with_signals(&mut cmd, libc::SIG_DFL);
    cmd
}

/// A token nobody holds anything with (the shape `acquire` prints).
const STRANGER: &str = "AAAAAAAAAAAAAAAAAAAAAA";

#[test]
fn every_exit_code_on_one_server() {
    every_exit_code(&Topology::new(1));
}

#[test]
fn every_exit_code_on_redlock() {
    every_exit_code(&Topology::new(3));
}

fn every_exit_code(t: &Topology) {
    succeeds(t);
    not_held_and_unfit_is_1(t);
    usage_errors_are_64(t);
    lost_is_70(t);
    closed_output_is_74(t);
    not_obtained_is_75(t);
    commands_that_cannot_run_are_126_and_127(t);
    unreachable_is_69(t);
}

/// 0 for every subcommand that did its work; exec passes on the command's own status.
fn succeeds(t: &Topology) {
    t.expect(&["exec", "ok", "true"], 0);
    t.expect(&["exec", "ok", "sh", "-c", "exit 3"], 3);
    let token = stdout(&t.expect(&["acquire", "held"], 0)).trim().to_owned();
    t.expect(&["refresh", "--token", &token, "--ttl", "1m", "held"], 0);
    t.expect(&["inspect", "held"], 0);
    t.expect(&["list"], 0);
    t.expect(&["wait", "-w", "1s", "free"], 0);
    t.expect(&["release", "--token", &token, "held"], 0);
    t.expect(&["elect", "e", "true"], 0);
    t.expect(&["leader", "e"], 0);
    t.expect(&["doctor"], 0);
    t.expect(&["acquire", "stuck"], 0);
    t.expect(&["release", "--force", "stuck"], 0);
}

/// 1: release and refresh by a token that holds nothing, a forced release of what nobody
/// holds; doctor on servers that evict.
fn not_held_and_unfit_is_1(t: &Topology) {
    t.expect(&["release", "--token", STRANGER, "some"], 1);
    t.expect(&["refresh", "--token", STRANGER, "--ttl", "1m", "some"], 1);
    t.expect(&["release", "--force", "some"], 1);
    t.config_set("maxmemory", "1gb");
    t.config_set("maxmemory-policy", "allkeys-lru");
    t.expect(&["doctor"], 1);
    t.config_set("maxmemory-policy", "noeviction");
    t.config_set("maxmemory", "0");
}

/// 64: a usage error or an invalid argument, for each subcommand, before any request.
fn usage_errors_are_64(t: &Topology) {
    let cases: [&[&str]; 13] = [
        &["exec", "k"],
        &["exec", "--ttl", "0s", "k", "true"],
        &["acquire", "-w", "10", "k"],
        &["release", "k"],
        &["refresh", "--token", STRANGER, "k"],
        &["inspect"],
        &["list", "--bogus"],
        &["watch"],
        &["wait", "-w", "soon", "k"],
        &["elect", "e"],
        &["leader"],
        &["doctor", "--bogus"],
        &["release", "--token", "not-a-token", "k"],
    ];
    for args in cases {
        t.expect(args, 64);
    }
    // Redlock refuses a semaphore, as the library does.
    if t.redlock() {
        t.expect(&["exec", "--limit", "2", "k", "true"], 64);
    }
}

/// 70: a command whose lock (or leadership) is taken from it while it runs is stopped.
fn lost_is_70(t: &Topology) {
    for (key, args) in [
        (
            "lost",
            &["exec", "--ttl", "600ms", "lost", "sleep", "10"][..],
        ),
        ("led", &["elect", "--ttl", "600ms", "led", "sleep", "10"]),
    ] {
        let mut running = t
            .redmutex()
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !t.servers.iter().any(|s| exists(s, key)) {
            assert!(Instant::now() < deadline, "{key} never held");
            thread::sleep(ms(20));
        }
        t.expect(&["release", "--force", key], 0);
        let status = wait_child(&mut running, Duration::from_secs(10));
        assert_eq!(status.code(), Some(70), "{args:?}");
    }
}

/// 74: output that cannot be written — acquire's token (the lock is released again), and
/// what inspect, list, leader and doctor print.
fn closed_output_is_74(t: &Topology) {
    for args in [
        &["acquire", "piped"][..],
        &["inspect", "piped"],
        &["list"],
        &["leader", "e"],
        &["doctor"],
    ] {
        let out = t
            .redmutex()
            .args(args)
            .stdin(Stdio::null())
            .stdout(unread_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(code(&out), 74, "{args:?}: {}", stderr(&out));
    }
    assert!(
        !t.servers.iter().any(|s| exists(s, "piped")),
        "nothing kept"
    );
    // A closed stdout (`>&-`), which Rust's standard output would ignore: refused first.
    for args in [
        &["acquire", "closed"][..],
        &["inspect", "closed"],
        &["list"],
        &["leader", "e"],
        &["doctor"],
        &["completions", "bash"],
        &["man"],
    ] {
        let mut cmd = t.redmutex();
        cmd.args(args).stdin(Stdio::null()).stderr(Stdio::piped());
        // SAFETY: close(2) only, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::close(1);
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert_eq!(code(&out), 74, "{args:?} into >&-: {}", stderr(&out));
    }
    assert!(
        !t.servers.iter().any(|s| exists(s, "closed")),
        "nothing taken"
    );
}

/// 75: not obtained — exec and acquire trying once or waiting a bounded time, a wait that
/// timed out; `-E` picks another code; a semaphore with no permit free (one server).
fn not_obtained_is_75(t: &Topology) {
    let token = stdout(&t.expect(&["acquire", "busy"], 0)).trim().to_owned();
    t.expect(&["exec", "-n", "busy", "true"], 75);
    t.expect(&["exec", "-w", "100ms", "busy", "true"], 75);
    t.expect(&["exec", "-n", "-E", "0", "busy", "true"], 0);
    t.expect(&["acquire", "-n", "busy"], 75);
    t.expect(&["wait", "-w", "100ms", "busy"], 75);
    t.expect(&["release", "--token", &token, "busy"], 0);
    if !t.redlock() {
        let permit = stdout(&t.expect(&["acquire", "--limit", "1", "pool"], 0));
        t.expect(&["exec", "-n", "--limit", "1", "pool", "true"], 75);
        t.expect(&["release", "--token", permit.trim(), "pool"], 0);
    }
}

/// 126 and 127: a command that is not executable, or not there; nothing stays held.
fn commands_that_cannot_run_are_126_and_127(t: &Topology) {
    // A directory of this topology's own: each test's scratch directory starts empty.
    let dir = scratch(&format!("exit-codes-{}", t.servers.len()));
    let file = dir.join("job.sh");
    std::fs::write(&file, "#!/bin/sh\ntrue\n").unwrap();
    let file = file.to_str().unwrap();
    t.expect(&["exec", "k", file], 126);
    t.expect(&["exec", "k", "/no/such/program"], 127);
    t.expect(&["elect", "e2", file], 126);
    t.expect(&["elect", "e2", "/no/such/program"], 127);
    assert!(!t.servers.iter().any(|s| exists(s, "k") || exists(s, "e2")));
}

/// 69: no server (one) or no quorum (Redlock) — every subcommand that needs one says so
/// within its wait for Redis.
fn unreachable_is_69(t: &Topology) {
    if t.redlock() {
        // One node of three: no quorum, so doctor's verdict is unknown, not "fit".
        for server in &t.servers[1..] {
            server.kill();
        }
        let json = stdout(&t.expect(&["doctor", "--json"], 69));
        assert!(json.starts_with("{\"fit\":null,"), "{json}");
        let text = stdout(&t.expect(&["doctor"], 69));
        assert!(
            text.contains("too few nodes answered for a quorum"),
            "{text}"
        );
    }
    for server in &t.servers {
        server.kill();
    }
    // What is wrong with the arguments is said before any wait for Redis.
    t.expect(&["acquire", "--limit", "2000000", "k"], 64);
    if t.redlock() {
        t.expect(&["exec", "--limit", "2", "k", "true"], 64);
    }
    let cases: [&[&str]; 11] = [
        &["exec", "k", "true"],
        &["acquire", "k"],
        &["release", "--token", STRANGER, "k"],
        &["refresh", "--token", STRANGER, "--ttl", "1m", "k"],
        &["release", "--force", "k"],
        &["inspect", "k"],
        &["list"],
        &["wait", "-w", "5s", "k"],
        &["elect", "e", "true"],
        &["leader", "e"],
        &["doctor"],
    ];
    for args in cases {
        let started = Instant::now();
        t.expect(args, 69);
        assert!(started.elapsed() < Duration::from_secs(8), "{args:?}");
    }
    let mut watch = t.redmutex();
    let watched = run(watch.args(["watch", "k"]).stdin(Stdio::null()));
    assert_eq!(code(&watched), 69, "watch: {}", stderr(&watched));
}
