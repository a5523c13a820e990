//! How `exec` and `acquire` take a lock: the flags they share, and the one acquire both
//! build from them — of the keys, in line (`--fair`), of permits (`--limit`), or of a side
//! of a read-write lock (`exec --shared` / `--exclusive`) —, waited for as the flags say.

use std::future::IntoFuture;
use std::time::Duration;

use clap::Args;
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{claim::Held, connection::Connection, limits::MAX_PERMITS, Acquire, Lock, Locker};

use crate::connect::Session;
use crate::exit::Failure;
use crate::{duration, metadata, reach, redact, waiting};

/// How to take the lock: shared by `exec` and `acquire`.
#[derive(Args, Debug)]
pub struct LockArgs {
    /// Time to live of the lock (exec renews it every third of this while the command runs).
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
    pub ttl: Duration,

    /// Wait at most this long for a busy lock (default: wait forever); `--timeout` is the
    /// same, as in flock.
    #[arg(short = 'w', long, visible_alias = "timeout", value_name = "DUR", value_parser = duration::parse, conflicts_with = "nonblock")]
    wait: Option<Duration>,

    /// Try once; fail at once if the lock is held.
    #[arg(short = 'n', long)]
    nonblock: bool,

    /// Text stored with the lock for `inspect` (default: host, pid and command).
    #[arg(long, value_name = "TEXT")]
    pub metadata: Option<String>,

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
}

/// A side of a key's read-write lock (`exec --shared` / `--exclusive`).
#[derive(Clone, Copy, Debug)]
pub enum Side {
    Read,
    Write,
}

/// What a command asks of [`LockArgs::take`] besides the flags.
pub struct Request<'a> {
    /// The keys to lock, all or nothing (one key for `--fair`, `--limit` and a side).
    pub keys: &'a [String],
    /// Who takes it, for the default metadata: the command run, or `redmutex-acquire`.
    pub what: &'a str,
    /// Whether to take the lock's fence with it.
    pub fenced: bool,
    /// `exec --min-hold`.
    pub min_hold: Option<Duration>,
    /// A side of the key's read-write lock, rather than a lock of the keys.
    pub side: Option<Side>,
    /// The exit code when the lock is not obtained (`exec -E`; otherwise 75).
    pub conflict_exit_code: u8,
    /// The URLs, to name Redlock nodes in messages, and `--wait-redis`.
    pub session: &'a Session<'a>,
}

/// What a command does with the lock it took. Each primitive's lock is a type of its own
/// (`Lock<C, P>`); what `exec` and `acquire` do with it is the same for every one.
pub trait Then<C: Connection> {
    /// Does it; the command's exit code.
    async fn with<P: Held>(self, lock: Lock<C, P>) -> Result<u8, Failure>;
}

impl LockArgs {
    /// `--fair` and `--limit` lock one key (`--limit` counts its permits, and `--permits`
    /// takes no more than there are), on one server or a cluster: refused before
    /// connecting.
    pub fn check(&self, keys: &[String], urls: &[String]) -> Result<(), Failure> {
        if self.fair && keys.len() > 1 {
            return Err(Failure::usage("--fair locks one key, not several"));
        }
        if self.fair && urls.len() > 1 {
            return Err(Failure::usage(
                "--fair needs one server or a cluster: the nodes of a Redlock quorum would \
                 each keep their own line, in their own order",
            ));
        }
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

    /// How long to wait for Redis: a command given a whole time to wait (`--wait`) waits
    /// for Redis no longer than that either.
    pub fn wait_redis(&self, wait_redis: Duration) -> Duration {
        self.wait.map_or(wait_redis, |w| w.min(wait_redis))
    }

    /// `--limit` and the permits taken of it (`--permits`, default 1).
    pub fn permits(&self) -> Option<(u32, u32)> {
        (self.limit).map(|limit| (limit, self.permits.unwrap_or(1)))
    }

    /// Takes the lock the flags ask for, waiting as they say, and hands it to `then`. Not
    /// obtained is `request`'s conflict exit code; Redis unreachable for longer than the
    /// command waits for it, 69.
    pub async fn take<C: Connection>(
        &self,
        locker: &Locker<C>,
        request: &Request<'_>,
        then: impl Then<C>,
    ) -> Result<u8, Failure> {
        let failed = |e: redmutex::Error| Failure::from_lock_error(&e, request.session.urls);
        let (key, ttl) = (request.keys.first().map_or("", String::as_str), self.ttl);
        match (self.fair, self.permits(), request.side) {
            (true, _, _) => {
                let fair = locker.fair_lock(key).map_err(failed)?;
                self.wait(locker, fair.acquire(ttl), request, then).await
            }
            (false, Some((limit, permits)), _) => {
                let semaphore = locker.semaphore(key, limit).map_err(failed)?;
                self.wait(locker, semaphore.acquire(permits, ttl), request, then)
                    .await
            }
            (false, None, Some(side)) => {
                let rw = locker.rw_lock(key).map_err(failed)?;
                match side {
                    Side::Read => self.wait(locker, rw.read(ttl), request, then).await,
                    Side::Write => self.wait(locker, rw.write(ttl), request, then).await,
                }
            }
            (false, None, None) => {
                let acquire = locker.acquire_all(request.keys, ttl);
                self.wait(locker, acquire, request, then).await
            }
        }
    }

    /// Configures `acquire` as the flags say, awaits it — showing the waiting line on a
    /// terminal, and giving up when Redis stays unreachable — and hands the lock to `then`.
    async fn wait<C: Connection, P: Held>(
        &self,
        locker: &Locker<C>,
        acquire: Acquire<'_, C, P>,
        request: &Request<'_>,
        then: impl Then<C>,
    ) -> Result<u8, Failure> {
        let urls = request.session.urls;
        let progress = waiting::Progress::for_terminal(self.quiet, self.nonblock);
        let reach = reach::Reach::new(self.wait_redis(request.session.wait_redis));
        let acquire = self.configure(acquire, request, progress.clone(), reach.clone());
        let first = &request.keys[0];
        let waited = waiting::show(locker, progress.as_ref(), first, acquire.into_future());
        match reach::bounded(&reach, urls, waited).await? {
            Ok(lock) => then.with(lock).await,
            Err(e) if e.is_not_obtained() => {
                let message = redact::name_nodes(&e.to_string(), urls);
                Err(Failure::new(request.conflict_exit_code, message))
            }
            Err(e) => Err(Failure::from_lock_error(&e, urls)),
        }
    }

    /// The acquire, with the waiting policy the flags ask for: one try (`-n`), up to
    /// `--wait`, or forever. Waiters are woken by the holder's release (the locker has
    /// wake-up on); they also poll, for a holder that dies without releasing, backing off
    /// exponentially from 10 ms to 1 s with jitter so that many waiting scripts do not
    /// poll in step. Each failed try is told to the waiting line and to `reach`.
    fn configure<'a, C: Connection, P: Held>(
        &self,
        acquire: Acquire<'a, C, P>,
        request: &Request<'_>,
        progress: Option<waiting::Progress>,
        reach: reach::Reach,
    ) -> Acquire<'a, C, P> {
        let metadata =
            (self.metadata.clone()).unwrap_or_else(|| metadata::default_metadata(request.what));
        let mut acquire = acquire.metadata(metadata);
        if request.fenced {
            acquire = acquire.with_fence();
        }
        if let Some(min_hold) = request.min_hold {
            acquire = acquire.min_hold(min_hold);
        }
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
