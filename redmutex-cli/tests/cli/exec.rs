//! `redmutex exec`: the command run under the lock — its environment, exit status, signals,
//! terminal and process group —, waiting for a busy lock, and `--fair`, `--shared` /
//! `--exclusive`, `--limit`, `--min-hold`, `--no-fences`, `--on-revoke`.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::RedisServer;

use crate::common::*;

#[test]
fn exec_passes_env_and_exit_status_and_releases() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args([
        "exec",
        "k1",
        "k2",
        "--",
        "sh",
        "-c",
        "echo \"$REDMUTEX_KEYS|$REDMUTEX_TTL_MS|${#REDMUTEX_TOKEN}|${#REDMUTEX_FENCE}\"; redis-cli -p \"$PORT\" exists k1; exit 3",
    ]).env("PORT", server.port().to_string()));
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "k1,k2|30000|22|16\n1\n",
        "held while the command ran; a new key's fence is the server's clock in µs"
    );
    assert!(
        !exists(&server, "k1") && !exists(&server, "k2"),
        "released after"
    );
}

/// Each exec gets a greater fence in `REDMUTEX_FENCE`; inspect shows the latest, held or
/// not.
#[test]
fn exec_passes_increasing_fences_and_inspect_shows_the_latest() {
    let server = RedisServer::spawn();
    let print_fence = ["sh", "-c", "echo \"$REDMUTEX_FENCE\""];
    let mut fences = Vec::new();
    for _ in 0..3 {
        let out = run(redmutex(&server)
            .args(["exec", "orders"])
            .arg("--")
            .args(print_fence));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        fences.push(stdout(&out).trim().parse::<u64>().unwrap());
    }
    assert!(fences[0] < fences[1] && fences[1] < fences[2], "{fences:?}");
    let out = run(redmutex(&server).args(["inspect", "orders"]));
    assert_eq!(
        stdout(&out),
        format!("orders: free, last fence {}\n", fences[2])
    );
    let out = run(redmutex(&server).args([
        "exec",
        "orders",
        "--",
        "sh",
        "-c",
        "\"$0\" --redis \"$1\" inspect orders; \"$0\" --redis \"$1\" inspect --json orders",
        env!("CARGO_BIN_EXE_redmutex"),
        &server.url(),
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let fourth: u64 = (text.split(", fence ").nth(1))
        .and_then(|rest| rest.split(',').next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {text}"));
    assert!(fourth > fences[2], "{text}");
    assert!(text.contains(&format!("\"fence\":{fourth},")), "{text}");
}

#[test]
fn exec_reports_death_by_signal_as_128_plus_n() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["exec", "k", "--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(code(&out), 128 + 15);
    let out = run(redmutex(&server).args(["exec", "k", "--", "sh", "-c", "kill -KILL $$"]));
    assert_eq!(code(&out), 128 + 9);
    assert!(!exists(&server, "k"));
}

#[test]
fn exec_on_a_held_lock_nonblocking_and_with_wait() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["acquire", "--ttl", "1m", "busy"]));
    assert_eq!(code(&out), 0);

    let started = Instant::now();
    let out = run(redmutex(&server).args(["exec", "-n", "busy", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(started.elapsed() < ms(1000), "-n answers at once");
    assert!(stderr(&out).contains("not obtained"), "{}", stderr(&out));

    let out = run(redmutex(&server).args(["exec", "-n", "-E", "9", "busy", "--", "true"]));
    assert_eq!(code(&out), 9);

    let started = Instant::now();
    let out = run(redmutex(&server).args(["exec", "--wait", "1s", "busy", "--", "true"]));
    let waited = started.elapsed();
    assert_eq!(code(&out), 75);
    assert!(waited >= ms(1000) && waited < ms(3000), "waited {waited:?}");
}

/// A waiting exec subscribes to the key's releases and marks the holder as awaited, so it
/// starts right after the release instead of at its next poll.
#[test]
fn a_waiting_exec_is_woken_by_the_release() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["acquire", "--ttl", "1m", "busy"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    let mut waiter = redmutex(&server)
        .args(["exec", "--wait", "30s", "busy", "--", "true"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let out = run(redmutex(&server).args(["inspect", "busy", "--json"]));
        if stdout(&out).contains("\"awaited\":true") {
            break;
        }
        assert!(Instant::now() < until, "never marked: {}", stdout(&out));
        thread::sleep(ms(20));
    }
    let out = run(redmutex(&server).args(["inspect", "busy"]));
    assert!(stdout(&out).contains(", 1 waiting"), "{}", stdout(&out));
    let released = Instant::now();
    let out = run(redmutex(&server).args(["release", "--token", &token, "busy"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(wait_child(&mut waiter, Duration::from_secs(5)).success());
    assert!(
        released.elapsed() < ms(1500),
        "started {:?} after the release",
        released.elapsed()
    );
    assert!(!exists(&server, "busy"));
}

/// Lockers (processes) in the line of `key`, as the server counts them: each is a ticket
/// and a heartbeat in `{key}:line`.
fn in_lock_line(server: &RedisServer, key: &str) -> usize {
    let reply = server.command(&["ZCARD", &format!("{{{key}}}:line")]);
    let members: usize = reply.trim().trim_start_matches(':').parse().unwrap();
    members / 2
}

/// Waits until `n` processes stand in the line of `key`.
fn until_in_line(server: &RedisServer, key: &str, n: usize) {
    let until = Instant::now() + Duration::from_secs(5);
    while in_lock_line(server, key) != n {
        assert!(
            Instant::now() < until,
            "{} in line, expected {n}",
            in_lock_line(server, key)
        );
        thread::sleep(ms(10));
    }
}

/// A waiting process killed while it stands first in the key's line cannot take itself
/// out: the release hands the key to it all the same. The hand-off falls through within
/// the line's heartbeat — the next process in line has the key a moment later (its own
/// try, at least once per third of a heartbeat), not at the holder's TTL of a minute.
#[test]
fn a_hand_off_to_a_killed_waiting_process_falls_through_within_its_heartbeat() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["acquire", "--ttl", "1m", "hot"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    let waiter = |server: &RedisServer| {
        redmutex(server)
            .args(["exec", "--wait", "60s", "hot", "--", "true"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut killed = waiter(&server);
    until_in_line(&server, "hot", 1);
    let mut next = waiter(&server);
    until_in_line(&server, "hot", 2);
    killed.kill().unwrap();
    killed.wait().unwrap();
    let released = Instant::now();
    let out = run(redmutex(&server).args(["release", "--token", &token, "hot"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(wait_child(&mut next, Duration::from_secs(10)).success());
    let heartbeat = redmutex::limits::DEFAULT_HEARTBEAT;
    assert!(
        released.elapsed() < heartbeat,
        "the next in line ran {:?} after the release",
        released.elapsed()
    );
    // The dead process's place went with the hand-off; nothing is left behind.
    assert!(!exists(&server, "hot"));
    assert_eq!(in_lock_line(&server, "hot"), 0);
}

#[test]
fn two_execs_on_one_key_are_serialized() {
    let server = RedisServer::spawn();
    let dir = scratch("serial");
    let log = dir.join("log");
    let script = format!(
        "echo start >> {0}; sleep 0.4; echo end >> {0}",
        log.display()
    );
    let mut children: Vec<Child> = (0..2)
        .map(|_| {
            redmutex(&server)
                .args(["exec", "--ttl", "5s", "shared", "--", "sh", "-c", &script])
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        assert!(wait_child(child, Duration::from_secs(10)).success());
    }
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines,
        ["start", "end", "start", "end"],
        "the two commands overlapped"
    );
}

#[test]
fn lost_lock_stops_the_whole_process_group() {
    let server = RedisServer::spawn();
    let dir = scratch("lost");
    let (term, grandchild, stubborn) = (
        dir.join("term"),
        dir.join("grandchild"),
        dir.join("stubborn"),
    );
    // The command: a grandchild that dies on SIGTERM, one that ignores it, and a main
    // process that notes the SIGTERM and keeps going (so SIGKILL must finish it).
    let script = format!(
        "sleep 1000 & echo $! > {g}; \
         (trap '' TERM; exec sleep 1000) & echo $! > {s}; \
         trap 'echo got-term > {t}' TERM; \
         while :; do sleep 0.05; done",
        g = grandchild.display(),
        s = stubborn.display(),
        t = term.display()
    );
    let mut child = redmutex(&server)
        .args([
            "exec", "--ttl", "1s", "--grace", "500ms", "job", "--", "sh", "-c", &script,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let grandchild_pid = wait_for_file(&grandchild, Duration::from_secs(5));
    let stubborn_pid = wait_for_file(&stubborn, Duration::from_secs(5));
    assert!(process_alive(&grandchild_pid));
    server.command(&["DEL", "job"]);
    let status = wait_child(&mut child, Duration::from_secs(10));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(70), "{err}");
    assert!(err.contains("lost"), "{err}");
    assert_eq!(std::fs::read_to_string(&term).unwrap().trim(), "got-term");
    thread::sleep(ms(100));
    assert!(!process_alive(&grandchild_pid), "grandchild survived");
    assert!(
        !process_alive(&stubborn_pid),
        "a grandchild ignoring SIGTERM survived SIGKILL"
    );
}

#[test]
fn signals_to_redmutex_reach_the_command() {
    for signal in ["TERM", "INT"] {
        forward(signal);
    }
}

fn forward(signal: &str) {
    let server = RedisServer::spawn();
    let dir = scratch(&format!("forward-{signal}"));
    let marker = dir.join("marker");
    let ready = dir.join("ready");
    let script = format!(
        "trap 'echo forwarded > {m}; exit 7' {signal}; echo up > {r}; while :; do sleep 0.05; done",
        m = marker.display(),
        r = ready.display()
    );
    let mut child = redmutex(&server)
        .args(["exec", "job", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(5));
    assert!(exists(&server, "job"));
    Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    let status = wait_child(&mut child, Duration::from_secs(5));
    assert_eq!(status.code(), Some(7), "the command's own exit status");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().trim(),
        "forwarded"
    );
    assert!(!exists(&server, "job"), "released after the command exited");
}

#[test]
fn stdin_reaches_the_command() {
    let server = RedisServer::spawn();
    let mut child = redmutex(&server)
        .args(["exec", "k", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello through the lock\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "hello through the lock\n");
}

/// In a terminal, the command becomes the foreground process group and can read it.
#[test]
fn interactive_command_reads_the_terminal() {
    let server = RedisServer::spawn();
    let inner = format!(
        "{} --redis {} exec k -- sh -c 'read line; echo got:$line'",
        env!("CARGO_BIN_EXE_redmutex"),
        server.url()
    );
    // util-linux `script` runs the command on a pseudo-terminal fed from our stdin.
    let mut child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("util-linux `script` is needed for the terminal test");
    let mut input = child.stdin.take().unwrap();
    thread::sleep(ms(500));
    input.write_all(b"typed-by-a-person\n").unwrap();
    let started = Instant::now();
    let status = wait_child(&mut child, Duration::from_secs(10));
    drop(input);
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(status.success(), "{out}");
    assert!(out.contains("got:typed-by-a-person"), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Under `nohup` (SIGHUP ignored), a hangup must not be forwarded to the command.
#[test]
fn ignored_signals_stay_ignored() {
    let server = RedisServer::spawn();
    let dir = scratch("nohup");
    let ready = dir.join("ready");
    let inner = format!(
        "trap '' HUP; exec {} --redis {} exec job -- sh -c 'echo up > {}; sleep 1; exit 5'",
        env!("CARGO_BIN_EXE_redmutex"),
        server.url(),
        ready.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &inner])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(5));
    Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    let status = wait_child(&mut child, Duration::from_secs(5));
    assert_eq!(status.code(), Some(5), "the command ran to its end");
}

#[test]
fn a_command_that_cannot_run_exits_127_and_releases() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["exec", "k", "--", "/no/such/program"]));
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert!(!exists(&server, "k"));
    // Found but not executable: 126, as shells say.
    let dir = scratch("not-executable");
    let file = dir.join("job.sh");
    std::fs::write(&file, "#!/bin/sh\necho ran\n").unwrap();
    let out = run(redmutex(&server).arg("exec").arg("k").arg(&file));
    assert_eq!(code(&out), 126, "{}", stderr(&out));
    assert!(!exists(&server, "k"));
}

#[test]
fn exec_on_redlock_stops_the_command_when_the_quorum_is_lost() {
    let servers = RedisServer::spawn_many(3);
    let dir = scratch("redlock-lost");
    let started_file = dir.join("started");
    let mut child = redlock(&servers)
        .args([
            "exec", "--ttl", "1s", "--grace", "1s", "job", "--", "sh", "-c",
        ])
        .arg(format!("echo up > {}; sleep 30", started_file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started_file, ms(5000));
    servers[1].kill();
    thread::sleep(ms(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "one node down is not a loss"
    );
    servers[2].kill();
    let status = wait_child(&mut child, ms(5000));
    assert_eq!(status.code(), Some(70));
    let out = child.wait_with_output().unwrap();
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
}

/// `--no-fences` (or `REDMUTEX_NO_FENCES=1`): exec sets no `REDMUTEX_FENCE` and no counter
/// is written; a value that is neither yes nor no is a usage error.
#[test]
fn no_fences_flag_and_environment() {
    let server = RedisServer::spawn();
    let print = [
        "exec",
        "plain",
        "--",
        "sh",
        "-c",
        "echo \"[${REDMUTEX_FENCE-unset}]\"",
    ];
    let out = run(redmutex(&server)
        .args(["exec", "--no-fences"])
        .args(&print[1..]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "[unset]\n");
    let out = run(redmutex(&server).env("REDMUTEX_NO_FENCES", "1").args(print));
    assert_eq!(stdout(&out), "[unset]\n", "{}", stderr(&out));
    assert_eq!(server.command(&["DBSIZE"]), ":0\r\n", "no counter written");
    let out = run(redmutex(&server).env("REDMUTEX_NO_FENCES", "0").args(print));
    assert!(stdout(&out)
        .trim()
        .trim_matches(['[', ']'])
        .parse::<u64>()
        .is_ok());
    let out = run(redmutex(&server)
        .env("REDMUTEX_NO_FENCES", "maybe")
        .args(print));
    assert_eq!(code(&out), 64);
    assert!(
        stderr(&out).contains("REDMUTEX_NO_FENCES"),
        "{}",
        stderr(&out)
    );
}

/// `REDMUTEX_KEYS` tells `a,b` + `c` from `a` + `b` + `c`: `%` and `,` inside a key are
/// percent-encoded.
#[test]
fn exec_keys_in_the_environment_are_unambiguous() {
    let server = RedisServer::spawn();
    let keys_of = |keys: &[&str]| {
        let out = run(redmutex(&server).arg("exec").args(keys).args([
            "--",
            "sh",
            "-c",
            "printf %s \"$REDMUTEX_KEYS\"",
        ]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out)
    };
    assert_eq!(keys_of(&["a,b", "c"]), "a%2Cb,c");
    assert_eq!(keys_of(&["a", "b", "c"]), "a,b,c");
    assert_eq!(keys_of(&["50%"]), "50%25");
}

/// A TTL that cannot be kept alive is a usage error before connecting (nothing listens at
/// the address), on one node and with Redlock's drift allowance (6 ms would do on one
/// node, not with the 2.06 ms drift allowance).
#[test]
fn exec_refuses_a_ttl_it_cannot_keep_alive_before_connecting() {
    let nowhere = format!("redis://127.0.0.1:{}", testkit::free_port());
    let bin = env!("CARGO_BIN_EXE_redmutex");
    let out = run(Command::new(bin)
        .args([
            "--redis", &nowhere, "exec", "--ttl", "1ms", "k", "--", "true",
        ])
        .stderr(Stdio::piped()));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot be kept alive"),
        "{}",
        stderr(&out)
    );
    let out = run(Command::new(bin)
        .args([
            "--redis", &nowhere, "--redis", &nowhere, "--redis", &nowhere,
        ])
        .args(["exec", "--ttl", "6ms", "k", "--", "true"])
        .stderr(Stdio::piped()));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

/// Waits until none of `pids` runs (zombies do not count), for at most `within`.
fn all_gone(pids: &[String], within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if !pids.iter().any(|p| process_alive(p)) {
            return true;
        }
        thread::sleep(ms(20));
    }
    false
}

/// Like `flock(1)`, the lock lasts while the command's process group does: a command that
/// leaves a job running (`sh -c 'job & exit 3'`) keeps the lock until the job ends, and
/// redmutex still exits with the command's own status.
#[test]
fn exec_holds_the_lock_until_the_commands_group_is_empty() {
    let server = RedisServer::spawn();
    let started = Instant::now();
    let mut exec = redmutex(&server)
        .args(["exec", "grouped", "--", "sh", "-c", "sleep 3 & exit 3"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !exists(&server, "grouped") {
        assert!(Instant::now() < until, "never acquired");
        thread::sleep(ms(20));
    }
    thread::sleep(ms(500));
    assert!(
        exec.try_wait().unwrap().is_none(),
        "still waiting for the job"
    );
    assert!(exists(&server, "grouped"), "held while the job runs");
    let status = wait_child(&mut exec, Duration::from_secs(10));
    assert_eq!(status.code(), Some(3), "the command's own status");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "waited for the job"
    );
    assert!(
        !exists(&server, "grouped"),
        "released once the group is empty"
    );
}

/// A process that leaves the group (`setsid`) is outside the guarantee: exec does not
/// wait for it.
#[test]
fn exec_does_not_wait_for_a_process_that_left_the_group() {
    let server = RedisServer::spawn();
    let dir = scratch("setsid");
    let pid_file = dir.join("pid");
    // Its own output elsewhere, or the test's pipes would wait for it.
    let script = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 20' >/dev/null 2>&1 & exit 0",
        pid_file.display()
    );
    let started = Instant::now();
    let out = run(redmutex(&server).args(["exec", "left", "--", "sh", "-c", &script]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid = wait_for_file(&pid_file, Duration::from_secs(5));
    assert!(process_alive(&pid), "it runs on, outside the group");
    // SAFETY: kills the sleep this test started.
    unsafe {
        libc::kill(pid.trim().parse().unwrap(), libc::SIGKILL);
    }
}

/// redmutex killed outright (SIGKILL, as the OOM killer does) while its command runs: the
/// command and the job it left in its group are stopped within a second, long before the
/// lock — no longer renewed — expires, so a second exec cannot run beside them.
#[test]
fn a_killed_supervisor_takes_its_command_group_with_it() {
    let server = RedisServer::spawn();
    let dir = scratch("supervisor");
    let (job, command) = (dir.join("job"), dir.join("command"));
    let script = format!(
        "sleep 60 & echo $! > {}; echo $$ > {}; sleep 60",
        job.display(),
        command.display()
    );
    let mut exec = redmutex(&server)
        .args([
            "exec",
            "--ttl",
            "3s",
            "supervised",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids = [
        wait_for_file(&job, Duration::from_secs(5)),
        wait_for_file(&command, Duration::from_secs(5)),
    ];
    assert!(pids.iter().all(|p| process_alive(p)));
    exec.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    exec.wait().unwrap();
    assert!(
        all_gone(&pids, Duration::from_secs(1)),
        "the group outlived its supervisor"
    );
    assert!(killed.elapsed() < Duration::from_secs(2));
    assert!(
        exists(&server, "supervised"),
        "nobody released it: it expires by its TTL"
    );
}

/// The lock is lost while only a job the command left behind runs: the group is stopped
/// and redmutex exits with 70.
#[test]
fn a_lock_lost_while_the_group_lingers_stops_the_group() {
    let server = RedisServer::spawn();
    let dir = scratch("lingering");
    let job = dir.join("job");
    let script = format!("sleep 60 & echo $! > {}; exit 0", job.display());
    let mut exec = redmutex(&server)
        .args([
            "exec",
            "--ttl",
            "900ms",
            "lingering",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = wait_for_file(&job, Duration::from_secs(5));
    thread::sleep(ms(300));
    assert_eq!(server.command(&["DEL", "lingering"]), ":1\r\n");
    let status = wait_child(&mut exec, Duration::from_secs(10));
    assert_eq!(status.code(), Some(70));
    assert!(
        all_gone(&[pid], Duration::from_secs(2)),
        "the job was stopped"
    );
}

/// `exec --min-hold`: a command that ends at once keeps the key for the rest of the period,
/// so a second run within it is refused.
#[test]
fn exec_min_hold_runs_at_most_once_per_period() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["exec", "--min-hold", "2s", "daily", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let left: i64 = server
        .command(&["PTTL", "daily"])
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    // The period, and the 1 % drift allowance on top (never shorter).
    assert!(left > 1_000 && left <= 2_021, "kept for the period: {left}");
    let out = run(redmutex(&server).args(["exec", "-n", "daily", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["exec", "--min-hold", "0s", "x", "--", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

/// Waiters in a fair lock's line, as the server counts them: their tickets (scored from
/// 0 up; their heartbeats are scored below 0).
fn in_line(server: &RedisServer, key: &str) -> u64 {
    let queue = format!("{{{key}}}:queue");
    let reply = server.command(&["ZCOUNT", &queue, "0", "+inf"]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// `exec --fair`: separate processes run in the order they came; a waiting process that
/// is SIGKILLed holds the line only until its heartbeat runs out (3 s); bad combinations
/// are usage errors.
#[test]
fn fair_execs_of_separate_processes_run_in_arrival_order() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args(["acquire", "--fair", "--ttl", "1m", "line"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    let dir = scratch("fair");
    let log = dir.join("order");
    let mut waiters = Vec::new();
    for i in 0..4 {
        let append = format!("echo {i} >> {}", log.display());
        let child = redmutex(&server)
            .args(["exec", "--fair", "line", "--", "sh", "-c", &append])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        waiters.push(child);
        let until = Instant::now() + Duration::from_secs(5);
        while in_line(&server, "line") < i + 1 {
            assert!(Instant::now() < until, "waiter {i} never got in line");
            thread::sleep(ms(10));
        }
    }
    // The second in line dies without a word.
    waiters[1].kill().unwrap();
    waiters[1].wait().unwrap();
    let released = Instant::now();
    let out = run(redmutex(&server).args(["release", "--token", &token, "line"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for i in [0, 2, 3] {
        assert!(wait_child(&mut waiters[i], Duration::from_secs(10)).success());
    }
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "0\n2\n3\n");
    // The dead waiter held the line for its heartbeat at most, not for good.
    assert!(released.elapsed() < ms(5_000), "{:?}", released.elapsed());
    assert_eq!(in_line(&server, "line"), 0);
    assert!(!exists(&server, "line"));

    let out = run(redmutex(&server).args(["exec", "--fair", "a", "b", "--", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("one key"), "{}", stderr(&out));
    let url = server.url();
    let out = run(redmutex(&server).args(["--redis", &url, "acquire", "--fair", "a"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("Redlock"), "{}", stderr(&out));
}

/// `exec --shared` (readers) run side by side, `exec --exclusive` (a writer) alone: separate
/// processes, counting who is inside with marker files. A plain `exec` of the same key and
/// `--shared` exclude each other (never a silently unprotected mix). Usage errors first.
#[test]
fn shared_execs_run_together_and_exclusive_ones_alone() {
    let server = RedisServer::spawn();
    let dir = scratch("rw");
    // Two readers at once: each waits until the other is inside too.
    let inside = |name: &str| dir.join(name).display().to_string();
    let both = format!(
        "touch {a}; i=0; while [ ! -e {b} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; [ -e {b} ]",
        a = inside("r1"),
        b = inside("r2")
    );
    let other = format!(
        "touch {b}; i=0; while [ ! -e {a} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; [ -e {a} ]",
        a = inside("r1"),
        b = inside("r2")
    );
    let mut first = redmutex(&server)
        .args(["exec", "--shared", "doc", "--", "sh", "-c", &both])
        .spawn()
        .unwrap();
    let mut second = redmutex(&server)
        .args(["exec", "-s", "doc", "--", "sh", "-c", &other])
        .spawn()
        .unwrap();
    assert!(
        wait_child(&mut first, Duration::from_secs(10)).success(),
        "readers did not share"
    );
    assert!(wait_child(&mut second, Duration::from_secs(10)).success());
    assert!(!exists(&server, "doc"));

    // A reader holds the key: a writer and a plain exec are refused at once (-n), and a
    // waiting writer runs once the reader is done.
    let release = inside("release");
    let hold = format!(
        "echo in > {started}; while [ ! -e {release} ]; do sleep 0.02; done",
        started = inside("started")
    );
    let mut reader = redmutex(&server)
        .args(["exec", "--shared", "doc", "--", "sh", "-c", &hold])
        .spawn()
        .unwrap();
    wait_for_file(&dir.join("started"), Duration::from_secs(10));
    // `inspect` says readers hold it (their key is not a lock's), and who.
    let out = run(redmutex(&server).args(["inspect", "doc"]));
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(text.starts_with("doc: held by 1 reader: "), "{text}");
    assert!(
        text.contains("cmd=sh") && text.contains("(rw_lock_read, "),
        "{text}"
    );
    assert!(!text.contains("not a redmutex lock"), "{text}");
    for flags in [&["-x", "-n"][..], &["-n"][..]] {
        let out = run(redmutex(&server)
            .arg("exec")
            .args(flags)
            .args(["doc", "--", "true"]));
        assert_eq!(code(&out), 75, "{flags:?}: {}", stderr(&out));
    }
    let mut writer = redmutex(&server)
        .args(["exec", "--exclusive", "doc", "--", "sh", "-c"])
        .arg(format!("touch {}", inside("written")))
        .spawn()
        .unwrap();
    thread::sleep(ms(300));
    assert!(
        !dir.join("written").exists(),
        "a writer ran beside a reader"
    );
    // While the writer waits, a new reader is kept out.
    let out = run(redmutex(&server).args(["exec", "-s", "-n", "doc", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut reader, Duration::from_secs(10)).success());
    assert!(wait_child(&mut writer, Duration::from_secs(10)).success());
    assert!(dir.join("written").exists());

    // A plain exec holds the key: a reader is refused.
    std::fs::remove_file(&release).unwrap();
    std::fs::remove_file(dir.join("started")).unwrap();
    let mut plain = redmutex(&server)
        .args(["exec", "doc", "--", "sh", "-c", &hold])
        .spawn()
        .unwrap();
    wait_for_file(&dir.join("started"), Duration::from_secs(10));
    let out = run(redmutex(&server).args(["exec", "--shared", "-n", "doc", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    std::fs::write(&release, "").unwrap();
    assert!(wait_child(&mut plain, Duration::from_secs(10)).success());
    assert!(!exists(&server, "doc"));

    for (args, says) in [
        (
            &["exec", "-s", "-x", "k", "--", "true"][..],
            "cannot be used with",
        ),
        (
            &["exec", "--shared", "--fair", "k", "--", "true"][..],
            "cannot be used with",
        ),
        (&["exec", "--shared", "a", "b", "--", "true"][..], "one key"),
    ] {
        let out = run(redmutex(&server).args(args));
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

/// `exec -n` on a Redlock key held elsewhere names the nodes by address, as every other
/// command does (it said `node 0: held by another owner`).
#[test]
fn exec_nonblocking_on_redlock_names_the_nodes_by_address() {
    let servers = RedisServer::spawn_many(3);
    let held = run(redlock(&servers).args(["acquire", "--ttl", "30s", "busy"]));
    assert_eq!(code(&held), 0, "{}", stderr(&held));
    let out = run(redlock(&servers).args(["exec", "-n", "busy", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        servers.iter().all(|s| err.contains(&s.url())) && !err.contains("node 0:"),
        "{err}"
    );
}

/// A waiting `exec` whose quorum stops answering does not wait on in silence: it says so
/// and exits 69 once --wait-redis has passed without a quorum.
#[test]
fn a_waiting_exec_whose_quorum_goes_away_exits_69() {
    let servers = RedisServer::spawn_many(3);
    let mut holder = unreachable_redlock(&servers);
    let holder = run(holder.args(["acquire", "--ttl", "60s", "job"]));
    assert_eq!(code(&holder), 0, "{}", stderr(&holder));
    let mut waiting = unreachable_redlock(&servers)
        .args(["exec", "job", "--", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(500));
    servers[0].kill();
    servers[1].kill();
    let status = wait_child(&mut waiting, Duration::from_secs(8));
    assert_eq!(status.code(), Some(69));
    let mut said = String::new();
    std::io::Read::read_to_string(&mut waiting.stderr.take().unwrap(), &mut said).unwrap();
    assert!(said.contains("does not answer"), "{said}");
}

/// A signal ignored when `exec` starts (`nohup`, a non-interactive shell's background
/// job) stays ignored — for redmutex, which then does not forward it, and for the command,
/// which inherits it — as flock and nohup chains do; the signals it does not ignore are
/// forwarded as ever.
#[test]
fn a_signal_ignored_on_entry_stays_ignored_for_the_command() {
    let server = RedisServer::spawn();
    let dir = scratch("ignored-on-entry");
    let (status_file, ready) = (dir.join("status"), dir.join("ready"));
    let script = format!(
        "grep SigIgn /proc/self/status > {s}; trap 'exit 7' TERM; echo up > {r}; while :; do sleep 0.05; done",
        s = status_file.display(),
        r = ready.display()
    );
    let mut cmd = redmutex(&server);
    // SIGINT ignored on entry (after the default dispositions the helper sets).
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: only `signal`, async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    let mut child = cmd
        .args(["exec", "job", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(5));
    let ignored = std::fs::read_to_string(&status_file).unwrap();
    let mask =
        u64::from_str_radix(ignored.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_ne!(
        mask & (1 << (libc::SIGINT - 1)),
        0,
        "the command inherits SIGINT ignored"
    );
    assert_eq!(mask & (1 << (libc::SIGTERM - 1)), 0, "and SIGTERM not");
    let pid = child.id().to_string();
    let kill = |sig: &str| Command::new("kill").args([sig, &pid]).status().unwrap();
    kill("-INT");
    thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGINT is ignored by redmutex too"
    );
    kill("-TERM");
    let status = wait_child(&mut child, Duration::from_secs(5));
    assert_eq!(
        status.code(),
        Some(7),
        "SIGTERM was forwarded to the command"
    );
}

/// flock's habits: `exec KEY COMMAND ARGS…` without `--` runs the command (its options its
/// own), `--` still takes several keys, and what does not split is a usage error naming
/// the cause, with nothing taken.
#[test]
fn exec_takes_flocks_form_without_a_double_dash() {
    let server = RedisServer::spawn();
    let print = "echo \"$REDMUTEX_KEYS:$*\"";
    let out = run(redmutex(&server).args(["exec", "report", "sh", "-c", print, "x", "-l"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "report:-l\n");
    let out = run(redmutex(&server).args(["exec", "a", "b", "--", "sh", "-c", print, "x", "--"]));
    assert_eq!(stdout(&out), "a,b:--\n", "{}", stderr(&out));
    let refused = [
        (&["exec", "report"][..], "<KEY> <COMMAND>..."),
        (
            &["exec", "report", "--ttl", "5s", "--", "true"],
            "options go before the first KEY",
        ),
        // An option after the key, without `--`: meant as one (flock would run it).
        (
            &["exec", "report", "--ttl", "5s", "true"],
            "\"--ttl\" after the KEY: options go before the KEY",
        ),
        (&["exec", "a", "b", "--"], "no COMMAND to run"),
        (&["exec", "--", "true"], "<KEY> <COMMAND>..."),
        // elect as exec: options before the key, and one key.
        (
            &["elect", "e", "--ttl", "5s", "true"],
            "\"--ttl\" after the KEY: options go before the KEY",
        ),
        (&["elect", "a", "b", "--", "true"], "one KEY, not 2"),
    ];
    let keys_before = server.command(&["DBSIZE"]);
    for (args, says) in refused {
        let out = run(redmutex(&server).args(args));
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        let usage = match args[0] {
            "exec" => "redmutex exec [OPTIONS] KEY COMMAND [ARGS]...",
            _ => "redmutex elect [OPTIONS] KEY [--] COMMAND [ARGS]...",
        };
        assert!(stderr(&out).contains(usage), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(server.command(&["DBSIZE"]), keys_before, "nothing taken");
    // A command that starts with `-` goes after `--` (here none such exists: 127).
    let out = run(redmutex(&server).args(["exec", "report", "--", "-x"]));
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["elect", "e", "--", "sh", "-c", "echo led"]));
    assert_eq!(
        (code(&out), stdout(&out)),
        (0, "led\n".into()),
        "{}",
        stderr(&out)
    );
    let out = run(redmutex(&server).args(["elect", "e", "sh", "-c", "echo led $0", "-x"]));
    assert_eq!(
        (code(&out), stdout(&out)),
        (0, "led -x\n".into()),
        "{}",
        stderr(&out)
    );
}

/// `exec --limit N`: separate processes run at most N commands at once under the key (and
/// N do run together), each told `REDMUTEX_LIMIT` and `REDMUTEX_PERMITS`; `--permits K`
/// takes K of them; `-n` finds them busy (75); bad combinations are usage errors before
/// any request, and Redlock refuses a semaphore (64, saying why).
#[test]
fn limited_execs_of_separate_processes_run_at_most_n_at_once() {
    let server = RedisServer::spawn();
    let port = server.port().to_string();
    // Each command counts itself in, notes how many run, and counts itself out (a second
    // apart: two run together however slowly the processes start).
    let script =
        "n=$(redis-cli -p \"$PORT\" incr running); echo \"$n $REDMUTEX_LIMIT $REDMUTEX_PERMITS\"; \
                  sleep 1; redis-cli -p \"$PORT\" decr running >/dev/null";
    let execs: Vec<Child> = (0..5)
        .map(|_| {
            redmutex(&server)
                .args([
                    "exec", "--limit", "2", "-w", "20s", "pool", "sh", "-c", script,
                ])
                .env("PORT", &port)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut seen = Vec::new();
    for exec in execs {
        let out = exec.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let line = stdout(&out);
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[1..], ["2", "1"], "{line}");
        seen.push(fields[0].parse::<u32>().unwrap());
    }
    assert!(
        seen.iter().all(|n| *n <= 2),
        "more than 2 at once: {seen:?}"
    );
    assert!(seen.contains(&2), "never 2 at once: {seen:?}");
    assert!(!exists(&server, "pool"), "every permit given back");

    // Two of three taken: one is free for -n, two are not.
    let mut heavy = redmutex(&server)
        .args([
            "exec",
            "--limit",
            "3",
            "--permits",
            "2",
            "pool",
            "sleep",
            "2",
        ])
        .spawn()
        .unwrap();
    until_exists(&server, "pool", ms(5_000));
    let out = run(redmutex(&server).args([
        "exec",
        "-n",
        "--limit",
        "3",
        "--permits",
        "2",
        "pool",
        "true",
    ]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["exec", "-n", "--limit", "3", "pool", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    heavy.kill().unwrap();
    heavy.wait().unwrap();

    let refused = [
        (
            &["exec", "--limit", "2", "--permits", "3", "pool", "true"][..],
            "more than the --limit",
        ),
        (&["exec", "--limit", "2", "a", "b", "--", "true"], "one key"),
        (&["exec", "--limit", "0", "pool", "true"], "--limit"),
        (&["exec", "--permits", "2", "pool", "true"], "--limit"),
        (
            &["exec", "--limit", "2", "--fair", "pool", "true"],
            "--fair",
        ),
        (
            &["exec", "--limit", "2", "--shared", "pool", "true"],
            "--shared",
        ),
    ];
    for (args, says) in refused {
        let out = run(redmutex(&server).args(args));
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    let servers = RedisServer::spawn_many(3);
    let out = run(redlock(&servers).args(["exec", "--limit", "2", "pool", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("Redlock"), "{}", stderr(&out));
}

/// A limited exec's supervisor SIGKILLed: its command goes with it, and its permit comes
/// back within the TTL, for an exec of another process waiting for it.
#[test]
fn a_killed_limited_execs_permit_comes_back_within_its_ttl() {
    let server = RedisServer::spawn();
    let mut holder = redmutex(&server)
        .args(["exec", "--limit", "1", "--ttl", "1s", "pool", "sleep", "60"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_exists(&server, "pool", ms(5_000));
    let out = run(redmutex(&server).args(["exec", "-n", "--limit", "1", "pool", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = run(redmutex(&server).args(["exec", "-w", "5s", "--limit", "1", "pool", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// One server restarting: an exec started while it is down waits for it (--wait-redis),
/// saying so, and runs its command once it is back.
#[test]
fn an_exec_waits_for_a_restarting_server() {
    let server = RedisServer::spawn();
    server.kill();
    let exec = redmutex(&server)
        .args(["--wait-redis", "20s", "exec", "k", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(ms(700));
    server.restart();
    let out = exec.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("waiting up to 20s for Redis"),
        "{}",
        stderr(&out)
    );
}

/// `script` runs `inner` on a pseudo-terminal, as a person at a terminal would.
fn on_a_terminal(inner: &str) -> String {
    let mut child = Command::new("script")
        .args(["-qec", inner, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("util-linux `script` is needed for the terminal test");
    wait_child(&mut child, Duration::from_secs(20));
    let mut out = String::new();
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    out
}

#[test]
fn a_waiting_exec_on_a_terminal_shows_what_it_waits_for_then_clears_it() {
    let server = RedisServer::spawn();
    let bin = env!("CARGO_BIN_EXE_redmutex");
    let url = server.url();
    let hold = |key: &str| {
        redmutex(&server)
            .args([
                "exec",
                "--metadata",
                "host=h pid=9",
                key,
                "--",
                "sleep",
                "1.2",
            ])
            .spawn()
            .unwrap()
    };
    let mut holder = hold("busy");
    thread::sleep(ms(300));
    let seen = on_a_terminal(&format!("{bin} --redis {url} exec busy -- echo got-it"));
    wait_child(&mut holder, Duration::from_secs(5));
    // Redrawn in place (carriage return, erase to the end), then cleared before the
    // command's own output.
    assert!(seen.contains("\rwaiting for busy ("), "{seen:?}");
    assert!(seen.contains("): held by host=h pid=9, "), "{seen:?}");
    assert!(seen.contains(" left\x1b[K"), "{seen:?}");
    let cleared = seen.rfind("\r\x1b[K").expect("the line is cleared");
    assert!(seen[cleared..].contains("got-it"), "{seen:?}");
    assert!(!seen[cleared..].contains("waiting for"), "{seen:?}");

    // A fair waiter is told its place.
    let mut holder = hold("line");
    thread::sleep(ms(300));
    let mut first = redmutex(&server)
        .args(["exec", "--fair", "line", "--", "true"])
        .spawn()
        .unwrap();
    thread::sleep(ms(200));
    let seen = on_a_terminal(&format!(
        "{bin} --redis {url} exec --fair line -- echo got-it"
    ));
    wait_child(&mut holder, Duration::from_secs(5));
    wait_child(&mut first, Duration::from_secs(5));
    assert!(seen.contains(", 2nd in line: held by"), "{seen:?}");
    assert!(seen.contains("got-it"), "{seen:?}");

    // A limited exec is told who holds the permits and how many are free.
    let mut holder = redmutex(&server)
        .args([
            "exec",
            "--limit",
            "3",
            "--permits",
            "3",
            "--metadata",
            "host=h pid=9",
        ])
        .args(["pool", "sleep", "1.2"])
        .spawn()
        .unwrap();
    thread::sleep(ms(300));
    let seen = on_a_terminal(&format!(
        "{bin} --redis {url} exec --limit 3 pool echo got-it"
    ));
    wait_child(&mut holder, Duration::from_secs(5));
    assert!(
        seen.contains("): held by host=h pid=9 [3 permits], 0 of 3 permits free"),
        "{seen:?}"
    );
    assert!(seen.contains("got-it"), "{seen:?}");

    // --quiet, or no terminal: no line.
    let mut holder = hold("busy");
    thread::sleep(ms(300));
    let seen = on_a_terminal(&format!("{bin} --redis {url} exec -q busy -- echo got-it"));
    assert!(
        !seen.contains("waiting for") && seen.contains("got-it"),
        "{seen:?}"
    );
    wait_child(&mut holder, Duration::from_secs(5));
    let mut holder = hold("busy");
    thread::sleep(ms(300));
    let out = run(redmutex(&server).args(["exec", "busy", "--", "true"]));
    wait_child(&mut holder, Duration::from_secs(5));
    assert_eq!(code(&out), 0);
    assert_eq!(stderr(&out), "", "no line without a terminal");
}

/// An `exec` holding for a minute (renewed every 20 s) hears `release --ask` at once: its
/// locker listens where requests are announced.
#[test]
fn exec_hears_a_request_at_once_not_at_its_next_renewal() {
    let server = RedisServer::spawn();
    let mut holder = redmutex(&server)
        .args(["exec", "--ttl", "60s", "job", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_exists(&server, "job", Duration::from_secs(5));
    let until = Instant::now() + Duration::from_secs(5);
    while !server
        .command(&["PUBSUB", "NUMSUB", "job:~a"])
        .ends_with(":1\r\n")
    {
        assert!(Instant::now() < until, "exec never listened for requests");
        thread::sleep(ms(10));
    }
    let asked = Instant::now();
    let out = run(redmutex(&server).args(["release", "--ask", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = wait_child(&mut holder, Duration::from_secs(10));
    assert!(asked.elapsed() < Duration::from_secs(10));
    let err = piped_stderr(&mut holder);
    assert!(
        err.contains("asked to let job go: sent SIGTERM to the command"),
        "{err}"
    );
    // sleep's own status on SIGTERM, passed on.
    assert_ne!(status.code(), Some(0), "{err}");
    assert!(!exists(&server, "job"), "released when the command ended");
}

/// A release that fails when the command ends (the server frozen) is not silent: `exec`
/// says the lock stays taken until its ttl ends, and exits with the command's status.
#[test]
fn exec_says_when_the_release_at_the_end_fails() {
    let server = RedisServer::spawn();
    let mut holder = redmutex(&server)
        .args(["exec", "--ttl", "30s", "job", "--", "sleep", "1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_exists(&server, "job", Duration::from_secs(5));
    server.pause();
    let status = wait_child(&mut holder, Duration::from_secs(20));
    server.resume();
    let err = piped_stderr(&mut holder);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: the lock could not be released (")
            && err.contains("nobody else gets it until its ttl ends, within "),
        "{err}"
    );
}
