//! How a command that talks to Redis gets there: what it refuses before connecting (a
//! usage error never waits for Redis, and is 64 whether Redis answers or not), the
//! connection — one server, or Redlock's nodes — waited for as long as the command allows,
//! then the command itself, whose failure never echoes the password.

use std::path::Path;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redmutex::{KeepAlive, Locker, QuorumSettings};

use crate::exit::Failure;
use crate::{duration, reach, target};

/// The global flags that say which Redis to use and how (their help is on `Cli`).
pub struct Redis<'a> {
    /// `--redis` as given: the demo runs against these alone, never the environment's.
    pub flags: &'a [String],
    /// The URLs to use (see [`target::urls`]).
    pub urls: Vec<String>,
    pub prefix: &'a str,
    pub tls_ca: Option<&'a Path>,
    pub user: Option<&'a str>,
    pub password: Option<&'a str>,
    pub wait_redis: Duration,
    pub node_timeout: Option<Duration>,
}

/// A command that talks to Redis, as seen before it connects. Each command's file
/// implements it beside its arguments.
pub trait Connects {
    /// Refuses what can be refused before connecting: bad arguments (64), and a closed
    /// stdout (74) where the output is the answer.
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure>;

    /// How long to wait for Redis (or a quorum of nodes) to answer: `--wait-redis`, given
    /// here; `None` for not at all, and no quorum either (doctor reports what answers).
    fn wait_redis(&self, wait_redis: Duration) -> Option<Duration> {
        Some(wait_redis)
    }

    /// Whether the locker takes fences (`exec` may do without). Asked after the checks.
    fn fences(&self) -> Result<bool, Failure> {
        Ok(true)
    }

    /// Told when Redis could not be connected to, before that `failure` ends the command
    /// (doctor prints it as a finding).
    fn unreached(&self, _urls: &[String], _failure: &Failure) -> Result<(), Failure> {
        Ok(())
    }
}

/// What a command's checks before connecting may need: its keys' prefix, and the nodes.
pub struct Checks<'a> {
    pub prefix: &'a str,
    pub urls: &'a [String],
    /// Redlock's settings, for several URLs.
    pub redlock: Option<&'a QuorumSettings>,
}

/// What a command runs with, besides its locker and arguments.
pub struct Session<'a> {
    /// The Redis URLs, to name Redlock nodes by address in messages.
    pub urls: &'a [String],
    /// `--wait-redis`: how long an outage may last before a command that reads on through
    /// outages gives up (69).
    pub wait_redis: Duration,
}

impl Redis<'_> {
    /// Runs a command that talks to Redis: its checks, the connection, then `run` — with
    /// the password hidden in whatever it fails with.
    pub async fn run<A: Connects>(
        &self,
        args: A,
        run: impl AsyncFnOnce(&Locker<ConnectionManager>, A, &Session<'_>) -> Result<u8, Failure>,
    ) -> Result<u8, Failure> {
        let access = self.access()?;
        let result = async {
            let locker = self.connect(&args, &access).await?;
            let session = Session {
                urls: &self.urls,
                wait_redis: self.wait_redis,
            };
            run(&locker, args, &session).await
        };
        // A password given by flag or environment is never echoed either.
        result.await.map_err(|mut failure| {
            if let Some(password) = access.password.as_deref().filter(|p| !p.is_empty()) {
                failure.message = failure.message.replace(password, "***");
            }
            failure
        })
    }

    /// The locker for `args`' command, once its checks pass and Redis (or a quorum of the
    /// nodes) answers.
    async fn connect<A: Connects>(
        &self,
        args: &A,
        access: &target::Access,
    ) -> Result<Locker<ConnectionManager>, Failure> {
        let urls = &self.urls[..];
        let quorum = self.quorum_settings()?;
        let checks = Checks {
            prefix: self.prefix,
            urls,
            redlock: quorum.as_ref(),
        };
        args.check(&checks)?;
        let fences = args.fences()?;
        let wait_redis = args.wait_redis(self.wait_redis);
        let locker = match target::locker(urls, access, wait_redis.unwrap_or_default()).await {
            Ok(locker) => locker,
            Err(failure) => {
                args.unreached(urls, &failure)?;
                return Err(failure);
            }
        };
        let mut locker = locker.with_prefix(self.prefix);
        if let Some(quorum) = quorum {
            // Each command's process ends right after its last request, and `acquire` hands its
            // token out of it: every node must have answered by then, or a release from
            // elsewhere could overtake the acquire on a slow node, and a release's requests to
            // the slower nodes would be left to the exit (QuorumSettings::wait_for_every_node).
            locker = locker.with_quorum_settings(quorum.wait_for_every_node(true));
        }
        // Several nodes are connected lazily: a command that needs them waits (a bounded time,
        // saying so) for a quorum to answer rather than hang or answer what nobody knows.
        if let Some(wait_redis) = wait_redis.filter(|_| urls.len() > 1) {
            reach::quorum_answers(&locker, urls, wait_redis).await?;
        }
        if !fences {
            locker = locker.without_fences();
        }
        Ok(locker)
    }

    /// Redlock's settings (several URLs): the defaults, with `--node-timeout` if given;
    /// `None` for one server, where `--node-timeout` is refused.
    fn quorum_settings(&self) -> Result<Option<QuorumSettings>, Failure> {
        match (self.urls.len() > 1, self.node_timeout) {
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

    /// `--tls-ca`, `--user`, `--password`, each falling back to its environment variable.
    fn access(&self) -> Result<target::Access, Failure> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let tls_ca = match (self.tls_ca.map(Path::to_path_buf))
            .or_else(|| env("REDMUTEX_TLS_CA").map(Into::into))
        {
            Some(path) => Some(std::fs::read(&path).map_err(|e| {
                Failure::usage(format!("cannot read the CA file {}: {e}", path.display()))
            })?),
            None => None,
        };
        Ok(target::Access {
            tls_ca,
            user: (self.user.map(str::to_owned)).or_else(|| env("REDMUTEX_USER")),
            password: (self.password.map(str::to_owned)).or_else(|| env("REDMUTEX_PASSWORD")),
        })
    }
}

impl Checks<'_> {
    /// A TTL (and a minimum hold) beyond what a lock can hold, [`redmutex::limits::MAX_TTL`], or
    /// below [`redmutex::limits::MIN_TTL`]: refused as the library would refuse it once connected.
    pub fn ttl(&self, ttl: Duration, min_hold: Option<Duration>) -> Result<(), Failure> {
        let too_long = |what: &str, d: Duration| {
            Failure::usage(format!(
                "{what} {} is longer than the longest a lock can be held ({} ms)",
                duration::format(d),
                redmutex::limits::MAX_TTL.as_millis()
            ))
        };
        if ttl > redmutex::limits::MAX_TTL {
            return Err(too_long("--ttl", ttl));
        }
        if ttl < redmutex::limits::MIN_TTL {
            return Err(Failure::usage(format!(
                "--ttl {} is below the minimum of 1ms",
                duration::format(ttl)
            )));
        }
        match min_hold {
            Some(hold) if hold > redmutex::limits::MAX_TTL => Err(too_long("--min-hold", hold)),
            _ => Ok(()),
        }
    }

    /// A TTL too short for a lease to keep alive, with Redlock's drift allowance where
    /// there are several nodes (it shortens the lease).
    pub fn keep_alive(&self, ttl: Duration) -> Result<(), Failure> {
        KeepAlive::new()
            .check(ttl, self.redlock)
            .map_err(|e| Failure::usage(e.to_string()))
    }

    /// Bad keys (empty, oversized, duplicate, named like a fence counter) and oversized
    /// metadata: the library's own checks, which it makes again, but only once the server
    /// has been reached.
    pub fn keys(&self, keys: &[String], metadata: Option<&str>) -> Result<(), Failure> {
        let usage = |e: redmutex::Error| Failure::usage(e.to_string());
        redmutex::limits::check_keys(self.prefix, keys).map_err(usage)?;
        metadata.map_or(Ok(()), |m| {
            redmutex::limits::check_metadata(m).map_err(usage)
        })
    }
}
