//! What every subcommand shares to reach Redis: where (`--redis`, the environment,
//! `--prefix`), how (TLS, ACL users, passwords never echoed), Redlock over several nodes and
//! its quorum, and how long Redis is waited for (`--wait-redis`, `--node-timeout`).

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::{RedisServer, ServerOptions};

use crate::common::*;

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
            redmutex::check::acl_rule("app:")
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
