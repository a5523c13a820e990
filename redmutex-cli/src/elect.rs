//! `redmutex elect`: run a command while this process leads an election (how the command
//! is run and stopped: job.rs).

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use redmutex::{connection::Connection, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::exit::{self, Failure};
use crate::job::{self, Job, OnRevoke};
use crate::output::say;
use crate::reach::{self, Outage};
use crate::{duration, metadata, operands};

/// `elect`'s form: one key, then the command (after `--` too).
pub const USAGE: &str = "redmutex elect [OPTIONS] KEY [--] COMMAND [ARGS]...";

#[derive(Args, Debug)]
pub struct ElectArgs {
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
    #[arg(long = "on-revoke", value_name = "SIGNAL", default_value = "TERM", value_parser = job::parse_on_revoke)]
    on_revoke: OnRevoke,

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

    /// The election's key (from the operands, see [`operands::split`]).
    #[arg(skip)]
    key: String,

    /// The command to run while leading, and its arguments (from the operands).
    #[arg(skip)]
    command: Vec<OsString>,
}

impl ElectArgs {
    /// The key and the command, from the operands, as `exec` takes them: what does not
    /// split, or splits into several keys, is a usage error.
    pub fn split_operands(&mut self) -> Result<(), String> {
        let (mut keys, command) = operands::split(&self.operands)?;
        if keys.len() != 1 {
            return Err(format!(
                "one KEY, not {}: an election is one key",
                keys.len()
            ));
        }
        (self.key, self.command) = (keys.remove(0), command);
        Ok(())
    }
}

impl Connects for ElectArgs {
    /// A TTL no leadership could keep alive, then the key and the value.
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        checks.ttl(self.ttl, None)?;
        checks.keep_alive(self.ttl)?;
        checks.keys(std::slice::from_ref(&self.key), self.value.as_deref())
    }
}

/// Campaigns; while leading, runs the command (told its term in `REDMUTEX_FENCE`); stops it
/// when the leadership is lost — and with `--again` campaigns once more, as after stepping
/// down on request (`release --ask`). Ends with the command's status when it exits while
/// leading.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: ElectArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let urls = session.urls;
    let program = args.command[0].to_string_lossy().into_owned();
    let value = args
        .value
        .clone()
        .unwrap_or_else(|| metadata::default_metadata(&program));
    let failed = |e: redmutex::Error| Failure::from_lock_error(&e, urls);
    let election = (locker.election(&args.key))
        .and_then(|e| e.with_ttl(args.ttl))
        .map_err(failed)?;
    let keys = [args.key.clone()];
    let job = Job {
        keys: &keys,
        command: &args.command,
        grace: args.grace,
        permits: None,
        urls,
        on_revoke: args.on_revoke,
    };
    // A campaign ends at once when Redis goes away (it never outlives its connection):
    // through an outage shorter than --wait-redis, this campaigns again.
    let mut outage = Outage::new(session.wait_redis);
    loop {
        let leadership = match election.campaign(value.as_str()).await {
            Ok(leadership) => leadership,
            Err(e) => {
                let transient = e.is_transient();
                outage.failed(failed(e), transient)?;
                tokio::time::sleep(reach::ASK_EVERY).await;
                continue;
            }
        };
        outage.answered();
        say(&format!("leading in term {}", leadership.term()));
        let signal = leadership.signal();
        match job::hold(leadership, &job, &program).await {
            Err(failure) if args.again && failure.code == exit::LOST => {
                say(&format!("{}; campaigning again", failure.message));
            }
            // Asked to step down, and did: still a candidate, after whoever asked.
            Ok(_) if args.again && signal.is_release_requested() => {
                say("stepped down on request; campaigning again");
                let_another_lead(&election, args.ttl).await;
            }
            result => return result,
        }
    }
}

/// After stepping down on request, gives another candidate (the one that asked, most
/// likely) the leadership before this process campaigns again: until someone leads, or
/// for one TTL. (Campaigning at once could win the key back from a candidate that polls.)
async fn let_another_lead<C: Connection>(election: &redmutex::Election<C>, ttl: Duration) {
    let until = tokio::time::Instant::now() + ttl;
    while tokio::time::Instant::now() < until {
        if let Ok(Some(_)) = election.leader().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
