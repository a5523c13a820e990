//! `redmutex release`: a lock taken with `acquire`, by its token; or, with `--force`, from
//! whoever holds it (with an audit line); or, with `--ask`, a request that its holders let
//! it go.

use std::io::Write;
use std::time::SystemTime;

use clap::Args;
use redmutex::{connection::Connection, state::ListedLock, state::LockKind, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::describe::{self, printable};
use crate::exit::{self, Failure};
use crate::output::{self, outln};
use crate::{metadata, token};

#[derive(Args, Debug)]
pub struct ReleaseArgs {
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

impl Connects for ReleaseArgs {
    /// `--force` and `--ask` say what they did on stdout: refused with it closed.
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        if self.force || self.ask {
            output::check_stdout_open(output::ANSWER_LOST)?;
        }
        checks.keys(&self.keys, None)
    }
}

/// Releases by the token: 0, or 1 when the token holds nothing there; `--ask` and
/// `--force` act on whoever holds the keys.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: ReleaseArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let (keys, urls) = (&args.keys, session.urls);
    if args.ask {
        return ask_release(locker, keys, urls).await;
    }
    let Some(token) = args.token.as_deref() else {
        // (clap requires a token without --force or --ask.)
        return force_release(locker, keys, args.now, urls).await;
    };
    let token = token::parse(token)?;
    token::on_lock_or_permits(
        locker,
        keys,
        urls,
        async || locker.release_with_token(keys, &token).await,
        async |semaphore| semaphore.release_with_token(&token).await,
    )
    .await
}

/// `release --force`: takes each lock from whoever holds it, says what it took on stdout,
/// and leaves an audit line on stderr. Exit 1 when a key held nothing (or held data
/// redmutex did not write, which it leaves alone).
async fn force_release<C: Connection>(
    locker: &Locker<C>,
    keys: &[String],
    now: bool,
    urls: &[String],
) -> Result<u8, Failure> {
    let mut missed = Vec::new();
    for key in keys {
        let was = match now {
            true => locker.force_release_now(key).await,
            false => locker.force_release(key).await,
        };
        let was = was.map_err(|e| Failure::from_lock_error(&e, urls))?;
        let shown = printable(&describe::stored(locker, key));
        match was {
            Some(lock) if lock.kind != LockKind::Foreign && lock.forced > 0 && !now => {
                outln!(
                    "{shown} was released by force already: {}.",
                    describe::holding(&lock)
                )?;
            }
            Some(lock) if lock.kind != LockKind::Foreign => {
                let after = match now {
                    true => {
                        "The holder is not told: it finds out at its next renewal or \
                             refresh, and may work on until then while another holds it."
                    }
                    false => {
                        "Nobody else gets it until its ttl ends; the holder finds out \
                              at its next renewal or refresh."
                    }
                };
                let nodes = urls.len();
                let minority = match nodes > 1 && lock.nodes <= nodes / 2 {
                    true => format!(
                        " It was on {} of {nodes} nodes only: a minority, which no holder can \
                         count as a lock (a failed try's leftover, or a holder that lost it).",
                        lock.nodes
                    ),
                    false => String::new(),
                };
                outln!(
                    "released {shown}: {}. {after}{minority}",
                    describe::holding(&lock)
                )
                .map_err(|failure| {
                    Failure::new(
                        failure.code,
                        format!("released {shown} by force, but {}", failure.message),
                    )
                })?;
                let _ = writeln!(
                    std::io::stderr(),
                    "{}",
                    audit(&describe::stored(locker, key), &lock, now)
                );
            }
            Some(_) => missed.push(format!(
                "{shown} holds data redmutex did not write; left alone"
            )),
            None => missed.push(format!("{shown} was not held")),
        }
    }
    match missed.is_empty() {
        true => Ok(0),
        false => Err(Failure::new(exit::NOT_HELD, missed.join("; "))),
    }
}

/// `release --ask`: asks each key's holders to let it go; says who was asked. Exit 1 (as
/// for a release of a lock not held) when some key had nobody to ask.
async fn ask_release<C: Connection>(
    locker: &Locker<C>,
    keys: &[String],
    urls: &[String],
) -> Result<u8, Failure> {
    let mut missed = Vec::new();
    for key in keys {
        let held =
            (locker.request_release(key).await).map_err(|e| Failure::from_lock_error(&e, urls))?;
        let shown = printable(&describe::stored(locker, key));
        match held {
            Some(lock) if lock.kind == LockKind::Foreign => missed.push(format!(
                "{shown} holds data redmutex did not write; nobody to ask"
            )),
            Some(lock) if lock.forced > 0 => missed.push(format!(
                "{shown} was released by force already; nobody to ask"
            )),
            Some(lock) => outln!("{}", asked_line(&shown, &lock)).map_err(|failure| {
                Failure::new(
                    failure.code,
                    format!("asked to let {shown} go, but {}", failure.message),
                )
            })?,
            None => missed.push(format!("{shown} was not held")),
        }
    }
    match missed.is_empty() {
        true => Ok(0),
        false => Err(Failure::new(exit::NOT_HELD, missed.join("; "))),
    }
}

/// What `release --ask` says it did: whom it asked (one holder, or every holder of a
/// semaphore or a read-write lock's readers) and what they do with the request.
fn asked_line(shown: &str, lock: &ListedLock) -> String {
    let holding = describe::holding(lock);
    match lock.holder_count {
        0 | 1 => format!(
            "asked to let {shown} go: {holding}. Its holder hears the request at once, or at its \
             next renewal, and keeps the lock until it releases it."
        ),
        n => format!(
            "asked all {n} holders to let {shown} go: {holding}. Each hears the request at once, or \
             at its next renewal, and keeps its share until it releases it."
        ),
    }
}

/// The audit line of a forced release: what was taken from whom, by whom, when.
fn audit(key: &str, lock: &ListedLock, now: bool) -> String {
    let holders: Vec<String> = (lock.holders.iter())
        .map(|h| describe::json_string(h.metadata.as_deref().unwrap_or("")))
        .collect();
    let user = std::env::var("USER").unwrap_or_else(|_| "?".to_owned());
    let host = metadata::hostname();
    format!(
        "redmutex: audit: {} forced release{} of {} ({}, fence {}, holders [{}]) by user={} host={} pid={}",
        describe::utc(SystemTime::now()),
        if now { " at once" } else { "" },
        describe::json_string(key),
        lock.kind.name(),
        lock.fence.map_or("none".to_owned(), |f| f.to_string()),
        holders.join(", "),
        printable(&user),
        printable(&host),
        std::process::id(),
    )
}
