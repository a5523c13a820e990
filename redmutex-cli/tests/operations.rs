//! The operator's commands with the real binary against test-kit servers: `list`,
//! `release --force`, `watch`, the waiting line on a terminal, and the JSON shapes the
//! CLI documentation (docs/CLI.md) shows.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use testkit::RedisServer;

/// A stored lock value as redmutex writes it: a token (here made up), the flag byte, the
/// metadata.
fn lock_value(n: usize, metadata: &str) -> String {
    format!("{:A>22}-{metadata}", format!("B{n}"))
}

/// `redmutex acquire` of `key`, returning its token.
fn acquire(server: &RedisServer, args: &[&str]) -> String {
    let out = run(redmutex(server).arg("acquire").args(args));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_owned()
}

/// The keys of a JSON object, nested ones included (`"name":`), each once, in the order
/// they first appear: enough to compare the shape of two outputs (whatever the length of
/// their arrays) without a JSON parser.
fn json_keys(line: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let key = &line[i + 1..j.min(line.len())];
            if bytes.get(j + 1) == Some(&b':') && !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
            }
            i = j + 1;
        } else {
            i += 1;
        }
    }
    keys
}

#[test]
fn list_shows_every_lock_in_aligned_columns_and_as_json_lines() {
    let server = RedisServer::spawn();
    let token = acquire(
        &server,
        &["--metadata", "host=a pid=1 cmd=backup", "app:backup"],
    );
    acquire(&server, &["--fair", "app:fair"]);
    server.command(&["SET", "app:stranger", "not a lock"]);
    // Thousands of locks under another prefix, written as redmutex writes them.
    let bulk = 3000;
    let sets: Vec<Vec<String>> = (0..bulk)
        .map(|n| {
            let key = format!("bulk:{n}");
            let value = lock_value(n, &format!("job={n}"));
            vec!["SET".into(), key, value, "PX".into(), "600000".into()]
        })
        .collect();
    let sets: Vec<Vec<&str>> = sets
        .iter()
        .map(|c| c.iter().map(String::as_str).collect())
        .collect();
    let sets: Vec<&[&str]> = sets.iter().map(Vec::as_slice).collect();
    server.commands(&sets);

    let out = run(redmutex(&server).args(["--prefix", "app:", "list"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].starts_with("KEY "), "{text}");
    // Aligned: every column starts where its heading does.
    let column = lines[0].find("KIND").unwrap();
    for line in &lines[1..4] {
        assert_eq!(&line[column - 2..column], "  ", "{text}");
        assert_ne!(&line[column..column + 1], " ", "{text}");
    }
    assert!(lines[1].starts_with("app:backup "), "{text}");
    assert!(lines[1].contains(" lock "), "{text}");
    assert!(lines[1].ends_with("host=a pid=1 cmd=backup"), "{text}");
    // (A fair lock taken with nobody in line is a lock's key like any other.)
    assert!(
        lines[2].starts_with("app:fair ") && lines[2].contains(" lock "),
        "{text}"
    );
    assert!(
        lines[2].contains(" (for "),
        "default metadata says since when: {text}"
    );
    assert!(lines[3].contains("foreign") && lines[3].contains("(not a redmutex lock)"));
    assert!(lines[4].starts_with("3 locks in "), "{text}");
    assert!(!text.contains(&token), "a token was printed");

    let started = Instant::now();
    let out = run(redmutex(&server).args(["list", "--json", "bulk:*"]));
    let took = started.elapsed();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json = stdout(&out);
    assert_eq!(json.lines().count(), bulk, "one object per lock");
    let mut keys: Vec<&str> = json
        .lines()
        .map(|line| {
            assert!(
                line.starts_with("{\"key\":\"bulk:") && line.ends_with('}'),
                "{line}"
            );
            assert!(line.contains("\"kind\":\"lock\""), "{line}");
            line.split('"').nth(3).unwrap()
        })
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), bulk, "each lock once");
    assert!(stderr(&out).starts_with(&format!("redmutex: {bulk} locks in ")));
    println!("listed {bulk} locks in {took:?} (the process, start to end)");

    // Nothing under a prefix: no table, the count.
    let out = run(redmutex(&server).args(["--prefix", "none:", "list"]));
    assert_eq!(
        stdout(&out),
        "0 locks in ".to_owned() + stdout(&out).trim_start_matches("0 locks in ")
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

#[test]
fn watch_prints_a_line_per_change_of_holder() {
    let server = RedisServer::spawn();
    for json in [false, true] {
        let mut watch = redmutex(&server)
            .arg("watch")
            .args(json.then_some("--json"))
            .arg("w")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = lines_of(&mut watch);
        let first = next_line(&lines);
        let token = acquire(&server, &["--metadata", "who=one", "w"]);
        let taken = next_line(&lines);
        let out = run(redmutex(&server).args(["release", "--token", &token, "w"]));
        assert_eq!(code(&out), 0);
        let freed = next_line(&lines);
        acquire(&server, &["--metadata", "who=two", "--ttl", "1s", "w"]);
        let again = next_line(&lines);
        let expired = next_line(&lines);
        let _ = watch.kill();
        let _ = watch.wait();
        if json {
            assert!(
                first.ends_with(",\"key\":\"w\",\"held\":false,\"lock\":null}"),
                "{first}"
            );
            assert!(
                taken.contains("\"held\":true,\"lock\":{\"key\":\"w\",\"kind\":\"lock\""),
                "{taken}"
            );
            assert!(taken.contains("\"metadata\":\"who=one\""), "{taken}");
            assert!(freed.contains("\"held\":false"), "{freed}");
            assert!(again.contains("who=two") && expired.contains("\"held\":false"));
            assert_eq!(json_keys(&first)[..3], ["time", "key", "held"]);
        } else {
            let time = |line: &str| line.split(' ').next().unwrap().len();
            assert_eq!(time(&first), "2026-11-24T01:20:03Z".len(), "{first}");
            assert!(first.ends_with(" w free"), "{first}");
            assert!(taken.contains(" w held by who=one (lock, "), "{taken}");
            assert!(freed.ends_with(" w free"), "{freed}");
            assert!(again.contains(" w held by who=two (lock, "), "{again}");
            assert!(
                expired.ends_with(" w free"),
                "an expiry is a change too: {expired}"
            );
        }
    }
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

/// The examples of a section of docs/CLI.md: each a line `$ redmutex …`, then the first
/// line the command prints.
fn documented_examples(heading: &str) -> Vec<(String, String)> {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CLI.md")).unwrap();
    let section = (docs.split(&format!("\n## {heading}\n")).nth(1))
        .unwrap_or_else(|| panic!("a section {heading}"))
        .split("\n## ")
        .next()
        .unwrap()
        .to_owned();
    let lines: Vec<&str> = section.lines().collect();
    (lines.iter().zip(lines.iter().skip(1)))
        .filter_map(|(command, output)| {
            let command = command.strip_prefix("$ redmutex ")?;
            Some((command.to_owned(), output.to_string()))
        })
        .collect()
}

/// Runs each example of a docs/CLI.md section against a server holding what the examples
/// show (a lock on `jobs:nightly`, `node-1` leading `svc`) and hands `check` the command,
/// the documented line and the printed one.
fn run_documented_examples(heading: &str, check: impl Fn(&str, &str, &str)) {
    let examples = documented_examples(heading);
    assert!(examples.len() >= 5, "{examples:?}");
    let server = RedisServer::spawn();
    let metadata = ["--metadata", "host=web-3 pid=4121", "--ttl", "30s"];
    acquire(&server, &[&metadata[..], &["jobs:nightly"]].concat());
    let mut leader = redmutex(&server)
        .args(["elect", "--value", "node-1", "svc", "--", "sleep", "5"])
        .spawn()
        .unwrap();
    thread::sleep(ms(500));
    for (command, documented) in &examples {
        let args: Vec<&str> = command.split(' ').collect();
        let mut cmd = redmutex(&server);
        cmd.args(&args);
        let printed = if args[0] == "watch" || args.contains(&"--watch") {
            let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
            let line = next_line(&lines_of(&mut child));
            let _ = child.kill();
            let _ = child.wait();
            line
        } else {
            let out = run(&mut cmd);
            stdout(&out).lines().next().unwrap_or_default().to_owned()
        };
        check(command, documented, &printed);
    }
    let _ = leader.kill();
    let _ = leader.wait();
}

/// Every `--json` example in docs/CLI.md has the keys the command prints, in order.
#[test]
fn json_output_has_the_shapes_the_cli_docs_document() {
    run_documented_examples("JSON output", |command, documented, printed| {
        assert_eq!(
            json_keys(printed),
            json_keys(documented),
            "`redmutex {command}` printed {printed}"
        );
    });
}

/// Every text example in docs/CLI.md reads as the command prints it: the same words, with
/// numbers (times, TTLs, terms, ports) where the doc has numbers.
#[test]
fn text_output_has_the_shapes_the_cli_docs_document() {
    let shape = |line: &str| {
        let mut shape = String::new();
        for c in line
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
        {
            match c.is_ascii_digit() {
                true if shape.ends_with('#') => {}
                true => shape.push('#'),
                false => shape.push(c),
            }
        }
        shape
    };
    run_documented_examples("Text output", |command, documented, printed| {
        assert_eq!(
            shape(printed),
            shape(documented),
            "`redmutex {command}` printed {printed}"
        );
    });
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

/// What a finished child wrote on its piped stderr.
fn piped_stderr(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    let pipe = child.stderr.as_mut().expect("stderr piped");
    pipe.read_to_string(&mut err).unwrap();
    err
}
