//! The Redis side of every operation: one round trip each.
//!
//! Scripts are sent by SHA (`EVALSHA`) and loaded on a `NOSCRIPT` reply, which redis-rs's
//! [`Script`] does for us. Every function here works on one node; the locker (and, later,
//! quorum locking) builds on them.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, Value};

use crate::args::Keys;
use crate::token::{Token, TOKEN_LEN};

/// Runs an idempotent request once more if the first try found the connection broken
/// (e.g. the server restarted since the last request): a [`ConnectionManager`] reconnects
/// on that error, and the second try goes over the new connection. Only for requests that
/// are safe to repeat — release, refresh and reads.
///
/// [`ConnectionManager`]: redis::aio::ConnectionManager
macro_rules! idempotent {
    ($request:expr) => {
        match $request.await {
            Err(e) if e.is_unrecoverable_error() => $request.await,
            result => result,
        }
    };
}
pub(crate) use idempotent;

/// A script's source: the shared helpers (owner check, fence counters), then its own.
macro_rules! source {
    ($file:literal) => {
        concat!(
            include_str!("scripts/helpers.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
}

static OBTAIN: LazyLock<Script> = LazyLock::new(|| Script::new(source!("obtain.lua")));
static OBTAIN_ONE: LazyLock<Script> = LazyLock::new(|| Script::new(source!("obtain_one.lua")));
const RELEASE_SOURCE: &str = source!("release.lua");
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SOURCE));
static REFRESH: LazyLock<Script> = LazyLock::new(|| Script::new(source!("refresh.lua")));
static PTTL: LazyLock<Script> = LazyLock::new(|| Script::new(source!("pttl.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(source!("renew.lua")));
static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(source!("inspect.lua")));
static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(source!("fence.lua")));
static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(source!("raise_fence.lua")));

/// An invocation of `script` with the lock's keys as `KEYS`.
fn over_keys<'s>(script: &'s Script, keys: &Keys) -> redis::ScriptInvocation<'s> {
    let mut call = script.prepare_invoke();
    for key in keys.iter() {
        call.key(key);
    }
    call
}

/// An invocation of `script` with the lock's keys, then their fence counters, as `KEYS`.
fn over_keys_and_counters<'s>(
    script: &'s Script,
    keys: &Keys,
    counters: &[Vec<u8>],
) -> redis::ScriptInvocation<'s> {
    let mut call = over_keys(script, keys);
    for counter in counters {
        call.key(counter);
    }
    call
}

/// The answer to one acquire try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Obtain {
    /// Every key now holds our value; for a fenced acquire, this node's next fence.
    Obtained { fence: Option<u64> },
    /// The key at `index` is held by another owner, for `ttl` more when the reply says
    /// (`None`: unknown, or no expiry); nothing was written.
    Held { index: usize, ttl: Option<Duration> },
}

impl Obtain {
    /// The reply `{ held, fence_or_pttl }` of the acquire scripts.
    fn from_reply((held, detail): (usize, i64), fenced: bool) -> Obtain {
        match held {
            0 => Obtain::Obtained {
                fence: fenced.then_some(detail as u64),
            },
            i => Obtain::Held {
                index: i - 1,
                ttl: u64::try_from(detail).ok().map(Duration::from_millis),
            },
        }
    }
}

/// What one acquire try sends: the same for every node.
#[derive(Clone, Copy)]
pub(crate) struct ObtainTry<'a> {
    pub(crate) keys: &'a Keys,
    /// The fence counter of each key, in order, for an acquire that takes its fence with
    /// the keys; empty otherwise.
    pub(crate) counters: &'a [Vec<u8>],
    /// How long counters are kept after this use.
    pub(crate) retention_ms: u64,
    /// Token, awaited flag, metadata.
    pub(crate) value: &'a [u8],
    pub(crate) ttl_ms: u64,
    /// An earlier try may have set some keys without us seeing the reply: the script then
    /// treats keys holding our token as free.
    pub(crate) retrying_own: bool,
    /// The caller waits for a release (see [`crate::wakeup`]): a key found held is marked
    /// as awaited so that its release publishes a wake-up, and its TTL is read.
    pub(crate) waiting: bool,
}

/// One try to take every key. The common case — a single key, a first try that does not
/// wait — takes the cheapest path: unfenced a plain `SET NX PX`, fenced a lean script
/// (`SET NX PX`, then the counter). When `waiting`, marking a held key takes a second
/// request on the plain path, sent only when the `SET` found the key held (the script may
/// still obtain the key if it was released in between). Everything else goes through
/// `obtain.lua`.
pub(crate) async fn obtain<C: ConnectionLike>(
    conn: &mut C,
    request: ObtainTry<'_>,
) -> RedisResult<Obtain> {
    let ObtainTry {
        keys,
        counters,
        retention_ms,
        value,
        ttl_ms,
        retrying_own,
        waiting,
    } = request;
    let fenced = !counters.is_empty();
    let unknown_ttl = Obtain::Held {
        index: 0,
        ttl: None,
    };
    if keys.len() == 1 && !retrying_own {
        let key = keys.get(0).expect("one key");
        if let [counter] = counters {
            if !waiting {
                let reply: (usize, i64) = OBTAIN_ONE
                    .key(key)
                    .key(counter)
                    .arg(value)
                    .arg(ttl_ms)
                    .arg(retention_ms)
                    .invoke_async(conn)
                    .await?;
                // Held: `{ 1, -3 }`, no TTL read on this path.
                return Ok(Obtain::from_reply(reply, true));
            }
        } else {
            let reply: Value = redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(conn)
                .await?;
            if reply != Value::Nil {
                return Ok(Obtain::Obtained { fence: None });
            }
            if !waiting {
                return Ok(unknown_ttl);
            }
        }
    }
    let mut call = over_keys_and_counters(&OBTAIN, keys, counters);
    call.arg(value)
        .arg(ttl_ms)
        .arg(TOKEN_LEN)
        .arg(if waiting { "1" } else { "0" })
        .arg(keys.len())
        .arg(retention_ms);
    Ok(Obtain::from_reply(call.invoke_async(conn).await?, fenced))
}

/// The fence of a lock that was taken without one: the next fence, stored in every
/// counter, if this owner still holds every key; `None` when it does not (nothing changed).
pub(crate) async fn take_fence<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    counters: &[Vec<u8>],
    token: &Token,
    retention_ms: u64,
) -> RedisResult<Option<u64>> {
    let mut call = over_keys_and_counters(&FENCE, keys, counters);
    call.arg(token.as_bytes()).arg(retention_ms);
    let fence: u64 = call.invoke_async(conn).await?;
    Ok((fence > 0).then_some(fence))
}

/// Redlock's second step for fences: raises the counters to `fence` where lower, if this
/// owner still holds every key on the node. Returns whether it did.
pub(crate) async fn raise_fence<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    counters: &[Vec<u8>],
    token: &Token,
    fence: u64,
    retention_ms: u64,
) -> RedisResult<bool> {
    let mut call = over_keys_and_counters(&RAISE_FENCE, keys, counters);
    call.arg(token.as_bytes()).arg(fence).arg(retention_ms);
    let raised: i64 = call.invoke_async(conn).await?;
    Ok(raised == 1)
}

/// Deletes the keys that still hold `token`. Returns how many keys did not.
pub(crate) async fn release<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    token: &Token,
) -> RedisResult<usize> {
    let mut call = over_keys(&RELEASE, keys);
    call.arg(token.as_bytes());
    call.invoke_async(conn).await
}

/// [`release`] for when nobody may be waiting for the reply: a cancelled acquire's
/// cleanup, a dropped lock. It sends the whole script (`EVAL`, not `EVALSHA`), because the
/// load-on-`NOSCRIPT` fallback needs a caller still waiting for the reply, and a cleanup
/// queued behind a request to a frozen server may outlive its own response timeout: the
/// server must be able to run it whenever it gets to it.
pub(crate) async fn release_unattended<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    token: &Token,
) -> RedisResult<usize> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(RELEASE_SOURCE).arg(keys.len());
    for key in keys.iter() {
        cmd.arg(key);
    }
    cmd.arg(token.as_bytes());
    cmd.query_async(conn).await
}

/// Sets a new TTL on every key if all hold `token`. Returns whether they did.
pub(crate) async fn refresh<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    token: &Token,
    ttl_ms: u64,
) -> RedisResult<bool> {
    let mut call = over_keys(&REFRESH, keys);
    call.arg(token.as_bytes()).arg(ttl_ms);
    let extended: i64 = call.invoke_async(conn).await?;
    Ok(extended == 1)
}

/// Builds one keep-alive call for many leases: `(keys, token, ttl_ms)` each. The call
/// answers one bool per lease, in order (see `renew.lua`). Built up front (it copies the
/// keys) so that it can be sent from a spawned task.
pub(crate) fn renew_batch<'k>(
    leases: impl IntoIterator<Item = (&'k Keys, &'k Token, u64)>,
) -> redis::ScriptInvocation<'static> {
    let mut call = RENEW.prepare_invoke();
    for (keys, token, ttl_ms) in leases {
        for key in keys.iter() {
            call.key(key);
        }
        call.arg(keys.len()).arg(token.as_bytes()).arg(ttl_ms);
    }
    call
}

/// The remaining TTL of an owned lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remaining {
    /// Milliseconds until the first key expires.
    Millis(u64),
    /// No key has an expiry (someone removed it).
    Forever,
    /// Some key is not held by this owner.
    NotHeld,
}

pub(crate) async fn pttl<C: ConnectionLike>(
    conn: &mut C,
    keys: &Keys,
    token: &Token,
) -> RedisResult<Remaining> {
    let mut call = over_keys(&PTTL, keys);
    call.arg(token.as_bytes());
    let ms: i64 = call.invoke_async(conn).await?;
    Ok(match ms {
        -1 => Remaining::Forever,
        ms if ms < 0 => Remaining::NotHeld,
        ms => Remaining::Millis(ms as u64),
    })
}

/// What one key holds, as seen by anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawKey {
    /// PTTL: -2 missing, -1 no expiry.
    pub(crate) pttl: i64,
    /// Redis type name (`none`, `string`, `hash`, …).
    pub(crate) kind: String,
    /// The key's fence counter: the latest fence handed out, if any (and a number).
    pub(crate) fence: Option<u64>,
    /// The value, when the key is a string.
    pub(crate) value: Option<Vec<u8>>,
}

pub(crate) async fn inspect<C: ConnectionLike>(conn: &mut C, key: &[u8]) -> RedisResult<RawKey> {
    // A three- or four-element array: parse by position rather than as a fixed tuple.
    let mut reply: std::vec::IntoIter<Value> = INSPECT
        .key(key)
        .key(crate::fence::counter_key(key))
        .invoke_async::<Vec<Value>>(conn)
        .await?
        .into_iter();
    let pttl: i64 = redis::from_redis_value(reply.next().unwrap_or(Value::Nil))?;
    let kind: String = redis::from_redis_value(reply.next().unwrap_or(Value::Nil))?;
    let fence: Option<String> = redis::from_redis_value(reply.next().unwrap_or(Value::Nil))?;
    let value: Option<Vec<u8>> = redis::from_redis_value(reply.next().unwrap_or(Value::Nil))?;
    Ok(RawKey {
        pttl,
        kind,
        fence: fence.and_then(|f| f.parse().ok()),
        value,
    })
}
