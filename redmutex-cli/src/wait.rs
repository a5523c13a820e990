//! `redmutex wait`: wait until a key is free, without taking it.

use std::time::Duration;

use clap::Args;
use redmutex::{connection::Connection, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::describe::printable;
use crate::exit::{self, Failure};
use crate::{duration, reach};

#[derive(Args, Debug)]
pub struct WaitArgs {
    /// The key to wait for.
    #[arg(value_name = "KEY")]
    key: String,

    /// Give up after this long (exit 75); default: wait as long as it takes. `--timeout`
    /// is the same.
    #[arg(short = 'w', long = "wait", visible_alias = "timeout", value_name = "DUR", value_parser = duration::parse)]
    timeout: Option<Duration>,
}

impl Connects for WaitArgs {
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        checks.keys(std::slice::from_ref(&self.key), None)
    }

    /// Given a whole time to wait (`--timeout`), it waits for Redis no longer than that
    /// either.
    fn wait_redis(&self, wait_redis: Duration) -> Option<Duration> {
        Some(self.timeout.map_or(wait_redis, |t| t.min(wait_redis)))
    }
}

/// Waits until the key is free without taking it: 0 once free, 75 when the timeout passed
/// first (the holder keeps it), the usual codes for Redis trouble.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: WaitArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let (urls, wait_redis) = (session.urls, session.wait_redis);
    let timeout = args.timeout.unwrap_or(Duration::MAX);
    let until = tokio::time::Instant::now().checked_add(timeout);
    let mut outage = reach::Outage::new(wait_redis);
    // In spans of at most --wait-redis: a Redis (or a quorum) that stops answering
    // mid-wait ends the span with that error; the wait goes on through an outage shorter
    // than --wait-redis (said on stderr), and ends with 69 after a longer one.
    loop {
        let left = until.map_or(Duration::MAX, |u| {
            u.saturating_duration_since(tokio::time::Instant::now())
        });
        let span = left.min(wait_redis);
        let waited = locker.wait_released(&args.key, span).await;
        if waited.is_ok() {
            outage.answered();
        }
        match waited {
            Ok(true) => return Ok(0),
            Ok(false) if span < left => continue,
            Err(e) if !left.is_zero() => {
                outage.failed(Failure::from_lock_error(&e, urls), e.is_transient())?;
                let pause = reach::ASK_EVERY.min(left);
                tokio::time::sleep(pause).await;
                continue;
            }
            Ok(false) => {
                return Err(Failure::new(
                    exit::NOT_OBTAINED,
                    format!(
                        "{}: still held after {}",
                        printable(&args.key),
                        duration::format(timeout)
                    ),
                ))
            }
            Err(e) => return Err(Failure::from_lock_error(&e, urls)),
        }
    }
}
