//! The outputs docs/CLI.md shows, as the binary prints them (text and JSON).

use std::process::Stdio;
use std::thread;

use testkit::RedisServer;

use crate::common::*;

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
