//! `redmutex list`: every lock under the prefix, as columns and as JSON lines.

use std::time::Instant;

use testkit::RedisServer;

use crate::common::*;

/// A stored lock value as redmutex writes it: a token (here made up), the flag byte, the
/// metadata.
fn lock_value(n: usize, metadata: &str) -> String {
    format!("{:A>22}-{metadata}", format!("B{n}"))
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

/// `list` on Redlock where the nodes that answer cannot decide about a key (held on one,
/// free on another, the third frozen) asks again, as `inspect`, `wait` and `watch` do,
/// until `--wait-redis` has passed: it lists the key once the frozen node answers, and
/// exits 69, listing nothing, if it never does.
#[test]
fn redlock_list_waits_out_an_undecided_key_up_to_wait_redis() {
    let out = undecided_key_waited_out(&["list"]);
    let text = stdout(&out);
    assert!(text.lines().any(|l| l.starts_with("job ")), "{text}");
    assert!(text.contains("\n1 lock in "), "{text}");
}
