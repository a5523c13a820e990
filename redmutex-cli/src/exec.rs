//! `redmutex exec`: run a command under a kept-alive lock, and stop it if the lock is lost
//! (how the command is run and stopped: job.rs).

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use redmutex::{claim::Held, connection::Connection, Lock, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::exit::{self, Failure};
use crate::job::{self, Job, OnRevoke};
use crate::lock::{LockArgs, Request, Side, Then};
use crate::{duration, operands};

/// `exec`'s two forms: flock's (one key, then the command), and several keys before `--`.
pub const USAGE: &str = "redmutex exec [OPTIONS] KEY COMMAND [ARGS]...
       redmutex exec [OPTIONS] KEY... -- COMMAND [ARGS]...";

#[derive(Args, Debug)]
pub struct ExecArgs {
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
    #[arg(long = "on-revoke", value_name = "SIGNAL", default_value = "TERM", value_parser = job::parse_on_revoke)]
    on_revoke: OnRevoke,

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

    /// The keys to lock, all or nothing (from the operands, see [`operands::split`]).
    #[arg(skip)]
    keys: Vec<String>,

    /// The command to run and its arguments (from the operands).
    #[arg(skip)]
    command: Vec<OsString>,
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

impl ExecArgs {
    /// The keys and the command, from the operands: what does not split is a usage error.
    pub fn split_operands(&mut self) -> Result<(), String> {
        (self.keys, self.command) = operands::split(&self.operands)?;
        Ok(())
    }

    /// The side of the key's read-write lock that `--shared` or `--exclusive` takes.
    fn side(&self) -> Option<Side> {
        match (self.sharing.shared, self.sharing.exclusive) {
            (true, _) => Some(Side::Read),
            (false, true) => Some(Side::Write),
            (false, false) => None,
        }
    }
}

impl Connects for ExecArgs {
    /// A TTL exec could not keep alive, a minimum hold no lock can have, flags for one key
    /// given several, then the keys and metadata.
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        checks.ttl(self.lock.ttl, self.min_hold)?;
        // Several URLs are Redlock nodes, whose drift allowance shortens the lease.
        checks.keep_alive(self.lock.ttl)?;
        if self.min_hold.is_some_and(|d| d < redmutex::limits::MIN_TTL) {
            return Err(Failure::usage("--min-hold must be at least 1ms"));
        }
        self.lock.check(&self.keys, checks.urls)?;
        if self.side().is_some() && self.keys.len() > 1 {
            return Err(Failure::usage(
                "--shared and --exclusive lock one key's read-write lock, not several keys",
            ));
        }
        checks.keys(&self.keys, self.lock.metadata.as_deref())
    }

    fn wait_redis(&self, wait_redis: Duration) -> Option<Duration> {
        Some(self.lock.wait_redis(wait_redis))
    }

    fn fences(&self) -> Result<bool, Failure> {
        Ok(!(self.no_fences || env_flag("REDMUTEX_NO_FENCES")?))
    }
}

/// Takes the lock (with its fence for REDMUTEX_FENCE, unless fences are off), keeps it
/// alive while the command runs, and ends with the command's status.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: ExecArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let program = args.command[0].to_string_lossy().into_owned();
    let job = Job {
        keys: &args.keys,
        command: &args.command,
        grace: args.grace,
        permits: args.lock.permits(),
        urls: session.urls,
        on_revoke: args.on_revoke,
    };
    let request = Request {
        keys: &args.keys,
        what: &program,
        fenced: locker.fences(),
        min_hold: args.min_hold,
        side: args.side(),
        conflict_exit_code: args.conflict_exit_code,
        session,
    };
    let hold = Hold {
        job: &job,
        program: &program,
    };
    args.lock.take(locker, &request, hold).await
}

/// What exec does with the lock it took: keeps it alive while the command runs.
struct Hold<'a> {
    job: &'a Job<'a>,
    program: &'a str,
}

impl<C: Connection> Then<C> for Hold<'_> {
    async fn with<P: Held>(self, lock: Lock<C, P>) -> Result<u8, Failure> {
        let lease = (lock.keep_alive()).map_err(|e| Failure::from_lock_error(&e, self.job.urls))?;
        job::hold(lease, self.job, self.program).await
    }
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
