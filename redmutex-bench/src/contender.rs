//! The three implementations a run compares, behind one small interface: the raw redis-rs
//! baseline, redmutex, and the peer (rslock).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::Script;
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::Locker;

/// The TTL of every lock in the throughput workloads: long enough never to expire.
pub const TTL: Duration = Duration::from_secs(10);

/// How the baseline's waiters poll a busy lock: exponential backoff with full jitter, what
/// a careful hand-written lock does.
pub fn polling() -> impl Iterator<Item = Duration> + Send {
    retry::exponential(Duration::from_millis(1), Duration::from_millis(50)).jitter(Jitter::full())
}

/// The polling workload's pause between tries: uniform in [0, 10 ms), as rslock draws it.
pub const POLL: Duration = Duration::from_millis(10);

/// How redmutex's waiters wait: woken by the release (the locker has wake-up on), polling
/// once a second only as the fallback for a release nobody announces.
pub fn woken() -> impl Iterator<Item = Duration> + Send {
    retry::constant(Duration::from_secs(1))
}

/// The same compare-and-delete every Redis lock uses, by SHA.
const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

pub enum Contender {
    /// `SET key token NX PX ttl` then `EVALSHA` compare-and-delete, nothing else: what any
    /// lock has to send. On N nodes, sent to all in parallel. The token is the cheapest one
    /// unique across processes, as Redisson's is (an id drawn once per process, then a
    /// counter): a bare counter would repeat in every other process.
    Baseline {
        nodes: Vec<MultiplexedConnection>,
        release: Script,
        process: String,
        next_token: AtomicU64,
    },
    /// redmutex; `name` tells its variant apart: `redmutex` as a locker comes, no fence
    /// read (the same work as the baseline), `fenced` taking each lock's fence with its
    /// keys ([`redmutex::Acquire::with_fence`]), `woken` (polling row) with wake-up.
    Redmutex {
        locker: Locker<MultiplexedConnection>,
        name: &'static str,
        fenced: bool,
    },
    Rslock(rslock::LockManager),
    /// redmutex's fair lock ([`Locker::fair_lock`]), with wake-up.
    Fair(Locker<MultiplexedConnection>),
    /// redmutex's read-write lock ([`Locker::rw_lock`]), with wake-up: where a workload
    /// tells reads from writes, reads share; elsewhere every access is a write.
    Rw(Locker<MultiplexedConnection>),
    /// redmutex's semaphore ([`Locker::semaphore`]), with wake-up: in the permits workload
    /// (elsewhere, a semaphore of one permit).
    Semaphore(Locker<MultiplexedConnection>),
    /// redmutex's leader election ([`Locker::election`]), with wake-up: a lock is a
    /// leadership (campaign, resign).
    Election(Locker<MultiplexedConnection>),
}

/// A lock held by one of the contenders.
pub enum Held {
    Baseline(String),
    Redmutex(redmutex::Lock<MultiplexedConnection>),
    Rslock(rslock::Lock),
    Fair(redmutex::FairGuard<MultiplexedConnection>),
    Read(redmutex::ReadGuard<MultiplexedConnection>),
    Write(redmutex::WriteGuard<MultiplexedConnection>),
    Permit(redmutex::Permit<MultiplexedConnection>),
    Leadership(redmutex::Leadership<MultiplexedConnection>),
    /// A lock on one of several slot keys (the slot's number, and the lock).
    Slot(usize, Box<Held>),
}

/// 16 random bytes in hex, drawn once: the baseline's id of this process.
fn process_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .expect("/dev/urandom is readable");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Contender {
    pub fn baseline(nodes: Vec<MultiplexedConnection>) -> Contender {
        Contender::Baseline {
            nodes,
            release: Script::new(RELEASE),
            process: process_id(),
            next_token: AtomicU64::new(0),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Contender::Baseline { .. } => "baseline",
            Contender::Redmutex { name, .. } => name,
            Contender::Rslock(_) => "rslock",
            Contender::Fair(_) => "fair",
            Contender::Rw(_) => "rwlock",
            Contender::Semaphore(_) => "semaphore",
            Contender::Election(_) => "election",
        }
    }

    /// One try; `None` when the lock is busy.
    pub async fn try_acquire(&self, key: &str) -> Result<Option<Held>, String> {
        match self {
            Contender::Baseline {
                nodes,
                process,
                next_token,
                ..
            } => {
                let n = next_token.fetch_add(1, Ordering::Relaxed);
                let token = format!("{process}:{n}");
                let replies = join_all(nodes.iter().map(|conn| {
                    let mut conn = conn.clone();
                    let (key, token) = (key, &token);
                    async move {
                        redis::cmd("SET")
                            .arg(key)
                            .arg(token)
                            .arg("NX")
                            .arg("PX")
                            .arg(TTL.as_millis() as u64)
                            .query_async::<Option<String>>(&mut conn)
                            .await
                    }
                }))
                .await;
                let mut agreed = 0;
                for reply in replies {
                    if reply.map_err(|e| e.to_string())?.is_some() {
                        agreed += 1;
                    }
                }
                if agreed > nodes.len() / 2 {
                    Ok(Some(Held::Baseline(token)))
                } else {
                    if agreed > 0 {
                        self.release(key, Held::Baseline(token)).await?;
                    }
                    Ok(None)
                }
            }
            Contender::Redmutex { .. } => match self.redmutex_acquire(key).await {
                Ok(lock) => Ok(Some(Held::Redmutex(lock))),
                Err(e) if e.is_not_obtained() => Ok(None),
                Err(e) => Err(e.to_string()),
            },
            Contender::Rslock(manager) => match manager.lock(key, TTL).await {
                Ok(lock) => Ok(Some(Held::Rslock(lock))),
                Err(rslock::LockError::Unavailable) => Ok(None),
                Err(e) => Err(format!("{e:?}")),
            },
            Contender::Fair(locker) => {
                let fair = locker.fair_lock(key).map_err(|e| e.to_string())?;
                match fair.acquire(TTL).await {
                    Ok(guard) => Ok(Some(Held::Fair(guard))),
                    Err(e) if e.is_not_obtained() => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            }
            Contender::Rw(locker) => {
                let rw = locker.rw_lock(key).map_err(|e| e.to_string())?;
                match rw.write(TTL).await {
                    Ok(guard) => Ok(Some(Held::Write(guard))),
                    Err(e) if e.is_not_obtained() => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            }
            Contender::Semaphore(locker) => {
                let semaphore = locker.semaphore(key, 1).map_err(|e| e.to_string())?;
                match semaphore.acquire(1, TTL).await {
                    Ok(permit) => Ok(Some(Held::Permit(permit))),
                    Err(e) if e.is_not_obtained() => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            }
            Contender::Election(locker) => {
                // A campaign waits until it leads: "one try" is a look at the leader.
                let election = locker.election(key).map_err(|e| e.to_string())?;
                match election.leader().await.map_err(|e| e.to_string())? {
                    Some(_) => Ok(None),
                    None => Box::pin(self.acquire_waiting(key)).await.map(Some),
                }
            }
        }
    }

    /// Waits for one of `limit` permits of `key`: the semaphore's own wait (woken by a
    /// release); the others have only locks, and do what people write by hand — try slot
    /// keys `key:0` … in turn, then pause as their polling does (the baseline per
    /// [`polling`], rslock its random 0–10 ms), and again.
    pub async fn acquire_permit(&self, key: &str, limit: u32) -> Result<Held, String> {
        if let Contender::Semaphore(locker) = self {
            let semaphore = locker.semaphore(key, limit).map_err(|e| e.to_string())?;
            let waiting = semaphore.acquire(1, TTL).retry(woken());
            let permit = waiting.deadline(Duration::MAX).await;
            return permit.map(Held::Permit).map_err(|e| e.to_string());
        }
        let mut pauses = polling();
        loop {
            for slot in 0..limit as usize {
                if let Some(held) = self.try_acquire(&format!("{key}:{slot}")).await? {
                    return Ok(Held::Slot(slot, Box::new(held)));
                }
            }
            let pause = match self {
                Contender::Rslock(_) => POLL.mul_f64(rand_unit()),
                _ => pauses.next().unwrap_or(POLL),
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Waits for `key` to read (`write` false) or to write, as [`acquire_waiting`] does:
    /// the read-write lock shares reads; every other implementation has only exclusive
    /// locks, so a read is a write to them.
    ///
    /// [`acquire_waiting`]: Contender::acquire_waiting
    pub async fn acquire_to(&self, key: &str, write: bool) -> Result<Held, String> {
        match self {
            Contender::Rw(locker) => rw_waiting(locker, key, write).await,
            _ => self.acquire_waiting(key).await,
        }
    }

    /// Waits for a busy lock as each implementation does best: redmutex is woken by the
    /// release ([`woken`]), the baseline backs off per [`polling`], rslock retries with its
    /// own random delays.
    pub async fn acquire_waiting(&self, key: &str) -> Result<Held, String> {
        match self {
            Contender::Redmutex { .. } => self
                .redmutex_acquire(key)
                .retry(woken())
                .deadline(Duration::MAX)
                .await
                .map(Held::Redmutex)
                .map_err(|e| e.to_string()),
            Contender::Rslock(manager) => manager
                .acquire_no_guard(key, TTL)
                .await
                .map(Held::Rslock)
                .map_err(|e| format!("{e:?}")),
            Contender::Baseline { .. } => self.baseline_polling(key, polling()).await,
            Contender::Fair(locker) => (locker.fair_lock(key).map_err(|e| e.to_string())?)
                .acquire(TTL)
                .retry(woken())
                .deadline(Duration::MAX)
                .await
                .map(Held::Fair)
                .map_err(|e| e.to_string()),
            Contender::Rw(locker) => rw_waiting(locker, key, true).await,
            Contender::Semaphore(_) => self.acquire_permit(key, 1).await,
            Contender::Election(locker) => {
                let election = (locker.election(key))
                    .and_then(|e| e.with_ttl(TTL))
                    .map_err(|e| e.to_string())?;
                let leadership = election.campaign("bench").await;
                leadership.map(Held::Leadership).map_err(|e| e.to_string())
            }
        }
    }

    /// Waits until `key` is free without taking it: redmutex with
    /// [`Locker::wait_released`] (woken by the release); the baseline polls `EXISTS` with
    /// its backoff; rslock, which has no such call, takes the lock with its own retries and
    /// gives it back at once.
    pub async fn wait_free(&self, key: &str) -> Result<(), String> {
        match self {
            Contender::Redmutex { locker, .. } => {
                let free = locker.wait_released(key, Duration::MAX).await;
                free.map(|_| ()).map_err(|e| e.to_string())
            }
            Contender::Rslock(manager) => loop {
                match manager.lock(key, TTL).await {
                    Ok(lock) => {
                        manager.unlock(&lock).await;
                        return Ok(());
                    }
                    Err(rslock::LockError::Unavailable) => continue,
                    Err(e) => return Err(format!("{e:?}")),
                }
            },
            Contender::Baseline { nodes, .. } => {
                let mut conn = nodes[0].clone();
                let mut pauses = polling();
                loop {
                    let exists: i64 = (redis::cmd("EXISTS").arg(key))
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                    if exists == 0 {
                        return Ok(());
                    }
                    tokio::time::sleep(pauses.next().unwrap_or(POLL)).await;
                }
            }
            _ => Err(format!("{} has no wait for a free key", self.name())),
        }
    }

    /// The baseline's wait: a plain try, then the next of `pauses` (the last one again
    /// once they run out), until a try takes the lock.
    async fn baseline_polling(
        &self,
        key: &str,
        mut pauses: impl Iterator<Item = Duration>,
    ) -> Result<Held, String> {
        let mut last = Duration::ZERO;
        loop {
            if let Some(held) = self.try_acquire(key).await? {
                return Ok(held);
            }
            last = pauses.next().unwrap_or(last);
            tokio::time::sleep(last).await;
        }
    }

    /// redmutex's acquire of `key`, fenced for the `fenced` variant.
    fn redmutex_acquire<'a>(&self, key: &str) -> redmutex::Acquire<'a, MultiplexedConnection> {
        let Contender::Redmutex { locker, fenced, .. } = self else {
            unreachable!("only called for redmutex");
        };
        match fenced {
            true => locker.acquire(key, TTL).with_fence(),
            false => locker.acquire(key, TTL),
        }
    }

    /// Waits for a busy lock by polling alone, every pause drawn uniformly from
    /// [0, [`POLL`]): redmutex with `constant(POLL).jitter(Jitter::full())` (its pauses
    /// only the fallback for the `woken` variant, whose locker has wake-up), rslock with
    /// its own retry loop (built with
    /// `set_retry(u32::MAX, POLL)`), the baseline with the same pauses between plain tries.
    pub async fn acquire_polling(&self, key: &str) -> Result<Held, String> {
        let pauses = || retry::constant(POLL).jitter(Jitter::full());
        match self {
            Contender::Redmutex { .. } => self
                .redmutex_acquire(key)
                .retry(pauses())
                .deadline(Duration::MAX)
                .await
                .map(Held::Redmutex)
                .map_err(|e| e.to_string()),
            Contender::Rslock(manager) => manager
                .lock(key, TTL)
                .await
                .map(Held::Rslock)
                .map_err(|e| format!("{e:?}")),
            Contender::Baseline { .. } => self.baseline_polling(key, pauses()).await,
            Contender::Fair(locker) => (locker.fair_lock(key).map_err(|e| e.to_string())?)
                .acquire(TTL)
                .retry(pauses())
                .deadline(Duration::MAX)
                .await
                .map(Held::Fair)
                .map_err(|e| e.to_string()),
            Contender::Rw(locker) => (locker.rw_lock(key).map_err(|e| e.to_string())?)
                .write(TTL)
                .retry(pauses())
                .deadline(Duration::MAX)
                .await
                .map(Held::Write)
                .map_err(|e| e.to_string()),
            Contender::Semaphore(locker) => {
                (locker.semaphore(key, 1).map_err(|e| e.to_string())?)
                    .acquire(1, TTL)
                    .retry(pauses())
                    .deadline(Duration::MAX)
                    .await
                    .map(Held::Permit)
                    .map_err(|e| e.to_string())
            }
            Contender::Election(_) => Box::pin(self.acquire_waiting(key)).await,
        }
    }

    pub async fn release(&self, key: &str, held: Held) -> Result<(), String> {
        match (self, held) {
            (_, Held::Slot(slot, held)) => {
                Box::pin(self.release(&format!("{key}:{slot}"), *held)).await
            }
            (Contender::Semaphore(_), Held::Permit(permit)) => {
                permit.release().await.map_err(|e| e.to_string())
            }
            (Contender::Election(_), Held::Leadership(leadership)) => {
                leadership.resign().await.map_err(|e| e.to_string())
            }
            (Contender::Baseline { nodes, release, .. }, Held::Baseline(token)) => {
                let replies = join_all(nodes.iter().map(|conn| {
                    let mut conn = conn.clone();
                    let token = &token;
                    async move {
                        release
                            .key(key)
                            .arg(token)
                            .invoke_async::<i64>(&mut conn)
                            .await
                    }
                }))
                .await;
                for reply in replies {
                    reply.map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            (Contender::Redmutex { .. }, Held::Redmutex(lock)) => {
                lock.release().await.map_err(|e| e.to_string())
            }
            (Contender::Rslock(manager), Held::Rslock(lock)) => {
                manager.unlock(&lock).await;
                Ok(())
            }
            (Contender::Fair(_), Held::Fair(guard)) => {
                guard.release().await.map_err(|e| e.to_string())
            }
            (Contender::Rw(_), Held::Read(guard)) => {
                guard.release().await.map_err(|e| e.to_string())
            }
            (Contender::Rw(_), Held::Write(guard)) => {
                guard.release().await.map_err(|e| e.to_string())
            }
            _ => Err("a lock released through another implementation".into()),
        }
    }
}

/// The read-write lock's wait for `key`, to read or to write: woken by the release.
async fn rw_waiting(
    locker: &Locker<MultiplexedConnection>,
    key: &str,
    write: bool,
) -> Result<Held, String> {
    let rw = locker.rw_lock(key).map_err(|e| e.to_string())?;
    let held = match write {
        true => (rw.write(TTL).retry(woken()).deadline(Duration::MAX).await).map(Held::Write),
        false => (rw.read(TTL).retry(woken()).deadline(Duration::MAX).await).map(Held::Read),
    };
    held.map_err(|e| e.to_string())
}

/// A number in [0, 1) from the clock's low bits: rslock's pause is uniform, and nothing
/// here needs better randomness.
fn rand_unit() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1_000_000) / 1_000_000.0
}
