//! `redmutex watch`: a line whenever a key's holder changes, until interrupted.

use std::time::{Duration, SystemTime};

use clap::Args;
use redmutex::{connection::Connection, state::ListedLock, state::LockKind, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::describe::{self, printable};
use crate::exit::Failure;
use crate::output::{self, outln};
use crate::reach::Outage;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The key to watch.
    #[arg(value_name = "KEY")]
    key: String,

    /// One JSON object per change: time, key, held, and the lock as `list --json` shows it.
    #[arg(long)]
    json: bool,
}

impl Connects for WatchArgs {
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        output::check_stdout_open(output::ANSWER_LOST)?;
        checks.keys(std::slice::from_ref(&self.key), None)
    }
}

/// Prints a line whenever the key's holder changes (taken, released, another holder, a
/// new fence), until interrupted: polled every 100 ms, and woken at once by a release.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: WatchArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let failed = |e: &redmutex::Error| Failure::from_lock_error(e, session.urls);
    let mut last: Option<Option<Holding>> = None;
    let mut outage = Outage::new(session.wait_redis);
    loop {
        let now = match locker.describe(&args.key).await {
            Ok(now) => now,
            Err(e) => {
                // Nothing is printed of a state nobody can read; the watch goes on for
                // at most --wait-redis of failures.
                outage.failed(failed(&e), e.is_transient())?;
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        outage.answered();
        let holding = now.as_ref().map(Holding::of);
        if last.as_ref() != Some(&holding) {
            outln!(
                "{}",
                watch_line(&args, &describe::stored(locker, &args.key), now.as_ref())
            )?;
            last = Some(holding);
        }
        match now {
            // A release wakes this at once; a new holder is seen within the poll.
            Some(_) => {
                let _ = locker.wait_released(&args.key, POLL).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            None => tokio::time::sleep(POLL).await,
        }
    }
}

/// How often `watch` looks.
const POLL: Duration = Duration::from_millis(100);

/// What tells one holding from the next (not the TTL, which runs down).
#[derive(Debug, PartialEq)]
struct Holding {
    kind: LockKind,
    /// Holders turned tombstones by a forced release.
    forced: u32,
    holders: Vec<Option<String>>,
    holder_count: u32,
    fence: Option<u64>,
}

impl Holding {
    fn of(lock: &ListedLock) -> Holding {
        // Holders come soonest-to-expire first: a renewal reorders them, and is no change.
        let mut holders: Vec<Option<String>> =
            lock.holders.iter().map(|h| h.metadata.clone()).collect();
        holders.sort();
        Holding {
            kind: lock.kind,
            forced: lock.forced,
            holders,
            holder_count: lock.holder_count,
            fence: lock.fence,
        }
    }
}

fn watch_line(args: &WatchArgs, stored_key: &str, lock: Option<&ListedLock>) -> String {
    let time = describe::utc(SystemTime::now());
    let key = printable(stored_key);
    match (args.json, lock) {
        (true, Some(lock)) => format!(
            "{{\"time\":\"{time}\",\"key\":{},\"held\":true,\"lock\":{}}}",
            describe::json_string(stored_key),
            describe::json(lock)
        ),
        (true, None) => format!(
            "{{\"time\":\"{time}\",\"key\":{},\"held\":false,\"lock\":null}}",
            describe::json_string(stored_key)
        ),
        (false, Some(lock)) => format!("{time} {key} {}", describe::holding(lock)),
        (false, None) => format!("{time} {key} free"),
    }
}
