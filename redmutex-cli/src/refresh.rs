//! `redmutex refresh`: a new TTL for a lock (or permits) taken with `acquire`, by its token.

use std::time::Duration;

use clap::Args;
use redmutex::{connection::Connection, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::exit::Failure;
use crate::{duration, token};

#[derive(Args, Debug)]
pub struct RefreshArgs {
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

impl Connects for RefreshArgs {
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        checks.ttl(self.ttl, None)?;
        checks.keys(&self.keys, None)
    }
}

/// Sets the new TTL: 0, or 1 when the token holds nothing there.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: RefreshArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let (keys, ttl) = (&args.keys, args.ttl);
    let token = token::parse(&args.token)?;
    token::on_lock_or_permits(
        locker,
        keys,
        session.urls,
        async || locker.refresh_with_token(keys, &token, ttl).await,
        async |semaphore| semaphore.refresh_with_token(&token, ttl).await,
    )
    .await
}
