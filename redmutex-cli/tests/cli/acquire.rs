//! `redmutex acquire`: a lock (or permits) left in Redis, its token printed for `refresh` and
//! `release`.

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use testkit::RedisServer;

use crate::common::*;

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
