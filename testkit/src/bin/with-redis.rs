//! `with-redis [--nodes N | --cluster] COMMAND [ARG...]`: starts private redis-servers on
//! free loopback ports, runs COMMAND with `REDIS_URL` pointing at the first and
//! `REDLOCK_URLS` listing all of them (comma-separated; N independent nodes, default 1) —
//! or, with `--cluster`, a six-node cluster, listed in `REDIS_CLUSTER_URLS` — stops the
//! servers, and exits with the command's status. The README's examples use it so that no
//! system Redis is needed.

use std::ffi::OsString;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut nodes = 1;
    if args.first().is_some_and(|a| a == "--nodes") {
        match args.get(1).and_then(|n| n.to_str()?.parse::<usize>().ok()) {
            Some(n) if (1..=16).contains(&n) => nodes = n,
            _ => {
                eprintln!("with-redis: --nodes takes a number from 1 to 16");
                return ExitCode::from(64);
            }
        }
        args.drain(..2);
    }
    let cluster = args.first().is_some_and(|a| a == "--cluster");
    if cluster {
        args.remove(0);
    }
    let mut args = args.into_iter();
    let Some(program) = args.next() else {
        eprintln!("usage: with-redis [--nodes N | --cluster] COMMAND [ARG...]");
        return ExitCode::from(64);
    };
    if cluster {
        let cluster = testkit::RedisCluster::spawn();
        let urls = cluster.urls().join(",");
        eprintln!("with-redis: a private six-node cluster at {urls}");
        let status = Command::new(&program)
            .args(args)
            .env("REDIS_CLUSTER_URLS", &urls)
            .status();
        drop(cluster);
        return exit_code(&program, status);
    }
    let servers = testkit::RedisServer::spawn_many(nodes);
    let urls: Vec<String> = servers.iter().map(testkit::RedisServer::url).collect();
    eprintln!("with-redis: private redis-server(s) at {}", urls.join(", "));
    let status = Command::new(&program)
        .args(args)
        .env("REDIS_URL", &urls[0])
        .env("REDLOCK_URLS", urls.join(","))
        .status();
    drop(servers);
    exit_code(&program, status)
}

/// The command's exit status as ours.
fn exit_code(program: &OsString, status: std::io::Result<std::process::ExitStatus>) -> ExitCode {
    match status {
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1))),
        Err(e) => {
            eprintln!("with-redis: cannot run {program:?}: {e}");
            ExitCode::from(127)
        }
    }
}
