//! `redmutex acquire`: take a lock and print its token, leaving the lock in Redis for
//! `refresh` and `release`.

use std::time::Duration;

use clap::Args;
use redmutex::{claim::Held, connection::Connection, Lock, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::exit::{self, Failure};
use crate::lock::{LockArgs, Request, Then};
use crate::output::{self, outln};

#[derive(Args, Debug)]
pub struct AcquireArgs {
    #[command(flatten)]
    lock: LockArgs,

    /// The keys to lock, all or nothing.
    #[arg(value_name = "KEY", required = true, num_args = 1..)]
    keys: Vec<String>,
}

impl Connects for AcquireArgs {
    /// A TTL no lock can have, flags for one key given several, nowhere to put the token,
    /// then the keys and metadata.
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        checks.ttl(self.lock.ttl, None)?;
        self.lock.check(&self.keys, checks.urls)?;
        output::check_stdout_open("the token would be lost, so no lock was taken")?;
        checks.keys(&self.keys, self.lock.metadata.as_deref())
    }

    fn wait_redis(&self, wait_redis: Duration) -> Option<Duration> {
        Some(self.lock.wait_redis(wait_redis))
    }
}

/// Takes the lock, prints its token and leaves it in Redis. If the token cannot be
/// written (a closed pipe), the lock is released again: nobody could release it otherwise.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: AcquireArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let request = Request {
        keys: &args.keys,
        what: "redmutex-acquire",
        fenced: false,
        min_hold: None,
        side: None,
        conflict_exit_code: exit::NOT_OBTAINED,
        session,
    };
    args.lock.take(locker, &request, HandOver).await
}

/// What acquire does with the lock it took: hands its token over.
struct HandOver;

impl<C: Connection> Then<C> for HandOver {
    /// Prints the token of `lock` and leaves it in Redis.
    async fn with<P: Held>(self, lock: Lock<C, P>) -> Result<u8, Failure> {
        let token = lock.token();
        if let Err(mut failure) = outln!("{token}") {
            let released = match lock.release().await {
                Ok(()) => "the lock was released",
                Err(e) if e.is_not_held() => "the lock is gone already",
                Err(_) => "the lock could not be released and expires by its TTL",
            };
            failure.message = format!(
                "cannot hand over the token ({}); {released}",
                failure.message
            );
            return Err(failure);
        }
        let _ = lock.detach();
        Ok(0)
    }
}
