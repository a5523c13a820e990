//! `redmutex`: run commands under a Redis lock, and manage locks from shell scripts.
//!
//! Exit codes follow sysexits.h: 64 usage, 69 Redis unavailable, 70 lock lost while the
//! command ran, 74 output could not be written (`acquire`: the token could not be handed
//! over, so the lock was released), 75 lock not obtained; `exec` otherwise exits with the
//! command's status (128 + N when it died of signal N).

mod commands;
mod demo;
mod describe;
mod duration;
mod elect;
mod exec;
mod exit;
mod guard;
mod manual;
mod ops;
mod output;
mod reach;
mod redact;
mod target;
mod waiting;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{
    Acquire, Connection, FairKey, KeepAlive, Locker, Permits, QuorumSettings, ReadKey, WriteKey,
    MAX_PERMITS,
};

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
    #[command(override_usage = EXEC_USAGE)]
    Exec(ExecArgs),
    /// Take a lock and print its token (the lock stays until its TTL or a release).
    #[command(mut_arg("ttl", |ttl| ttl.help(
        "Time to live of the lock: it is held until then, unless refreshed (`refresh`) or \
        released (`release`) sooner"
    )))]
    Acquire(AcquireArgs),
    /// Release a lock taken with `acquire` (by its token) — or, with --force, whoever
    /// holds it.
    Release(ReleaseArgs),
    /// Set a new TTL on a lock taken with `acquire`.
    Refresh(RefreshArgs),
    /// Show whether a key is locked, for how long, and by whom.
    Inspect(InspectArgs),
    /// List every lock under the prefix: kind, holders, TTL, fence, waiters (SCAN, a page
    /// at a time: safe on a busy server).
    List(ops::ListArgs),
    /// Print a line whenever a key's holder changes, until interrupted.
    Watch(ops::WatchArgs),
    /// Wait until a key is free — released, or expired — without taking it: exit 0 once it
    /// is free, 75 when --wait passes first.
    Wait(WaitArgs),
    /// Run a command while this process leads an election; stop it if the leadership is
    /// lost (and campaign again with --again). The command gets its term in
    /// REDMUTEX_FENCE.
    #[command(override_usage = ELECT_USAGE)]
    Elect(ElectArgs),
    /// Print an election's leader (value, term, TTL) or `none`; with --watch, one line per
    /// change.
    Leader(LeaderArgs),
    /// Check that the server(s) can hold locks safely: eviction policy (exit 1 unless
    /// noeviction), persistence, appendfsync, role, version, cluster state, permissions.
    Doctor(DoctorArgs),
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

/// `exec`'s two forms: flock's (one key, then the command), and several keys before `--`.
const EXEC_USAGE: &str = "redmutex exec [OPTIONS] KEY COMMAND [ARGS]...
       redmutex exec [OPTIONS] KEY... -- COMMAND [ARGS]...";

/// `elect`'s form: one key, then the command (after `--` too).
const ELECT_USAGE: &str = "redmutex elect [OPTIONS] KEY [--] COMMAND [ARGS]...";

/// How to take the lock: shared by `exec` and `acquire`.
#[derive(Args, Debug)]
struct LockArgs {
    /// Time to live of the lock (exec renews it every third of this while the command runs).
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
    ttl: Duration,

    /// Wait at most this long for a busy lock (default: wait forever); `--timeout` is the
    /// same, as in flock.
    #[arg(short = 'w', long, visible_alias = "timeout", value_name = "DUR", value_parser = duration::parse, conflicts_with = "nonblock")]
    wait: Option<Duration>,

    /// Try once; fail at once if the lock is held.
    #[arg(short = 'n', long)]
    nonblock: bool,

    /// Text stored with the lock for `inspect` (default: host, pid and command).
    #[arg(long, value_name = "TEXT")]
    metadata: Option<String>,

    /// Wait in line: waiters on every host get the lock in the order they came (one key,
    /// on one server or a cluster; a waiter that dies leaves the line within 3 s).
    #[arg(long)]
    fair: bool,

    /// Let at most N hold the key at once: a semaphore of N permits (as `consul lock -n`),
    /// one key, on one server or a cluster (Redlock refuses it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PERMITS)), conflicts_with = "fair")]
    limit: Option<u32>,

    /// With --limit: take K of the N permits (default 1), e.g. for a heavier job.
    #[arg(long, value_name = "K", requires = "limit", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PERMITS)))]
    permits: Option<u32>,

    /// No waiting line: on a terminal, a waiting exec or acquire otherwise shows on stderr
    /// who holds the key, for how long, and how long it has waited.
    #[arg(short = 'q', long)]
    quiet: bool,

    /// The waiting line's state, when it is shown (set once the arguments are read).
    #[arg(skip)]
    progress: Option<waiting::Progress>,

    /// Whether the tries found Redis unreachable, and since when.
    #[arg(skip)]
    reach: reach::Reach,
}

/// `exec`'s read-write lock, as `flock -s` / `flock -x`.
#[derive(Args, Debug)]
struct SharingArgs {
    /// Take the key's read-write lock as a reader: readers run side by side; no writer (nor
    /// a plain lock of the key) runs with them; a waiting writer keeps new readers out.
    #[arg(short = 's', long, conflicts_with_all = ["exclusive", "fair", "limit"])]
    shared: bool,

    /// Take the key's read-write lock as its writer: it runs alone, and while it waits no
    /// new reader starts. (A plain lock of the key excludes readers and writers alike.)
    #[arg(short = 'x', long, conflicts_with_all = ["fair", "limit"])]
    exclusive: bool,
}

#[derive(Args, Debug)]
struct ExecArgs {
    #[command(flatten)]
    lock: LockArgs,

    #[command(flatten)]
    sharing: SharingArgs,

    /// Take no fencing token: no REDMUTEX_FENCE for the command, and no fence counter
    /// written [env: REDMUTEX_NO_FENCES=1].
    #[arg(long = "no-fences")]
    no_fences: bool,

    /// Exit with this code when the lock is not obtained (instead of 75).
    #[arg(short = 'E', long = "conflict-exit-code", value_name = "N", default_value_t = exit::NOT_OBTAINED)]
    conflict_exit_code: u8,

    /// After a lost lock, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    grace: Duration,

    /// When another process asks the holder to let go (`release --ask`), send the command
    /// this signal (a name like TERM, SIGUSR1, or a number; `none` to ignore requests);
    /// the lock is released when the command ends. Signals that stop or continue a
    /// command, tell of something else (CHLD, URG), or belong to the C library (32, 33)
    /// are refused.
    #[arg(long = "on-revoke", value_name = "SIGNAL", default_value = "TERM", value_parser = exec::parse_on_revoke)]
    on_revoke: exec::OnRevoke,

    /// Keep the lock at least this long from the acquire, however soon the command ends:
    /// at most one run per period across all hosts (e.g. a cron job on every host).
    #[arg(long = "min-hold", value_name = "DUR", value_parser = duration::parse)]
    min_hold: Option<Duration>,

    /// The key, then the command and its arguments, as flock takes them; or several keys
    /// (all or nothing), `--`, then the command. Options go before the first key.
    #[arg(
        value_names = ["KEY", "COMMAND"],
        required = true,
        num_args = 2..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    operands: Vec<OsString>,

    /// The keys to lock, all or nothing (from the operands, see [`split_operands`]).
    #[arg(skip)]
    keys: Vec<String>,

    /// The command to run and its arguments (from the operands).
    #[arg(skip)]
    command: Vec<OsString>,
}

/// `exec`'s (and `elect`'s) operands as keys and a command: before the first `--` the keys and after it the
/// command; without a `--`, as flock, the first operand is the key and the rest the command
/// (whose own `--`, if it needs one, then follows a `--` of exec's). An operand in the
/// keys that looks like an option was meant as one, and is refused with that said.
fn split_operands(operands: &[OsString]) -> Result<(Vec<String>, Vec<OsString>), String> {
    let (keys, command) = match operands.iter().position(|o| o == "--") {
        Some(at) => (&operands[..at], &operands[at + 1..]),
        None => operands.split_at(operands.len().min(1)),
    };
    if keys.is_empty() {
        return Err("no KEY before `--`".into());
    }
    if command.is_empty() {
        return Err("no COMMAND to run".into());
    }
    // Without `--`, a "command" that looks like an option was meant as one (flock would
    // try to run it): refused, with where options go said.
    if keys.len() + command.len() == operands.len()
        && let Some(word) = command[0].to_str().filter(|w| w.starts_with('-'))
    {
        return Err(format!(
            "{word:?} after the KEY: options go before the KEY (a command that starts \
                 with `-` goes after `--`)"
        ));
    }
    let keys = keys
        .iter()
        .map(|key| match key.to_str() {
            Some(key) if key.len() > 1 && key.starts_with('-') => Err(format!(
                "{key:?} among the keys: options go before the first KEY"
            )),
            Some(key) => Ok(key.to_owned()),
            None => Err(format!("{key:?}: a key must be UTF-8 text")),
        })
        .collect::<Result<_, _>>()?;
    Ok((keys, command.to_vec()))
}

#[derive(Args, Debug)]
struct ElectArgs {
    /// The leader's lease TTL: a leader that dies is replaced within it; renewed every
    /// third of it.
    #[arg(long, value_name = "DUR", default_value = "15s", value_parser = duration::parse)]
    ttl: Duration,

    /// The value this process leads with, for `redmutex leader` (default: host, pid and
    /// command).
    #[arg(long, value_name = "TEXT")]
    value: Option<String>,

    /// After the leadership is lost (and the command stopped), or given up on request
    /// (`release --ask`, once the command ends), campaign again.
    #[arg(long)]
    again: bool,

    /// After a lost leadership, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = duration::parse)]
    grace: Duration,

    /// When another process asks the leader to step down (`release --ask KEY`), send the
    /// command this signal (a name like TERM, SIGUSR1, or a number; `none` to ignore
    /// requests); the leadership ends when the command does.
    #[arg(long = "on-revoke", value_name = "SIGNAL", default_value = "TERM", value_parser = exec::parse_on_revoke)]
    on_revoke: exec::OnRevoke,

    /// The election's key, then the command to run while leading and its arguments, as
    /// `exec` takes them (straight after the key, or after `--`). Options go before the
    /// key.
    #[arg(
        value_names = ["KEY", "COMMAND"],
        required = true,
        num_args = 2..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    operands: Vec<OsString>,

    /// The election's key (from the operands, see [`split_operands`]).
    #[arg(skip)]
    key: String,

    /// The command to run while leading, and its arguments (from the operands).
    #[arg(skip)]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
struct LeaderArgs {
    /// The election's key.
    #[arg(value_name = "KEY")]
    key: String,

    /// Keep printing: one line per change of leader or value, until interrupted.
    #[arg(long)]
    watch: bool,

    /// One JSON object per line: key, leader (its value, or null), term, ttl_ms.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct AcquireArgs {
    #[command(flatten)]
    lock: LockArgs,

    /// The keys to lock, all or nothing.
    #[arg(value_name = "KEY", required = true, num_args = 1..)]
    keys: Vec<String>,
}

#[derive(Args, Debug)]
struct ReleaseArgs {
    /// The token printed by `acquire`. (Tokens are base64url and may start with `-`.)
    #[arg(
        long,
        value_name = "T",
        allow_hyphen_values = true,
        required_unless_present_any = ["force", "ask"],
        conflicts_with_all = ["force", "ask"]
    )]
    token: Option<String>,

    /// Ask whoever holds it to let it go (polite revocation): its kept-alive lease hears
    /// it at once, or at its next renewal (`exec` sends its command --on-revoke's signal
    /// and releases when it ends). Only a request: a holder that ignores it keeps the lock.
    #[arg(long, conflicts_with_all = ["force", "now"])]
    ask: bool,

    /// Release it whoever holds it, for a stuck holder: prints who held it, and an audit
    /// line on stderr. Nobody else gets it until the holder's TTL ends (a tombstone keeps
    /// its place), and the holder finds out at its next renewal (exec stops its command).
    #[arg(long)]
    force: bool,

    /// With --force: release at once, for a holder known to be dead whose TTL is too long
    /// to wait out. Breaks mutual exclusion if it lives: it works on until its next
    /// renewal or refresh while another takes the lock.
    #[arg(long, requires = "force")]
    now: bool,

    /// The keys of the lock.
    #[arg(value_name = "KEY", required = true, num_args = 1..)]
    keys: Vec<String>,
}

#[derive(Args, Debug)]
struct RefreshArgs {
    /// The token printed by `acquire`. (Tokens are base64url and may start with `-`.)
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    token: String,

    /// The new time to live, counted from now.
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    ttl: Duration,

    /// The keys of the lock.
    #[arg(value_name = "KEY", required = true, num_args = 1..)]
    keys: Vec<String>,
}

#[derive(Args, Debug)]
struct InspectArgs {
    /// The key to look at.
    #[arg(value_name = "KEY")]
    key: String,

    /// Print one JSON object: key, held, ttl_ms, metadata.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct WaitArgs {
    /// The key to wait for.
    #[arg(value_name = "KEY")]
    key: String,

    /// Give up after this long (exit 75); default: wait as long as it takes. `--timeout`
    /// is the same.
    #[arg(short = 'w', long = "wait", visible_alias = "timeout", value_name = "DUR", value_parser = duration::parse)]
    timeout: Option<Duration>,
}

#[derive(Args, Debug)]
struct DoctorArgs {
    /// Print one JSON object: fit, and every finding (node, check, level, detail).
    #[arg(long)]
    json: bool,
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
    let cli = match Cli::try_parse().and_then(with_operands_split) {
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

/// `exec`'s keys and `elect`'s key, and their command, from their operands (see
/// [`split_operands`]), a usage error as clap's own when they do not split.
fn with_operands_split(mut cli: Cli) -> Result<Cli, clap::Error> {
    let usage_error = |subcommand: &str, message: String| {
        let mut cli = <Cli as clap::CommandFactory>::command();
        let subcommand = (cli.find_subcommand_mut(subcommand)).expect("a subcommand");
        subcommand.error(clap::error::ErrorKind::ValueValidation, message)
    };
    match &mut cli.command {
        Command::Exec(args) => {
            let (keys, command) =
                split_operands(&args.operands).map_err(|m| usage_error("exec", m))?;
            (args.keys, args.command) = (keys, command);
        }
        Command::Elect(args) => {
            let (mut keys, command) =
                split_operands(&args.operands).map_err(|m| usage_error("elect", m))?;
            if keys.len() != 1 {
                let message = format!("one KEY, not {}: an election is one key", keys.len());
                return Err(usage_error("elect", message));
            }
            (args.key, args.command) = (keys.remove(0), command);
        }
        _ => {}
    }
    Ok(cli)
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    let urls = target::urls(&cli.redis, |name| std::env::var(name).ok());
    match cli.command {
        Command::Demo(args) => return demo::run(args, &cli.redis).await,
        Command::Completions(args) => {
            output::check_stdout_open(output::ANSWER_LOST)?;
            return manual::completions(&args);
        }
        Command::Man(args) => {
            output::check_stdout_open(output::ANSWER_LOST)?;
            return manual::man(&args);
        }
        _ => {}
    }
    let access = access(&cli)?;
    let result = run_command(cli, &urls, &access).await;
    // A password given by flag or environment is never echoed either.
    result.map_err(|mut failure| {
        if let Some(password) = access.password.as_deref().filter(|p| !p.is_empty()) {
            failure.message = failure.message.replace(password, "***");
        }
        failure
    })
}

async fn run_command(cli: Cli, urls: &[String], access: &target::Access) -> Result<u8, Failure> {
    let quorum = quorum_settings(cli.node_timeout, urls)?;
    check_arguments(&cli.command, &cli.prefix, urls, quorum.as_ref())?;
    let no_fences = match &cli.command {
        Command::Exec(args) => args.no_fences || env_flag("REDMUTEX_NO_FENCES")?,
        _ => false,
    };
    // doctor reports an unreachable server as a finding rather than waiting for it; a
    // command given a whole time to wait (`exec`/`acquire --wait`, `wait --timeout`) waits
    // for Redis no longer than that either.
    let wait_redis = match &cli.command {
        Command::Doctor(_) => Duration::ZERO,
        Command::Exec(ExecArgs { lock, .. }) | Command::Acquire(AcquireArgs { lock, .. }) => {
            lock.wait.map_or(cli.wait_redis, |w| w.min(cli.wait_redis))
        }
        Command::Wait(args) => args
            .timeout
            .map_or(cli.wait_redis, |t| t.min(cli.wait_redis)),
        _ => cli.wait_redis,
    };
    let locker = match target::locker(urls, access, wait_redis).await {
        Ok(locker) => locker,
        Err(failure) => {
            if let Command::Doctor(args) = &cli.command {
                commands::doctor_unreached(args, urls, &failure)?;
            }
            return Err(failure);
        }
    };
    let mut locker = locker.with_prefix(&cli.prefix);
    if let Some(quorum) = quorum {
        // Each command's process ends right after its last request, and `acquire` hands its
        // token out of it: every node must have answered by then, or a release from
        // elsewhere could overtake the acquire on a slow node, and a release's requests to
        // the slower nodes would be left to the exit (QuorumSettings::wait_for_every_node).
        locker = locker.with_quorum_settings(quorum.wait_for_every_node(true));
    }
    // Several nodes are connected lazily: a command that needs them waits (a bounded time,
    // saying so) for a quorum to answer rather than hang or answer what nobody knows.
    if urls.len() > 1 && !matches!(cli.command, Command::Doctor(_)) {
        reach::quorum_answers(&locker, urls, wait_redis).await?;
    }
    let mut command = cli.command;
    if let Command::Exec(ExecArgs { lock, .. }) | Command::Acquire(AcquireArgs { lock, .. }) =
        &mut command
    {
        lock.progress = waiting::Progress::for_terminal(lock.quiet, lock.nonblock);
        lock.reach = reach::Reach::new(wait_redis);
    }
    if no_fences {
        locker = locker.without_fences();
    }
    match command {
        Command::Exec(args) => exec::run(&locker, args, urls).await,
        Command::Elect(args) => elect::elect(&locker, args, urls, cli.wait_redis).await,
        Command::Leader(args) => elect::leader(&locker, args, urls, cli.wait_redis).await,
        Command::Acquire(args) => commands::acquire(&locker, args, urls).await,
        Command::Release(args) => commands::release(&locker, args, urls).await,
        Command::Refresh(args) => commands::refresh(&locker, args, urls).await,
        Command::Inspect(args) => commands::inspect(&locker, args, urls, cli.wait_redis).await,
        Command::List(args) => ops::list(&locker, args, urls).await,
        Command::Watch(args) => ops::watch(&locker, args, urls, cli.wait_redis).await,
        Command::Wait(args) => commands::wait(&locker, args, urls, cli.wait_redis).await,
        Command::Doctor(args) => commands::doctor(&locker, args, urls).await,
        Command::Demo(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("handled above")
        }
    }
}

/// Redlock's settings (several URLs): the defaults, with `--node-timeout` if given; `None`
/// for one server, where `--node-timeout` is refused.
fn quorum_settings(
    node_timeout: Option<Duration>,
    urls: &[String],
) -> Result<Option<QuorumSettings>, Failure> {
    match (urls.len() > 1, node_timeout) {
        (true, None) => Ok(Some(QuorumSettings::default())),
        (true, Some(timeout)) if timeout.is_zero() => {
            Err(Failure::usage("--node-timeout must be above zero"))
        }
        (true, Some(timeout)) => Ok(Some(QuorumSettings::new().node_timeout(timeout))),
        (false, None) => Ok(None),
        (false, Some(_)) => Err(Failure::usage(
            "--node-timeout is for Redlock: give several --redis URLs (one server has no node \
             timeout; --wait-redis bounds the wait for it)",
        )),
    }
}

/// What can be refused before connecting is: a TTL `exec` could not keep alive, and
/// `acquire` with nowhere to put its token; then the keys and metadata. `redlock`: the
/// quorum's settings, for several URLs.
fn check_arguments(
    command: &Command,
    prefix: &str,
    urls: &[String],
    redlock: Option<&QuorumSettings>,
) -> Result<(), Failure> {
    check_ttls(command)?;
    match command {
        Command::Exec(args) => {
            // Several URLs are Redlock nodes, whose drift allowance shortens the lease.
            KeepAlive::new()
                .check(args.lock.ttl, redlock)
                .map_err(|e| Failure::usage(e.to_string()))?;
            if args.min_hold.is_some_and(|d| d < redmutex::MIN_TTL) {
                return Err(Failure::usage("--min-hold must be at least 1ms"));
            }
            args.lock.check_fair(&args.keys, urls)?;
            args.lock.check_limit(&args.keys, urls)?;
            if (args.sharing.shared || args.sharing.exclusive) && args.keys.len() > 1 {
                return Err(Failure::usage(
                    "--shared and --exclusive lock one key's read-write lock, not several keys",
                ));
            }
        }
        Command::Elect(args) => {
            KeepAlive::new()
                .check(args.ttl, redlock)
                .map_err(|e| Failure::usage(e.to_string()))?;
        }
        Command::Inspect(_)
        | Command::List(_)
        | Command::Watch(_)
        | Command::Leader(_)
        | Command::Doctor(_) => output::check_stdout_open(output::ANSWER_LOST)?,
        Command::Release(args) if args.force || args.ask => {
            output::check_stdout_open(output::ANSWER_LOST)?
        }
        Command::Acquire(args) => {
            args.lock.check_fair(&args.keys, urls)?;
            args.lock.check_limit(&args.keys, urls)?;
            output::check_stdout_open("the token would be lost, so no lock was taken")?
        }
        _ => {}
    }
    check_sizes(command, prefix)
}

/// TTLs (and a minimum hold) beyond what a lock can hold, [`redmutex::MAX_TTL`], or below
/// [`redmutex::MIN_TTL`]: a usage error before any connection, as the library would answer
/// once connected.
fn check_ttls(command: &Command) -> Result<(), Failure> {
    let (ttl, min_hold) = match command {
        Command::Exec(a) => (a.lock.ttl, a.min_hold),
        Command::Acquire(a) => (a.lock.ttl, None),
        Command::Refresh(a) => (a.ttl, None),
        Command::Elect(a) => (a.ttl, None),
        _ => return Ok(()),
    };
    let too_long = |what: &str, d: Duration| {
        Failure::usage(format!(
            "{what} {} is longer than the longest a lock can be held ({} ms)",
            duration::format(d),
            redmutex::MAX_TTL.as_millis()
        ))
    };
    if ttl > redmutex::MAX_TTL {
        return Err(too_long("--ttl", ttl));
    }
    if ttl < redmutex::MIN_TTL {
        return Err(Failure::usage(format!(
            "--ttl {} is below the minimum of 1ms",
            duration::format(ttl)
        )));
    }
    match min_hold {
        Some(hold) if hold > redmutex::MAX_TTL => Err(too_long("--min-hold", hold)),
        _ => Ok(()),
    }
}

/// Bad keys (empty, oversized, duplicate, named like a fence counter) and oversized
/// metadata are usage errors before any connection is made: the library's own checks,
/// which it makes again, but only once the server has been reached.
fn check_sizes(command: &Command, prefix: &str) -> Result<(), Failure> {
    let (keys, metadata): (&[String], Option<&String>) = match command {
        Command::Exec(a) => (&a.keys, a.lock.metadata.as_ref()),
        Command::Acquire(a) => (&a.keys, a.lock.metadata.as_ref()),
        Command::Release(a) => (&a.keys, None),
        Command::Refresh(a) => (&a.keys, None),
        Command::Inspect(a) => (std::slice::from_ref(&a.key), None),
        Command::Watch(a) => (std::slice::from_ref(&a.key), None),
        Command::Wait(a) => (std::slice::from_ref(&a.key), None),
        Command::Elect(a) => (std::slice::from_ref(&a.key), a.value.as_ref()),
        Command::Leader(a) => (std::slice::from_ref(&a.key), None),
        Command::Demo(_) | Command::Doctor(_) | Command::List(_) => return Ok(()),
        Command::Completions(_) | Command::Man(_) => return Ok(()),
    };
    let usage = |e: redmutex::Error| Failure::usage(e.to_string());
    redmutex::check_keys(prefix, keys).map_err(usage)?;
    metadata.map_or(Ok(()), |m| redmutex::check_metadata(m).map_err(usage))
}

/// A yes/no environment variable: unset, empty, `0`, `false` or `no` is no; `1`, `true` or
/// `yes` is yes; anything else is a usage error rather than a guess.
fn env_flag(name: &str) -> Result<bool, Failure> {
    let value = std::env::var(name).unwrap_or_default();
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" => Ok(false),
        "1" | "true" | "yes" => Ok(true),
        _ => Err(Failure::usage(format!(
            "{name}={value:?}: expected 1, true, yes, 0, false or no"
        ))),
    }
}

/// `--tls-ca`, `--user`, `--password`, each falling back to its environment variable.
fn access(cli: &Cli) -> Result<target::Access, Failure> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let tls_ca = match cli
        .tls_ca
        .clone()
        .or_else(|| env("REDMUTEX_TLS_CA").map(Into::into))
    {
        Some(path) => Some(std::fs::read(&path).map_err(|e| {
            Failure::usage(format!("cannot read the CA file {}: {e}", path.display()))
        })?),
        None => None,
    };
    Ok(target::Access {
        tls_ca,
        user: cli.user.clone().or_else(|| env("REDMUTEX_USER")),
        password: cli.password.clone().or_else(|| env("REDMUTEX_PASSWORD")),
    })
}

/// A key's read-write lock, configured both ways: `exec` takes one of them.
struct Sharing<'a, C: Connection> {
    read: Acquire<'a, C, ReadKey>,
    write: Acquire<'a, C, WriteKey>,
}

impl LockArgs {
    /// The acquire, with the waiting policy the flags ask for: one try (`-n`), up to
    /// `--wait`, or forever. Waiters are woken by the holder's release (the locker has
    /// wake-up on); they also poll, for a holder that dies without releasing, backing off
    /// exponentially from 10 ms to 1 s with jitter so that many waiting scripts do not
    /// poll in step. `fenced`: take the lock's fence with its keys.
    fn acquire<'a, C: Connection>(
        &self,
        locker: &Locker<C>,
        keys: &[String],
        what: &str,
        fenced: bool,
    ) -> Acquire<'a, C> {
        self.configure(locker.acquire_all(keys, self.ttl), what, fenced)
    }

    /// As [`acquire`](LockArgs::acquire), in line (`--fair`) for the one key.
    fn acquire_fair<'a, C: Connection>(
        &self,
        locker: &Locker<C>,
        keys: &[String],
        what: &str,
        fenced: bool,
    ) -> Result<Acquire<'a, C, FairKey>, redmutex::Error> {
        let fair = locker.fair_lock(keys.first().map_or("", String::as_str))?;
        Ok(self.configure(fair.acquire(self.ttl), what, fenced))
    }

    /// As [`acquire`](LockArgs::acquire), of the one key's read-write lock: as a reader
    /// (`--shared`) or as its writer (`--exclusive`).
    fn acquire_rw<'a, C: Connection>(
        &self,
        locker: &Locker<C>,
        keys: &[String],
        what: &str,
        fenced: bool,
    ) -> Result<Sharing<'a, C>, redmutex::Error> {
        let rw = locker.rw_lock(keys.first().map_or("", String::as_str))?;
        Ok(Sharing {
            read: self.configure(rw.read(self.ttl), what, fenced),
            write: self.configure(rw.write(self.ttl), what, fenced),
        })
    }

    /// As [`acquire`](LockArgs::acquire), of `--permits` of the one key's semaphore of
    /// `limit` permits.
    fn acquire_permits<'a, C: Connection>(
        &self,
        locker: &Locker<C>,
        keys: &[String],
        limit: u32,
        what: &str,
        fenced: bool,
    ) -> Result<Acquire<'a, C, Permits>, redmutex::Error> {
        let semaphore = locker.semaphore(keys.first().map_or("", String::as_str), limit)?;
        let permits = self.permits.unwrap_or(1);
        Ok(self.configure(semaphore.acquire(permits, self.ttl), what, fenced))
    }

    /// `--limit` counts the permits of one key, and `--permits` takes no more than there
    /// are: refused before connecting.
    fn check_limit(&self, keys: &[String], urls: &[String]) -> Result<(), Failure> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        if keys.len() > 1 {
            return Err(Failure::usage(
                "--limit counts the permits of one key, not several",
            ));
        }
        if urls.len() > 1 {
            return Err(Failure::usage(
                "--limit needs one server or a cluster: permits counted on each Redlock node \
                 apart do not add up (with 2 permits on 3 nodes, three holders can each hold \
                 a quorum)",
            ));
        }
        match self.permits.unwrap_or(1) {
            permits if permits > limit => Err(Failure::usage(format!(
                "--permits {permits} is more than the --limit {limit}: never obtainable"
            ))),
            _ => Ok(()),
        }
    }

    /// `--fair` locks one key, on one server or a cluster: refused before connecting.
    fn check_fair(&self, keys: &[String], urls: &[String]) -> Result<(), Failure> {
        if self.fair && keys.len() > 1 {
            return Err(Failure::usage("--fair locks one key, not several"));
        }
        if self.fair && urls.len() > 1 {
            return Err(Failure::usage(
                "--fair needs one server or a cluster: the nodes of a Redlock quorum would \
                 each keep their own line, in their own order",
            ));
        }
        Ok(())
    }

    fn configure<'a, C: Connection, P: Send + Sync + 'a>(
        &self,
        acquire: Acquire<'a, C, P>,
        what: &str,
        fenced: bool,
    ) -> Acquire<'a, C, P> {
        let metadata = self
            .metadata
            .clone()
            .unwrap_or_else(|| default_metadata(what));
        let mut acquire = acquire.metadata(metadata);
        if fenced {
            acquire = acquire.with_fence();
        }
        let (progress, reach) = (self.progress.clone(), self.reach.clone());
        acquire = acquire.on_failed_try(move |failed| {
            reach.observe(failed);
            if let Some(progress) = &progress {
                progress.record(failed);
            }
        });
        if self.nonblock {
            return acquire;
        }
        acquire
            .retry(
                retry::exponential(Duration::from_millis(10), Duration::from_secs(1))
                    .jitter(Jitter::equal()),
            )
            .deadline(self.wait.unwrap_or(Duration::MAX))
    }
}

/// `host=web-3 pid=4121 since=1795482003 cmd=backup.sh`: who holds the lock, and since
/// when (Unix seconds, this host's clock), for `inspect`, `list` and the waiting line.
pub fn default_metadata(what: &str) -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (host, pid) = (hostname(), std::process::id());
    let mut text = format!("host={host} pid={pid} since={since} cmd={what}");
    // Keep it short: it is stored with every lock.
    if text.len() > 200 {
        let mut cut = 200;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// This host's name (`unknown` when it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
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
