//! `redmutex doctor`: whether the servers are fit for locks.

use std::process::Command;

use testkit::{RedisServer, ServerOptions};

use crate::common::*;

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
    let rule = format!("doctor on >pw-9d2b {}", redmutex::check::acl_rule("app:"));
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
