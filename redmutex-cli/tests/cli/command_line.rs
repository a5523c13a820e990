//! The command line as a whole: usage errors (64) and what is refused before connecting,
//! help and version, and output that cannot be written (74).

use std::process::{Command, Stdio};
use std::time::Instant;

use testkit::RedisServer;

use crate::common::*;

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
    let long_key = "k".repeat(redmutex::limits::MAX_KEY_LEN + 1);
    let long_metadata = "m".repeat(redmutex::limits::MAX_METADATA_LEN + 1);
    let token = "A".repeat(redmutex::limits::TOKEN_LEN);
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
