//! `redmutex`: run commands under a Redis lock, and manage locks from shell scripts.
//!
//! Exit codes follow sysexits.h: 64 usage, 69 Redis unavailable, 70 lock lost while the
//! command ran, 74 output could not be written (`acquire`: the token could not be handed
//! over, so the lock was released), 75 lock not obtained; `exec` otherwise exits with the
//! command's status (128 + N when it died of signal N).
//!
//! This file holds the global flags and the list of subcommands, and dispatches to them:
//! each subcommand's arguments, checks and run live in its own file (exec.rs, acquire.rs,
//! …); connect.rs takes every command that talks to Redis there.

// The subcommands.
mod acquire;
mod demo;
mod doctor;
mod elect;
mod exec;
mod inspect;
mod leader;
mod list;
mod manual;
mod refresh;
mod release;
mod wait;
mod watch;

// What they share.
mod connect;
mod describe;
mod duration;
mod exit;
mod guard;
mod job;
mod lock;
mod metadata;
mod operands;
mod output;
mod reach;
mod redact;
mod target;
mod token;
mod waiting;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

use crate::connect::Redis;
use crate::exit::Failure;

#[derive(Parser, Debug)]
#[command(
    name = "redmutex",
    version,
    about = "Distributed locks on Redis for shell scripts and cron jobs",
    long_about = "Distributed locks on Redis for shell scripts and cron jobs.\n\n\
        Redis: --redis URL, else $REDMUTEX_REDIS, else $REDIS_URL, else redis://127.0.0.1:6379.\n\
        Several URLs (--redis repeated, or comma-separated in $REDMUTEX_REDIS) are independent\n\
        nodes: every command then uses Redlock, and a lock needs a majority of them.\n\
        A lock on KEY is stored in Redis under exactly KEY (--prefix P prepends P).\n\
        Durations: 250ms, 30s, 1.5s, 2m, 1h30m.\n\n\
        Exit codes: 1 doctor found the server unfit for locks, 64 usage error, 69 Redis\n\
        unreachable or auth failure, 70 lock lost while\n\
        the command ran, 74 output failed (acquire: token not handed over, lock released),\n\
        75 lock not obtained; exec otherwise passes on the command's status."
)]
struct Cli {
    /// Redis server URL (redis://[user:password@]host:port[/db]); repeat it for Redlock over
    /// several independent nodes.
    #[arg(long = "redis", value_name = "URL", global = true, help_heading = CONNECTION)]
    redis: Vec<String>,

    /// Prepend this to every key.
    #[arg(long, value_name = "P", global = true, default_value = "", help_heading = CONNECTION)]
    prefix: String,

    /// Trust this CA certificate (PEM file) for rediss:// URLs instead of the system's
    /// roots [env: REDMUTEX_TLS_CA].
    #[arg(long = "tls-ca", value_name = "FILE", global = true, help_heading = CONNECTION)]
    tls_ca: Option<std::path::PathBuf>,

    /// Log in as this ACL user (overrides the URLs') [env: REDMUTEX_USER].
    #[arg(long, value_name = "NAME", global = true, help_heading = CONNECTION)]
    user: Option<String>,

    /// The password (overrides the URLs'). Prefer $REDMUTEX_PASSWORD: a flag is visible
    /// to other users in the process list. Never printed [env: REDMUTEX_PASSWORD].
    #[arg(long, value_name = "PW", global = true, help_heading = CONNECTION)]
    password: Option<String>,

    /// How long to wait for Redis — over several nodes, a quorum of them — to answer,
    /// before giving up with exit 69 (said on stderr while waiting).
    #[arg(long = "wait-redis", value_name = "DUR", global = true, default_value = "10s", value_parser = duration::parse, help_heading = CONNECTION)]
    wait_redis: Duration,

    /// Redlock (several --redis): how long one node may take to answer one request before
    /// it counts as failed for that try (default: a twentieth of the TTL, between 10ms and
    /// 500ms). Raise it for nodes across a slow link: a node slower than this never
    /// agrees.
    #[arg(long = "node-timeout", value_name = "DUR", global = true, value_parser = duration::parse, help_heading = CONNECTION)]
    node_timeout: Option<Duration>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding the lock; renew it while the command runs; stop the
    /// command if the lock is lost.
    #[command(override_usage = exec::USAGE)]
    Exec(exec::ExecArgs),
    /// Take a lock and print its token (the lock stays until its TTL or a release).
    #[command(mut_arg("ttl", |ttl| ttl.help(
        "Time to live of the lock: it is held until then, unless refreshed (`refresh`) or \
        released (`release`) sooner"
    )))]
    Acquire(acquire::AcquireArgs),
    /// Release a lock taken with `acquire` (by its token) — or, with --force, whoever
    /// holds it.
    Release(release::ReleaseArgs),
    /// Set a new TTL on a lock taken with `acquire`.
    Refresh(refresh::RefreshArgs),
    /// Show whether a key is locked, for how long, and by whom.
    Inspect(inspect::InspectArgs),
    /// List every lock under the prefix: kind, holders, TTL, fence, waiters (SCAN, a page
    /// at a time: safe on a busy server).
    List(list::ListArgs),
    /// Print a line whenever a key's holder changes, until interrupted.
    Watch(watch::WatchArgs),
    /// Wait until a key is free — released, or expired — without taking it: exit 0 once it
    /// is free, 75 when --wait passes first.
    Wait(wait::WaitArgs),
    /// Run a command while this process leads an election; stop it if the leadership is
    /// lost (and campaign again with --again). The command gets its term in
    /// REDMUTEX_FENCE.
    #[command(override_usage = elect::USAGE)]
    Elect(elect::ElectArgs),
    /// Print an election's leader (value, term, TTL) or `none`; with --watch, one line per
    /// change.
    Leader(leader::LeaderArgs),
    /// Check that the server(s) can hold locks safely: eviction policy (exit 1 unless
    /// noeviction), persistence, appendfsync, role, version, cluster state, permissions.
    Doctor(doctor::DoctorArgs),
    /// Show redmutex at work against a private redis-server (no Redis needed).
    Demo(demo::DemoArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell (e.g.
    /// `redmutex completions bash > /etc/bash_completion.d/redmutex`).
    Completions(manual::CompletionsArgs),
    /// Print the manual page, as roff (e.g. `redmutex man > redmutex.1`; `redmutex man
    /// exec` prints redmutex-exec(1)).
    Man(manual::ManArgs),
}

/// The heading of the options that say which Redis to use and how (every subcommand's).
const CONNECTION: &str = "Redis";

impl Command {
    /// `exec`'s keys and `elect`'s key, and their command, from their operands (see
    /// [`operands::split`]): a usage error as clap's own when they do not split. Part of
    /// reading the command line, before anything runs.
    fn split_operands(&mut self) -> Result<(), clap::Error> {
        let (name, split) = match self {
            Command::Exec(args) => ("exec", args.split_operands()),
            Command::Elect(args) => ("elect", args.split_operands()),
            _ => return Ok(()),
        };
        split.map_err(|message| {
            let mut cli = Cli::command();
            let subcommand = (cli.find_subcommand_mut(name)).expect("a subcommand");
            subcommand.error(clap::error::ErrorKind::ValueValidation, message)
        })
    }

    /// Runs the command: through [`Redis::run`] (its checks, the connection, then its own
    /// run) for those that talk to Redis; the others need none (the demo starts its own).
    async fn run(self, redis: &Redis<'_>) -> Result<u8, Failure> {
        match self {
            Command::Exec(args) => redis.run(args, exec::run).await,
            Command::Acquire(args) => redis.run(args, acquire::run).await,
            Command::Release(args) => redis.run(args, release::run).await,
            Command::Refresh(args) => redis.run(args, refresh::run).await,
            Command::Inspect(args) => redis.run(args, inspect::run).await,
            Command::List(args) => redis.run(args, list::run).await,
            Command::Watch(args) => redis.run(args, watch::run).await,
            Command::Wait(args) => redis.run(args, wait::run).await,
            Command::Elect(args) => redis.run(args, elect::run).await,
            Command::Leader(args) => redis.run(args, leader::run).await,
            Command::Doctor(args) => redis.run(args, doctor::run).await,
            Command::Demo(args) => demo::run(args, redis.flags).await,
            Command::Completions(args) => manual::completions(&args, Cli::command()),
            Command::Man(args) => manual::man(&args, Cli::command()),
        }
    }
}

/// A release handed to the library's own release thread as the program ends can meet a
/// connection that was reconnecting on the runtime that has just shut down: polling it
/// panics inside tokio. The library catches that, and the lock expires by its TTL; the
/// user is told so in one line instead of a panic report with a source location.
fn one_line_for_release_thread_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some("redmutex-release") {
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!(
                    "redmutex: warning: a release could not be sent as the program ended (its \
                 connection was reconnecting); the lock expires by its TTL\n"
                ),
            );
        } else {
            report(info);
        }
    }));
}

fn main() -> ExitCode {
    one_line_for_release_thread_panics();
    // `exec`'s guard process (see guard.rs): not a user command.
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == guard::SUBCOMMAND) {
        return guard::run(&args[2..]);
    }
    let parsed = Cli::try_parse().and_then(|mut cli| cli.command.split_operands().map(|()| cli));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // --help and --version are not errors.
            return if e.use_stderr() {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return Failure::new(
                exit::UNAVAILABLE,
                format!("cannot start the async runtime: {e}"),
            )
            .report()
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    let redis = Redis {
        flags: &cli.redis,
        urls: target::urls(&cli.redis, |name| std::env::var(name).ok()),
        prefix: &cli.prefix,
        tls_ca: cli.tls_ca.as_deref(),
        user: cli.user.as_deref(),
        password: cli.password.as_deref(),
        wait_redis: cli.wait_redis,
        node_timeout: cli.node_timeout,
    };
    cli.command.run(&redis).await
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand's arguments are consistent (clap checks conflicts, names and
    /// groups here, instead of panicking at the first run of that subcommand).
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
