//! The real `redmutex` binary against test-kit servers.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::{RedisServer, ServerOptions};

mod common;

use common::*;

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
    let heartbeat = redmutex::DEFAULT_HEARTBEAT;
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

#[test]
fn usage_errors_exit_64_with_a_message() {
    let server = RedisServer::spawn();
    for args in [
        vec!["exec", "--ttl", "0s", "k", "--", "true"],
        vec!["exec", "--ttl", "5", "k", "--", "true"],
        vec!["exec", "--wait", "soon", "k", "--", "true"],
        vec!["exec", "k"],
        vec!["exec", "--", "true"],
        vec!["exec", "-n", "--wait", "1s", "k", "--", "true"],
        vec!["acquire", "--ttl", "0ms", "k"],
        vec!["acquire", "a", "a"],
        vec!["release", "--token", "not-a-token", "k"],
        vec!["frobnicate"],
    ] {
        let out = run(redmutex(&server).args(&args));
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.trim().is_empty(), "{args:?}: no message");
    }
    let out = run(redmutex(&server).args(["exec", "--ttl", "0s", "k", "--", "true"]));
    assert!(stderr(&out).contains("ttl"), "{}", stderr(&out));
    assert!(!exists(&server, "k"));
    assert_eq!(code(&run(redmutex(&server).arg("--help"))), 0);
}

/// Sizes past the documented limits, duplicate keys and keys named like fence counters
/// are usage errors before any connection: the server here does not exist, and the answer
/// is still 64, not 69.
#[test]
fn oversized_input_is_refused_before_connecting() {
    let nowhere = format!("redis://127.0.0.1:{}", testkit::free_port());
    let long_key = "k".repeat(redmutex::MAX_KEY_LEN + 1);
    let long_metadata = "m".repeat(redmutex::MAX_METADATA_LEN + 1);
    let token = "A".repeat(redmutex::TOKEN_LEN);
    for (args, says) in [
        (vec!["acquire", &long_key], "key"),
        (vec!["exec", "ok", &long_key, "--", "true"], "key"),
        (vec!["inspect", &long_key], "key"),
        (vec!["release", "--token", &token, &long_key], "key"),
        (vec!["acquire", ""], "empty"),
        (
            vec!["acquire", "--metadata", &long_metadata, "k"],
            "metadata",
        ),
        (vec!["exec", "{job}:fence", "--", "true"], "reserved"),
        (vec!["acquire", "a", "a"], "duplicate"),
    ] {
        let out = run(Command::new(env!("CARGO_BIN_EXE_redmutex"))
            .args(["--redis", &nowhere])
            .args(&args));
        let shown: Vec<&str> = args.iter().map(|a| &a[..a.len().min(12)]).collect();
        assert_eq!(code(&out), 64, "{shown:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{shown:?}: {}", stderr(&out));
        assert!(stderr(&out).len() < 400, "the input is not echoed back");
    }
}

/// A command given a whole time to wait (`exec --wait`, `acquire --wait`, `wait
/// --timeout`) waits for an unreachable Redis — one server, or a quorum of several — no
/// longer than that, even when --wait-redis is longer: 69 once it has passed.
#[test]
fn a_wait_shorter_than_wait_redis_bounds_the_wait_for_redis() {
    let nowhere = |port: u16| format!("redis://127.0.0.1:{port}");
    let (one, two, three) = (
        testkit::free_port(),
        testkit::free_port(),
        testkit::free_port(),
    );
    let single = ["--redis".to_string(), nowhere(one)];
    let several = [
        "--redis".to_string(),
        nowhere(one),
        "--redis".to_string(),
        nowhere(two),
        "--redis".to_string(),
        nowhere(three),
    ];
    for (urls, says) in [
        (&single[..], "for Redis at"),
        (&several[..], "for a quorum"),
    ] {
        for command in [
            &["exec", "--wait", "1s", "k", "--", "true"][..],
            &["acquire", "--wait", "1s", "k"],
            &["wait", "--timeout", "1s", "k"],
        ] {
            let started = Instant::now();
            let out = run(Command::new(env!("CARGO_BIN_EXE_redmutex"))
                .args(urls)
                .args(["--wait-redis", "120s"])
                .args(command));
            let took = started.elapsed();
            assert_eq!(code(&out), 69, "{command:?}: {}", stderr(&out));
            assert!(
                stderr(&out).contains(&format!("waiting up to 1s {says}")),
                "{command:?}: {}",
                stderr(&out)
            );
            assert!(took >= Duration::from_secs(1), "{command:?}: {took:?}");
            assert!(took < Duration::from_secs(60), "{command:?}: {took:?}");
        }
    }
}

/// A server that refuses connections is waited for --wait-redis (saying so), then 69; a
/// wrong password is 69 at once (no wait can mend it), never echoing the password.
#[test]
fn unreachable_after_wait_redis_and_unauthorised_at_once_exit_69_without_echoing_passwords() {
    let port = testkit::free_port();
    let started = Instant::now();
    let out = run(Command::new(env!("CARGO_BIN_EXE_redmutex")).args([
        "--redis",
        &format!("redis://127.0.0.1:{port}"),
        "--wait-redis",
        "1s",
        "exec",
        "k",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "--wait-redis is waited"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        stderr(&out).contains(&format!(
            "waiting up to 1s for Redis at redis://127.0.0.1:{port}"
        )),
        "{}",
        stderr(&out)
    );

    let server = RedisServer::spawn_with(ServerOptions {
        password: Some("right-horse".into()),
        ..ServerOptions::default()
    });
    let url = format!("redis://:battery-staple@127.0.0.1:{}", server.port());
    let started = Instant::now();
    let out =
        run(Command::new(env!("CARGO_BIN_EXE_redmutex")).args(["--redis", &url, "inspect", "k"]));
    assert_eq!(code(&out), 69);
    assert!(started.elapsed() < Duration::from_secs(5), "not waited for");
    assert!(!stderr(&out).contains("waiting"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("battery-staple"), "{}", stderr(&out));
    assert!(stderr(&out).contains("***"), "{}", stderr(&out));

    let out = run(redmutex(&server).args(["inspect", "k"]));
    assert_eq!(code(&out), 0, "the right password works: {}", stderr(&out));
}

#[test]
fn acquire_refresh_release_inspect() {
    let server = RedisServer::spawn();
    let out = run(redmutex(&server).args([
        "acquire",
        "--ttl",
        "10s",
        "--metadata",
        "job=backup \"nightly\"",
        "db",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    assert_eq!(token.len(), 22);
    assert!(exists(&server, "db"), "acquire leaves the lock in place");

    let out = run(redmutex(&server).args(["inspect", "db", "--json"]));
    let json = stdout(&out);
    assert!(
        json.starts_with("{\"key\":\"db\",\"held\":true,\"ttl_ms\":"),
        "{json}"
    );
    assert!(
        json.trim_end().ends_with(
            ",\"metadata\":\"job=backup \\\"nightly\\\"\",\"kind\":\"lock\",\
             \"holder_count\":1,\"waiters\":null,\"permits\":null,\"forced\":0}"
        ),
        "{json}"
    );
    let out = run(redmutex(&server).args(["inspect", "db"]));
    assert!(
        stdout(&out).starts_with("db: held, ttl "),
        "{}",
        stdout(&out)
    );

    let out = run(redmutex(&server).args(["acquire", "-n", "db"]));
    assert_eq!(code(&out), 75);

    assert_eq!(
        code(&run(
            redmutex(&server).args(["refresh", "--token", &token, "--ttl", "2m", "db"])
        )),
        0
    );
    let pttl: i64 = server.command(&["PTTL", "db"])[1..].trim().parse().unwrap();
    assert!(pttl > 110_000, "{pttl}");

    // A token may start with `-` (base64url): it is a value, not an option.
    for command in ["release", "refresh"] {
        let out = run(redmutex(&server)
            .args([command, "--token", "-AAAAAAAAAAAAAAAAAAAAA"])
            .args(if command == "refresh" {
                &["--ttl", "1s", "db"][..]
            } else {
                &["db"][..]
            }));
        assert_eq!(code(&out), 1, "{command}: {}", stderr(&out));
        assert!(stderr(&out).contains("not held"), "{}", stderr(&out));
    }
    let other = "AAAAAAAAAAAAAAAAAAAAAA";
    let out = run(redmutex(&server).args(["release", "--token", other, "db"]));
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("not held"));
    assert!(exists(&server, "db"));

    assert_eq!(
        code(&run(
            redmutex(&server).args(["release", "--token", &token, "db"])
        )),
        0
    );
    assert!(!exists(&server, "db"));
    let out = run(redmutex(&server).args(["release", "--token", &token, "db"]));
    assert_eq!(code(&out), 1);
    let out = run(redmutex(&server).args(["refresh", "--token", &token, "--ttl", "1s", "db"]));
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("not held"));

    let out = run(redmutex(&server).args(["inspect", "db", "--json"]));
    assert_eq!(
        stdout(&out),
        "{\"key\":\"db\",\"held\":false,\"ttl_ms\":null,\"awaited\":false,\"fence\":null,\
         \"metadata\":null,\"kind\":null,\"holder_count\":0,\"waiters\":null,\"permits\":null,\"forced\":0}\n",
        "acquire takes no fence"
    );

    // exec stores who holds the lock.
    let out = run(redmutex(&server).args([
        "exec",
        "job",
        "--",
        "sh",
        "-c",
        "\"$0\" --redis \"$1\" inspect job",
        env!("CARGO_BIN_EXE_redmutex"),
        &server.url(),
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("metadata: host="), "{}", stdout(&out));
    assert!(stdout(&out).contains("cmd=sh"), "{}", stdout(&out));
}

#[test]
fn redis_url_sources_and_prefix() {
    let server = RedisServer::spawn();
    let bin = env!("CARGO_BIN_EXE_redmutex");
    let probe = format!("redis-cli -p {} exists app:k", server.port());
    // REDMUTEX_REDIS from the environment, with --prefix.
    let out = run(Command::new(bin)
        .env("REDMUTEX_REDIS", server.url())
        .env_remove("REDIS_URL")
        .args(["--prefix", "app:", "exec", "k", "--", "sh", "-c", &probe]));
    assert_eq!(stdout(&out), "1\n", "{}", stderr(&out));
    // REDIS_URL as the fallback.
    let out = run(Command::new(bin)
        .env_remove("REDMUTEX_REDIS")
        .env("REDIS_URL", server.url())
        .args(["inspect", "k"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // --redis wins over the environment.
    let dead = format!("redis://127.0.0.1:{}", testkit::free_port());
    let out = run(Command::new(bin).env("REDMUTEX_REDIS", &dead).args([
        "--redis",
        &server.url(),
        "inspect",
        "k",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Several URLs in the environment: Redlock nodes, each shown by inspect (a quorum of
    // two of three answer: the same server named twice, and one that is down).
    let out = run(Command::new(bin)
        .env("REDMUTEX_REDIS", format!("{0},{0},{dead}", server.url()))
        .args(["inspect", "k"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("  {}: free", server.url())),
        "{text}"
    );
    assert!(text.contains(&format!("  {dead}: error")), "{text}");
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

/// `--redis` repeated for each node of a five-node Redlock.
fn redlock(servers: &[RedisServer]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    for server in servers {
        cmd.arg("--redis").arg(server.url());
    }
    cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
    cmd
}

#[test]
fn several_urls_make_every_command_use_redlock() {
    let servers = RedisServer::spawn_many(5);
    servers[4].kill();

    // exec with a node down: the command runs, and the lock is on the live nodes meanwhile.
    let probe = format!(
        "redis-cli -p {} EXISTS job; redis-cli -p {} EXISTS job",
        servers[0].port(),
        servers[3].port()
    );
    let out = run(redlock(&servers).args(["exec", "job", "--", "sh", "-c", &probe]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "1\n1\n");
    assert!(
        servers[..4].iter().all(|s| !exists(s, "job")),
        "released on every node"
    );

    // acquire / inspect / refresh / release by token.
    let out = run(redlock(&servers).args(["acquire", "--ttl", "30s", "--metadata", "me", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    assert!(servers[..4].iter().all(|s| exists(s, "job")));
    let out = run(redlock(&servers).args(["inspect", "job"]));
    let text = stdout(&out);
    assert!(text.starts_with("job: held, ttl "), "{text}");
    assert!(text.contains("metadata: me"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains(": held, ttl")).count(),
        5,
        "{text}"
    );
    assert!(
        text.contains(&format!("  {}: error", servers[4].url())),
        "{text}"
    );
    let out = run(redlock(&servers).args(["inspect", "--json", "job"]));
    let json = stdout(&out);
    assert!(
        json.starts_with("{\"key\":\"job\",\"held\":true,"),
        "{json}"
    );
    assert_eq!(json.matches("\"url\":").count(), 5, "{json}");
    assert_eq!(json.matches("\"error\":").count(), 1, "{json}");
    let out = run(redlock(&servers).args(["refresh", "--token", &token, "--ttl", "60s", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redlock(&servers).args(["release", "--token", &token, "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(servers[..4].iter().all(|s| !exists(s, "job")));
    let out = run(redlock(&servers).args(["release", "--token", &token, "job"]));
    assert_eq!(code(&out), 1, "released twice: {}", stderr(&out));

    // Held by someone else on a quorum: not obtained (75).
    for server in &servers[..3] {
        server.command(&["SET", "busy", "other", "PX", "60000"]);
    }
    let out = run(redlock(&servers).args(["acquire", "-n", "busy"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));

    // No quorum reachable: unavailable (69) once --wait-redis has passed, naming each
    // failing node by address.
    servers[3].kill();
    servers[2].kill();
    let started = Instant::now();
    let out =
        run(redlock(&servers).args(["--wait-redis", "300ms", "acquire", "--wait", "300ms", "job"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(started.elapsed() < ms(3000));
    let err = stderr(&out);
    assert!(err.contains("2 of 5 nodes answer, 3 needed"), "{err}");
    assert!(err.contains(&servers[2].url()), "{err}");
    assert!(
        servers[..2].iter().all(|s| !exists(s, "job")),
        "failed tries undone"
    );
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

/// `rediss://` with `--tls-ca` (or `REDMUTEX_TLS_CA`) works; without the CA the
/// certificate is refused, clearly, with exit 69; `--tls-ca` with a plain URL is a usage
/// error.
#[test]
fn tls_with_the_ca_flag() {
    let server = RedisServer::spawn_with(ServerOptions {
        tls: true,
        ..ServerOptions::default()
    });
    let bin = env!("CARGO_BIN_EXE_redmutex");
    let ca = server.tls_ca();
    let out = run(Command::new(bin)
        .args(["--redis", &server.tls_url(), "--tls-ca"])
        .arg(&ca)
        .args(["exec", "tls-key", "--", "sh", "-c", "echo $REDMUTEX_FENCE"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fence: u64 = stdout(&out).trim().parse().unwrap();
    let out = run(Command::new(bin).env("REDMUTEX_TLS_CA", &ca).args([
        "--redis",
        &server.tls_url(),
        "inspect",
        "tls-key",
    ]));
    assert_eq!(
        stdout(&out),
        format!("tls-key: free, last fence {fence}\n"),
        "{}",
        stderr(&out)
    );

    let out = run(Command::new(bin).env_remove("REDMUTEX_TLS_CA").args([
        "--redis",
        &server.tls_url(),
        "inspect",
        "tls-key",
    ]));
    assert_eq!(code(&out), 69);
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));

    let out = run(Command::new(bin)
        .args(["--redis", &server.url(), "--tls-ca"])
        .arg(&ca)
        .args(["inspect", "k"]));
    assert_eq!(code(&out), 64);
    assert!(stderr(&out).contains("rediss://"), "{}", stderr(&out));
}

/// `--user`/`--password` (or `REDMUTEX_USER`/`REDMUTEX_PASSWORD`) log in as an ACL user;
/// a wrong password is exit 69 and is never echoed.
#[test]
fn acl_user_and_password_flags() {
    let server = RedisServer::spawn_with(ServerOptions {
        extra_args: testkit::acl_user(&format!(
            "locker on >right-pw {}",
            redmutex::acl_rule("app:")
        )),
        ..ServerOptions::default()
    });
    let bin = env!("CARGO_BIN_EXE_redmutex");
    let url = server.url();
    let out = run(Command::new(bin).env_remove("REDMUTEX_PASSWORD").args([
        "--redis",
        &url,
        "--user",
        "locker",
        "--password",
        "right-pw",
        "--prefix",
        "app:",
        "exec",
        "job",
        "--",
        "sh",
        "-c",
        "echo $REDMUTEX_FENCE",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fence: u64 = stdout(&out).trim().parse().unwrap();
    let out = run(Command::new(bin)
        .env("REDMUTEX_USER", "locker")
        .env("REDMUTEX_PASSWORD", "right-pw")
        .args(["--redis", &url, "--prefix", "app:", "inspect", "job"]));
    assert_eq!(
        stdout(&out),
        format!("app:job: free, last fence {fence}\n"),
        "{}",
        stderr(&out)
    );

    let out = run(Command::new(bin).args([
        "--redis",
        &url,
        "--user",
        "locker",
        "--password",
        "wrong-pw-7f3a",
        "inspect",
        "job",
    ]));
    assert_eq!(code(&out), 69);
    assert!(!stderr(&out).contains("wrong-pw-7f3a"), "{}", stderr(&out));
    // Allowed to log in, but not on keys outside its pattern: a clear "no permission".
    let out = run(Command::new(bin)
        .env("REDMUTEX_USER", "locker")
        .env("REDMUTEX_PASSWORD", "right-pw")
        .args(["--redis", &url, "exec", "elsewhere", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("no permission"), "{}", stderr(&out));
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

/// `acquire` whose token cannot be handed over — a pipe nobody reads, a closed stdout —
/// leaves no lock behind and says so with exit 74; a deliberate `>/dev/null` is honoured.
#[test]
fn acquire_releases_the_lock_when_the_token_cannot_be_handed_over() {
    use std::os::unix::process::CommandExt;
    let server = RedisServer::spawn();
    let out = redmutex(&server)
        .args(["acquire", "--ttl", "1m", "piped"])
        .stdin(Stdio::null())
        .stdout(unread_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(code(&out), 74, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the lock was released"),
        "{}",
        stderr(&out)
    );
    assert!(!exists(&server, "piped"), "no lock left behind");

    // stdout closed altogether: refused before anything is taken.
    let mut closed = redmutex(&server);
    closed.args(["acquire", "--ttl", "1m", "closed"]);
    // SAFETY: close(2) only, between fork and exec.
    unsafe {
        closed.pre_exec(|| {
            libc::close(1);
            Ok(())
        });
    }
    let out = run(closed.stderr(Stdio::piped()));
    assert_eq!(code(&out), 74, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stdout is closed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.command(&["DBSIZE"]), ":0\r\n", "nothing taken");

    // Discarding the token on purpose is the caller's choice.
    let out = run(redmutex(&server)
        .args(["acquire", "--ttl", "1m", "discarded"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped()));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(exists(&server, "discarded"));
    // Also when /dev/null is opened read-write (Python's DEVNULL, systemd's null).
    let devnull = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    let out = run(redmutex(&server)
        .args(["acquire", "--ttl", "1m", "discarded-rw"])
        .stdout(Stdio::from(devnull))
        .stderr(Stdio::piped()));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(exists(&server, "discarded-rw"));
}

/// `inspect` into a pipe nobody reads: exit 74, no panic.
#[test]
fn inspect_list_watch_and_leader_into_a_closed_pipe_are_exit_74() {
    let server = RedisServer::spawn();
    server.command(&["SET", "k", "someone's"]);
    for args in [
        vec!["inspect", "k"],
        vec!["list"],
        vec!["list", "--json"],
        vec!["watch", "k"],
        vec!["leader", "--watch", "svc"],
    ] {
        let out = redmutex(&server)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(unread_pipe())
            .output()
            .unwrap();
        assert_eq!(code(&out), 74, "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
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

fn server_with(args: &[&str]) -> RedisServer {
    RedisServer::spawn_with(ServerOptions {
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        ..ServerOptions::default()
    })
}

/// `doctor` on a fit server: exit 0, what is fine and what is only a warning; `--json`
/// says the same.
#[test]
fn doctor_on_a_fit_server() {
    let server = server_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let out = run(redmutex(&server).arg("doctor"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with(&format!("{}\n", server.url())), "{text}");
    assert!(
        text.contains("  ok       maxmemory-policy  noeviction\n"),
        "{text}"
    );
    assert!(
        text.contains("  warning  appendfsync       everysec"),
        "{text}"
    );
    assert!(
        text.contains("  ok       permissions       took, fenced"),
        "{text}"
    );
    assert!(
        text.ends_with("fit for locks; 1 warning(s), 0 could not be checked\n"),
        "{text}"
    );
    let out = run(redmutex(&server).args(["doctor", "--json"]));
    assert_eq!(code(&out), 0);
    let json = stdout(&out);
    assert!(
        json.starts_with("{\"fit\":true,\"findings\":[{\"node\":"),
        "{json}"
    );
    assert!(
        json.contains("\"check\":\"appendfsync\",\"level\":\"warning\""),
        "{json}"
    );
}

/// An evicting server fails `doctor` (exit 1), on one node and on one Redlock node of
/// three, each node named by its address; nothing reachable is 69.
#[test]
fn doctor_fails_on_an_evicting_server() {
    let evicting = server_with(&["--maxmemory-policy", "volatile-lru", "--maxmemory", "1gb"]);
    let out = run(redmutex(&evicting).arg("doctor"));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("  unsafe   maxmemory-policy  volatile-lru: "),
        "{text}"
    );
    assert!(text.contains("NOT fit for locks: 1 unsafe"), "{text}");

    let fine = [RedisServer::spawn(), RedisServer::spawn()];
    let out = run(Command::new(env!("CARGO_BIN_EXE_redmutex"))
        .args(["--redis", &fine[0].url(), "--redis", &evicting.url()])
        .args(["--redis", &fine[1].url(), "doctor", "--json"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let json = stdout(&out);
    let unsafe_line = format!(
        "{{\"node\":\"{}\",\"check\":\"maxmemory-policy\",\"level\":\"unsafe\"",
        evicting.url()
    );
    assert!(json.contains(&unsafe_line), "{json}");
    assert!(
        json.contains("\"node\":\"all nodes\",\"check\":\"permissions\""),
        "{json}"
    );

    let nowhere = format!("redis://127.0.0.1:{}", testkit::free_port());
    let out =
        run(Command::new(env!("CARGO_BIN_EXE_redmutex")).args(["--redis", &nowhere, "doctor"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
}

/// Over TLS and as the minimal ACL user: what the user may not read is "could not check"
/// (not a failure), the password never shows.
#[test]
fn doctor_over_tls_and_as_an_acl_user() {
    let rule = format!("doctor on >pw-9d2b {}", redmutex::acl_rule("app:"));
    let mut options = ServerOptions {
        extra_args: testkit::acl_user(&rule),
        ..ServerOptions::default()
    };
    let tls = match testkit::tls_support() {
        Ok(()) => true,
        Err(reason) => {
            // The rest is checked without TLS.
            testkit::lacks("tls", &reason);
            false
        }
    };
    options.tls = tls;
    let server = RedisServer::spawn_with(options);
    let mut doctor = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    match tls {
        true => doctor
            .args(["--redis", &server.tls_url(), "--tls-ca"])
            .arg(server.tls_ca()),
        false => doctor.args(["--redis", &server.url()]),
    };
    doctor
        .env("REDMUTEX_PASSWORD", "pw-9d2b")
        .args(["--user", "doctor", "--prefix", "app:", "doctor"]);
    let out = run(&mut doctor);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("  unknown  maxmemory-policy  could not check"),
        "{text}"
    );
    assert!(
        text.contains("  ok       permissions       took, fenced"),
        "{text}"
    );
    assert!(
        text.contains("  ok       wake-up           may subscribe"),
        "{text}"
    );
    assert!(!text.contains("pw-9d2b") && !stderr(&out).contains("pw-9d2b"));
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

/// `--version` prints the package's version, as published, and exits 0 without a server.
#[test]
fn version_prints_the_crate_version() {
    let out = run(Command::new(env!("CARGO_BIN_EXE_redmutex")).arg("--version"));
    assert_eq!(code(&out), 0);
    assert_eq!(
        stdout(&out),
        format!("redmutex {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// `redmutex` over several nodes, none of them listening (the servers were stopped), with a
/// short wait for them.
fn unreachable_redlock(servers: &[RedisServer]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    for server in servers {
        cmd.arg("--redis").arg(server.url());
    }
    cmd.args(["--wait-redis", "500ms"]);
    cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
    with_signals(&mut cmd, libc::SIG_DFL);
    cmd
}

/// Without a quorum, nothing hangs and nothing answers what nobody can know: each command
/// waits --wait-redis for a quorum (saying so), then exits 69 — never "free", "none",
/// "held" or 75 "still held". With one node of three up, the same. Before: `exec` and
/// `acquire` waited forever in silence, `wait` said "still held", `leader` "none" (exit 0),
/// `inspect --json` "held":false (exit 0).
#[test]
fn without_a_quorum_every_command_says_so_and_exits_69() {
    let servers = RedisServer::spawn_many(3);
    for live in [0, 1] {
        for server in &servers[live..] {
            server.kill();
        }
        let dir = scratch(&format!("no-quorum-{live}"));
        let marker = dir.join("ran");
        let touch = format!("touch {}", marker.display());
        let commands: Vec<Vec<&str>> = vec![
            vec!["exec", "job", "--", "sh", "-c", &touch],
            vec!["acquire", "job"],
            vec!["wait", "--timeout", "2s", "job"],
            vec!["leader", "job"],
            vec!["inspect", "--json", "job"],
        ];
        for args in commands {
            let started = Instant::now();
            let out = run(unreachable_redlock(&servers).args(&args));
            let took = started.elapsed();
            assert_eq!(
                code(&out),
                69,
                "{args:?} with {live} of 3 up: {}",
                stderr(&out)
            );
            assert!(
                stderr(&out).contains("quorum"),
                "{args:?}: {}",
                stderr(&out)
            );
            assert!(
                stdout(&out).is_empty(),
                "{args:?} printed {:?}",
                stdout(&out)
            );
            assert!(took < Duration::from_secs(8), "{args:?} took {took:?}");
        }
        assert!(!marker.exists(), "the command never ran");
        for server in &servers[live..] {
            server.restart();
        }
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

/// Redlock nodes across a slow link (200 ms round trips) never answer within the default
/// node timeout of a 3 s TTL (150 ms): `--node-timeout` lets them, and one server refuses
/// the flag before any request.
#[test]
fn node_timeout_lets_slow_redlock_nodes_agree() {
    let servers = RedisServer::spawn_many(3);
    let proxies: Vec<testkit::Proxy> = (servers.iter())
        .map(|s| testkit::Proxy::start(s.addr()))
        .collect();
    for proxy in &proxies {
        proxy.set_latency(Duration::from_millis(100));
    }
    let slow = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
        for proxy in &proxies {
            cmd.arg("--redis").arg(proxy.url());
        }
        cmd.args(["--wait-redis", "2s"]);
        cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
        cmd
    };
    let out = run(slow().args(["acquire", "--ttl", "3s", "--wait", "5s", "job"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no answer within 150ms"),
        "{}",
        stderr(&out)
    );
    assert!(
        servers.iter().all(|s| !exists(s, "job")),
        "failed tries undone"
    );

    let out = run(slow().args(["--node-timeout", "1s", "acquire", "--ttl", "3s", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(servers.iter().all(|s| exists(s, "job")));

    let one = run(Command::new(env!("CARGO_BIN_EXE_redmutex")).args([
        "--redis",
        &servers[0].url(),
        "--node-timeout",
        "1s",
        "acquire",
        "other",
    ]));
    assert_eq!(code(&one), 64, "{}", stderr(&one));
    assert!(stderr(&one).contains("--node-timeout is for Redlock"));
    assert!(!exists(&servers[0], "other"));
}

/// The last round of PINGs before giving up often has next to no time left: it must not
/// turn nodes that answer into "no answer". With 2 of 5 up, every run says 2 (before: 0,
/// 1 or 2, depending on where the deadline fell).
#[test]
fn the_final_no_quorum_message_counts_the_nodes_that_answer() {
    let servers = RedisServer::spawn_many(5);
    for server in &servers[2..] {
        server.kill();
    }
    for attempt in 0..5 {
        let out = run(unreachable_redlock(&servers).args(["acquire", &format!("job{attempt}")]));
        assert_eq!(code(&out), 69, "{}", stderr(&out));
        let last = stderr(&out).lines().last().unwrap_or_default().to_owned();
        assert!(
            last.contains("2 of 5 nodes answer, 3 needed") && !last.contains("no answer"),
            "run {attempt}: {last}"
        );
    }
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

/// A TTL no lock can have is a usage error before any connection: 64 whether or not Redis
/// answers (before: 69 with Redis down, 64 with it up).
#[test]
fn an_impossible_ttl_is_refused_before_connecting() {
    let server = RedisServer::spawn();
    let down = RedisServer::spawn();
    down.kill();
    for target in [&server, &down] {
        for args in [
            vec!["exec", "--ttl", "200000000d", "k", "--", "true"],
            vec!["acquire", "--ttl", "200000000d", "k"],
            vec!["exec", "--min-hold", "200000000d", "k", "--", "true"],
        ] {
            let out = run(redmutex(target).args(&args));
            assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains("longer than"), "{}", stderr(&out));
        }
    }
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

/// Help that reads well: the connection options under their own heading on every
/// subcommand, `--no-fences` only where fences are taken (exec), and acquire's TTL said
/// in acquire's terms.
#[test]
fn help_groups_the_connection_options_and_offers_only_what_applies() {
    let server = RedisServer::spawn();
    let help = |sub: &str| stdout(&run(redmutex(&server).args([sub, "--help"])));
    for sub in [
        "exec", "acquire", "release", "refresh", "inspect", "list", "watch", "wait",
    ] {
        let text = help(sub);
        let (own, connection) = text.split_once("\nRedis:\n").expect(sub);
        assert!(connection.contains("--redis <URL>") && connection.contains("--password"));
        assert!(
            !own.contains("--redis") && !own.contains("--wait-redis"),
            "{sub}: {own}"
        );
        assert_eq!(text.contains("--no-fences"), sub == "exec", "{sub}");
    }
    for sub in ["elect", "leader", "doctor"] {
        assert!(!help(sub).contains("--no-fences"), "{sub}");
    }
    let acquire = help("acquire");
    let ttl = acquire.lines().find(|l| l.contains("--ttl")).unwrap();
    assert!(ttl.contains("refresh") && !ttl.contains("renew"), "{ttl}");
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

/// `acquire --limit N [--permits K]` takes permits and prints their token; `refresh` and
/// `release` by that token work on them as on a lock's (1 once they are gone), and the
/// permits count against separate processes' execs meanwhile.
#[test]
fn acquire_refresh_and_release_permits_by_token() {
    let server = RedisServer::spawn();
    let take = |args: &[&str]| {
        let out = run(redmutex(&server).arg("acquire").args(args));
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        stdout(&out).trim().to_owned()
    };
    let two = take(&["--limit", "3", "--permits", "2", "pool"]);
    let one = take(&["--limit", "3", "--ttl", "2s", "pool"]);
    let out = run(redmutex(&server).args(["acquire", "-n", "--limit", "3", "pool"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["exec", "-n", "--limit", "3", "pool", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["refresh", "--token", &one, "--ttl", "10m", "pool"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let scores = server.command(&["ZRANGE", "pool", "0", "-1", "WITHSCORES"]);
    assert!(scores.contains(&one), "{scores}");
    let out = run(redmutex(&server).args(["release", "--token", &two, "pool"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(redmutex(&server).args(["release", "--token", &two, "pool"]));
    assert_eq!(code(&out), 1, "released already: {}", stderr(&out));
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
    assert_eq!(code(&out), 0, "two free again: {}", stderr(&out));
    thread::sleep(ms(2_100));
    assert!(
        exists(&server, "pool"),
        "the refreshed permit outlived its first TTL"
    );
    let out = run(redmutex(&server).args(["release", "--token", &one, "pool"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!exists(&server, "pool"));
    let out = run(redmutex(&server).args(["refresh", "--token", &one, "--ttl", "1m", "pool"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
}

/// Shell completions and manual pages come from the command line's own definition: every
/// shell's script names the subcommands and their options (bash's parses), and `man`
/// prints roff pages of redmutex and of each subcommand; neither needs Redis.
#[test]
fn completions_and_manual_pages_describe_the_command_line() {
    let bin = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
        cmd.env("REDMUTEX_REDIS", "redis://127.0.0.1:1");
        cmd
    };
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(bin().args(["completions", shell]));
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in ["exec", "completions", "limit", "wait-redis"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let dir = scratch("completions");
    let script = dir.join("redmutex.bash");
    std::fs::write(&script, stdout(&run(bin().args(["completions", "bash"])))).unwrap();
    let parsed = run(Command::new("bash").arg("-n").arg(&script));
    assert_eq!(code(&parsed), 0, "{}", stderr(&parsed));
    let out = run(bin().args(["completions", "tcsh"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));

    let page = stdout(&run(bin().arg("man")));
    assert!(page.contains(".TH redmutex 1"), "{page}");
    for subcommand in ["exec", "acquire", "list", "doctor"] {
        assert!(page.contains(&format!("redmutex\\-{subcommand}")), "{page}");
        let out = run(bin().args(["man", subcommand]));
        assert_eq!(code(&out), 0, "{subcommand}: {}", stderr(&out));
        let title = format!(".TH redmutex-{subcommand} 1");
        assert!(stdout(&out).contains(&title), "{}", stdout(&out));
    }
    let exec = stdout(&run(bin().args(["man", "exec"])));
    assert!(
        exec.contains("KEY COMMAND [ARGS]") && exec.contains("\\-\\-limit"),
        "{exec}"
    );
    let out = run(bin().args(["man", "nope"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

/// `doctor --json` with no node reachable, one server or Redlock: the findings as JSON with
/// `fit` unknown (null, neither fit nor unfit), the error on stderr, exit 69.
#[test]
fn doctor_json_says_unknown_when_no_node_answers() {
    let closed = |port: u16| format!("redis://127.0.0.1:{port}");
    let doctor = |urls: &[String]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
        cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
        for url in urls {
            cmd.arg("--redis").arg(url);
        }
        run(cmd.args(["--wait-redis", "1s", "doctor", "--json"]))
    };
    for urls in [vec![closed(1)], vec![closed(1), closed(2), closed(3)]] {
        let out = doctor(&urls);
        assert_eq!(code(&out), 69, "{urls:?}: {}", stderr(&out));
        let json = stdout(&out);
        assert!(
            json.starts_with("{\"fit\":null,\"findings\":[{\"node\":"),
            "{json}"
        );
        assert!(
            json.contains("\"check\":\"reachable\",\"level\":\"unknown\""),
            "{json}"
        );
        assert_eq!(json.lines().count(), 1, "{json}");
    }
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

/// `leader --watch` goes on through an outage shorter than --wait-redis even when nothing
/// changed meanwhile: the first read that works again is printed (the leader is known
/// again), and the watch does not end at --wait-redis after the outage began.
#[test]
fn a_leader_watch_goes_on_through_a_short_outage_without_a_change() {
    let server = RedisServer::spawn();
    let mut child = redmutex(&server)
        .args(["--wait-redis", "3s", "leader", "--watch", "svc"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    let said = lines_from(child.stderr.take().unwrap());
    assert_eq!(next_line(&lines), "none");
    server.kill();
    // Down until the watch has noticed (it asks every half second), however slow the
    // machine: an outage nobody saw has no end to show.
    let noticed = next_line(&said);
    assert!(noticed.contains("does not answer"), "{noticed}");
    server.restart();
    assert_eq!(next_line(&lines), "none", "read again after the outage");
    thread::sleep(ms(3_500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the watch outlived --wait-redis after a short outage"
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

/// A server that accepts connections and never answers (frozen) does not stretch
/// --wait-redis by a connection's own timeout (2 s): one node or a quorum, the command
/// gives up when it said it would.
#[test]
fn a_frozen_server_is_waited_for_no_longer_than_wait_redis() {
    let servers = RedisServer::spawn_many(3);
    for server in &servers {
        server.pause();
    }
    for mut command in [redmutex(&servers[0]), redlock(&servers)] {
        let started = Instant::now();
        let out = run(command.args(["--wait-redis", "300ms", "inspect", "k"]));
        assert_eq!(code(&out), 69, "{}", stderr(&out));
        assert!(stderr(&out).contains("300ms"), "{}", stderr(&out));
        assert!(started.elapsed() < ms(1_900), "{:?}", started.elapsed());
    }
    for server in &servers {
        server.resume();
    }
}

/// `wait`, `elect --again` and `leader --watch` ride out an outage that begins while they
/// run, as long as it is shorter than --wait-redis — `wait` then answers, `elect` leads
/// again — and `leader --watch` notices a frozen server at once and ends with 69 once the
/// freeze outlasts --wait-redis.
#[test]
fn outages_that_begin_mid_command_are_waited_out_up_to_wait_redis() {
    let server = RedisServer::spawn();
    // wait: the holder's key goes with the restart (no persistence): free.
    let out = run(redmutex(&server).args(["acquire", "--ttl", "60s", "w"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut waiting = redmutex(&server)
        .args(["--wait-redis", "10s", "wait", "w"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(ms(300));
    server.kill();
    thread::sleep(ms(1_200));
    server.restart();
    let status = wait_child(&mut waiting, ms(10_000));
    let mut err = String::new();
    waiting
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("waiting up to 10s"), "{err}");

    // elect --again: its leadership is lost in the outage; it campaigns again once Redis
    // is back, within --wait-redis.
    let mut elect = redmutex(&server)
        .args(["--wait-redis", "10s", "elect", "--again", "--ttl", "1s"])
        .args(["--value", "again", "el", "--", "sleep", "30"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let leads = || stdout(&run(redmutex(&server).args(["leader", "el"])));
    let until = Instant::now() + ms(5_000);
    while !leads().starts_with("again") {
        assert!(Instant::now() < until, "never led");
        thread::sleep(ms(50));
    }
    server.kill();
    thread::sleep(ms(2_000));
    server.restart();
    let until = Instant::now() + ms(8_000);
    while !leads().starts_with("again") {
        assert!(elect.try_wait().unwrap().is_none(), "elect gave up");
        assert!(Instant::now() < until, "never led again");
        thread::sleep(ms(100));
    }
    elect.kill().unwrap();
    elect.wait().unwrap();

    // leader --watch: a freeze is noticed by its probe and ends the watch at --wait-redis.
    let mut watch = redmutex(&server)
        .args(["--wait-redis", "2s", "leader", "--watch", "none-here"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut watch);
    assert_eq!(next_line(&lines), "none");
    server.pause();
    let frozen = Instant::now();
    let status = wait_child(&mut watch, ms(8_000));
    let took = frozen.elapsed();
    server.resume();
    assert_eq!(status.code(), Some(69));
    assert!(took >= ms(2_000) && took < ms(5_000), "{took:?}");
}

/// Small promises: a TTL below 1 ms is a usage error before any connection; `watch` prints
/// no line when a semaphore's holders are only renewed (their order by expiry changes);
/// `inspect` on Redlock says a key split between owners frees as the nodes' keys expire,
/// not "no expiry".
#[test]
fn zero_ttls_renewals_and_split_keys_are_said_as_they_are() {
    let nowhere = format!("redis://127.0.0.1:{}", testkit::free_port());
    for command in [
        &["acquire", "--ttl", "0s", "k"][..],
        &[
            "refresh",
            "--ttl",
            "0s",
            "--token",
            "AAAAAAAAAAAAAAAAAAAAAA",
            "k",
        ],
    ] {
        let started = Instant::now();
        let out = run(Command::new(env!("CARGO_BIN_EXE_redmutex"))
            .args(["--redis", &nowhere, "--wait-redis", "5s"])
            .args(command));
        assert_eq!(code(&out), 64, "{command:?}: {}", stderr(&out));
        assert!(
            started.elapsed() < ms(2_000),
            "{command:?}: before connecting"
        );
    }

    let server = RedisServer::spawn();
    let mut watch = redmutex(&server)
        .args(["watch", "sw"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut watch);
    assert!(next_line(&lines).ends_with("sw free"));
    let token_of = |metadata: &str| {
        let out = run(redmutex(&server).args([
            "acquire",
            "--limit",
            "3",
            "--ttl",
            "30s",
            "--metadata",
            metadata,
            "sw",
        ]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().to_owned()
    };
    let a = token_of("A");
    assert!(next_line(&lines).contains("held by A"));
    let _b = token_of("B");
    assert!(next_line(&lines).contains("+1 more"));
    let out = run(redmutex(&server).args(["refresh", "--token", &a, "--ttl", "60s", "sw"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        lines.recv_timeout(ms(1_000)).is_err(),
        "no line for a renewal"
    );
    watch.kill().unwrap();
    watch.wait().unwrap();

    let servers = RedisServer::spawn_many(3);
    for (node, owner) in [(0, "A"), (1, "B")] {
        let out = run(redmutex(&servers[node]).args([
            "acquire",
            "--ttl",
            "60s",
            "--metadata",
            owner,
            "split",
        ]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let out = run(redlock(&servers).args(["inspect", "split"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.starts_with("split: held, split: no owner on a quorum of nodes, free within "),
        "{said}"
    );
}

/// `inspect` on Redlock where the nodes that answer cannot decide (held on one, free on
/// another, the third frozen) asks again, as `wait` and `watch` do, until `--wait-redis`
/// has passed: it answers once the frozen node does, and exits 69 if it never does.
#[test]
fn redlock_inspect_waits_out_an_undecided_key_up_to_wait_redis() {
    let servers = RedisServer::spawn_many(3);
    let out = run(redlock(&servers).args(["acquire", "--ttl", "30s", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(servers[1].command(&["DEL", "job"]), ":1\r\n");
    servers[2].pause();
    let started = Instant::now();
    let out = run(redlock(&servers).args(["--wait-redis", "1s", "inspect", "job"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "gave up at once"
    );

    let inspect = redlock(&servers)
        .args(["--wait-redis", "20s", "inspect", "job"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // After the first round of PINGs (which waits for every node up to 2 s, then goes on
    // with the quorum that answered): the inspection itself must wait for the node.
    thread::sleep(Duration::from_millis(3_000));
    servers[2].resume();
    let out = inspect.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("job: held, ttl "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn acquire_on_redlock_exits_once_every_node_has_the_lock_so_a_release_elsewhere_finds_it() {
    let servers = RedisServer::spawn_many(5);
    let proxies: Vec<testkit::Proxy> = (servers.iter())
        .map(|s| testkit::Proxy::start(s.addr()))
        .collect();
    // Two slow nodes: three fast ones decide, but the token leaves with the process.
    proxies[0].set_latency(Duration::from_millis(150));
    proxies[1].set_latency(Duration::from_millis(150));
    let through_proxies = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
        for proxy in &proxies {
            cmd.arg("--redis").arg(proxy.url());
        }
        cmd.args(["--node-timeout", "2s"]);
        cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
        cmd
    };
    let out = run(through_proxies().args(["acquire", "--ttl", "30s", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    // Already on the slow nodes when the process has ended.
    assert!(servers.iter().all(|s| exists(s, "job")));
    // Released by another process, directly on the servers: nothing is left behind.
    let out = run(redlock(&servers).args(["release", "--token", &token, "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(500));
    assert!(servers.iter().all(|s| !exists(s, "job")));
}
