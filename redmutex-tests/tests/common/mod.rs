//! Shared helpers for the integration tests: connections to test-kit servers and a raw
//! view of Redis that bypasses the code under test.
#![allow(dead_code)] // each test file uses a different subset

use std::time::Duration;

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::AsyncConnectionConfig;
use redmutex::state::{ListedLock, LockKind};
use redmutex::Locker;
use testkit::RedisServer;

/// The value redmutex stores for a lock without metadata that nobody waits for: the token,
/// then the flag byte `-` (`w` once a waiter marked it).
#[allow(dead_code)]
pub fn stored(token: redmutex::Token) -> Vec<u8> {
    let mut value = token.as_str().as_bytes().to_vec();
    value.push(b'-');
    value
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A multiplexed connection with the given response timeout.
pub async fn multiplexed_with_timeout(
    server: &RedisServer,
    timeout: Duration,
) -> MultiplexedConnection {
    multiplexed_url(&server.url(), timeout).await
}

/// A multiplexed connection to `url` (a server, or a proxy in front of one) with the given
/// response timeout.
pub async fn multiplexed_url(url: &str, timeout: Duration) -> MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

pub async fn multiplexed(server: &RedisServer) -> MultiplexedConnection {
    multiplexed_with_timeout(server, ms(2000)).await
}

pub async fn manager(server: &RedisServer) -> ConnectionManager {
    redmutex::connection::connect(&server.url()).await.unwrap()
}

/// A semaphore's permits held, as its `inspect` reads them (0 when nobody holds any).
pub fn used(seen: &Option<ListedLock>) -> u32 {
    seen.as_ref()
        .and_then(|seen| seen.permits)
        .map_or(0, |(used, _)| used)
}

/// How many wait in a lock's line (a fair lock's queue, writers), as `inspect` reads them
/// (0 when it is free and nobody waits).
pub fn in_line(seen: &Option<ListedLock>) -> u32 {
    seen.as_ref().and_then(|seen| seen.waiters).unwrap_or(0)
}

/// How many readers hold a read-write lock, as its `inspect` reads them (0 when a writer
/// holds it, or nobody).
pub fn readers(seen: &Option<ListedLock>) -> u32 {
    match seen {
        Some(held) if held.kind == LockKind::Readers => held.holder_count,
        _ => 0,
    }
}

/// The argument an error blames, if it is an invalid argument.
pub fn blamed(error: &redmutex::Error) -> Option<redmutex::error::Argument> {
    match error {
        redmutex::Error::InvalidArgument(invalid) => Some(invalid.argument),
        _ => None,
    }
}

/// A locker of its own on `server` — as another process would have — with push wake-up
/// when `waking`.
pub async fn own_locker(server: &RedisServer, waking: bool) -> Locker<MultiplexedConnection> {
    let locker = Locker::new(multiplexed(server).await);
    match waking {
        true => locker
            .with_wake_up([redis::Client::open(server.url()).unwrap()])
            .unwrap(),
        false => locker,
    }
}

/// A Redlock locker over `conns` (one per server of `servers`, in order) that waits with
/// push wake-up, a subscriber per server.
pub fn waking_redlock(
    conns: Vec<MultiplexedConnection>,
    servers: &[RedisServer],
) -> Locker<MultiplexedConnection> {
    let clients = (servers.iter()).map(|s| redis::Client::open(s.url()).unwrap());
    Locker::redlock(conns)
        .unwrap()
        .with_wake_up(clients)
        .unwrap()
}

/// A connection to each of `servers`, in order.
pub async fn multiplexed_all(servers: &[RedisServer]) -> Vec<MultiplexedConnection> {
    let mut conns = Vec::new();
    for server in servers {
        conns.push(multiplexed(server).await);
    }
    conns
}

pub async fn locker(server: &RedisServer) -> Locker<MultiplexedConnection> {
    Locker::new(multiplexed(server).await)
}

/// A separate connection for looking at Redis directly.
pub struct Raw(MultiplexedConnection);

impl Raw {
    pub async fn new(server: &RedisServer) -> Raw {
        Raw(multiplexed(server).await)
    }

    pub async fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.0)
            .await
            .unwrap()
    }

    pub async fn exists(&mut self, key: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query_async::<i64>(&mut self.0)
            .await
            .unwrap()
            == 1
    }

    pub async fn pttl(&mut self, key: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut self.0)
            .await
            .unwrap()
    }

    pub async fn set(&mut self, key: &str, value: &str) {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async::<()>(&mut self.0)
            .await
            .unwrap()
    }

    pub async fn run<T: redis::FromRedisValue>(&mut self, cmd: &mut redis::Cmd) -> T {
        cmd.query_async(&mut self.0).await.unwrap()
    }

    /// The server's clock in microseconds (`TIME`).
    pub async fn server_micros(&mut self) -> u64 {
        let (secs, micros): (u64, u64) = self.run(&mut redis::cmd("TIME")).await;
        secs * 1_000_000 + micros
    }

    /// The server's clock in whole milliseconds.
    pub async fn server_ms(&mut self) -> u64 {
        self.server_micros().await / 1000
    }

    /// Polls until `key` is gone, for at most `within`; says whether it went.
    pub async fn wait_until_gone(&mut self, key: &str, within: Duration) -> bool {
        let until = std::time::Instant::now() + within;
        while std::time::Instant::now() < until {
            if !self.exists(key).await {
                return true;
            }
            tokio::time::sleep(ms(10)).await;
        }
        !self.exists(key).await
    }

    /// How many keys are left that are not fence counters (those stay by design).
    pub async fn dbsize(&mut self) -> i64 {
        self.lock_keys().await.len() as i64
    }

    /// Every key that is not a fence counter, sorted.
    pub async fn lock_keys(&mut self) -> Vec<Vec<u8>> {
        let all: Vec<Vec<u8>> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut self.0)
            .await
            .unwrap();
        let mut keys: Vec<Vec<u8>> = all.into_iter().filter(|k| !is_fence_counter(k)).collect();
        keys.sort();
        keys
    }

    /// The fence counter of `key`, if one was written.
    pub async fn fence_counter(&mut self, key: &str) -> Option<u64> {
        redis::cmd("GET")
            .arg(format!("{{{key}}}:fence"))
            .query_async(&mut self.0)
            .await
            .unwrap()
    }
}

/// Whether `key` is named like a fence counter (`{…}:fence` or `{…}:fence:…`).
pub fn is_fence_counter(key: &[u8]) -> bool {
    key.first() == Some(&b'{') && key.windows(b"}:fence".len()).any(|w| w == b"}:fence")
}

/// How many keys on `server` are not fence counters, read without the code under test.
pub fn lock_key_count(server: &RedisServer) -> u64 {
    let script = "local n = 0 for _, k in ipairs(redis.call('keys', '*')) do \
                  if not (string.sub(k, 1, 1) == '{' and string.find(k, '}:fence', 1, true)) \
                  then n = n + 1 end end return n";
    let reply = server.command(&["EVAL", script, "0"]);
    reply.trim_start_matches(':').trim_end().parse().unwrap()
}

/// Waits (at most 3 s, well within the tests' TTLs) until no node holds anything but
/// fence counters. Redlock decides a release once a quorum deleted the lock; the slower
/// nodes delete it a round trip later (docs/SAFETY.md, "Networks").
pub async fn every_node_empties(servers: &[RedisServer]) {
    let until = tokio::time::Instant::now() + ms(3000);
    loop {
        let left: Vec<u64> = (servers.iter())
            .map(|s| {
                if s.pid().is_some() {
                    lock_key_count(s)
                } else {
                    0
                }
            })
            .collect();
        if left.iter().all(|n| *n == 0) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "keys left behind, by node: {left:?}"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

/// Waits (at most 3 s) until every node holds `key` for `token`: Redlock hands a
/// lock out once a quorum took it, and the slower nodes take it a round trip later. A test
/// that then changes the key on a node from outside must wait, or a late `SET` would land
/// after its change.
pub async fn every_node_holds(servers: &[RedisServer], key: &str, token: &redmutex::Token) {
    let every: Vec<usize> = (0..servers.len()).collect();
    nodes_hold(servers, &every, key, token).await;
}

/// Waits (at most 3 s) until the nodes `on` hold `key` for `token` (see
/// [`every_node_holds`]).
pub async fn nodes_hold(servers: &[RedisServer], on: &[usize], key: &str, token: &redmutex::Token) {
    let until = tokio::time::Instant::now() + ms(3000);
    loop {
        let missing: Vec<usize> = (on.iter().copied())
            .filter(|&node| !holds(&servers[node], key, token))
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "nodes {missing:?} never took {key}"
        );
        tokio::time::sleep(ms(10)).await;
    }
}

/// Whether `server` holds `key` for `token`, read without the code under test.
pub fn holds(server: &RedisServer, key: &str, token: &redmutex::Token) -> bool {
    let reply = server.command(&["GET", key]);
    let value = reply.split_once("\r\n").map_or("", |(_, value)| value);
    !reply.starts_with("$-1") && value.starts_with(token.as_str())
}

/// The commands a server has run, by name, from `INFO commandstats` (commands run inside
/// scripts count too), read without the code under test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandCalls(std::collections::BTreeMap<String, u64>);

/// What `server` has run so far.
pub fn command_calls(server: &RedisServer) -> CommandCalls {
    let info = server.command(&["INFO", "commandstats"]);
    let calls = info
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect();
    CommandCalls(calls)
}

impl CommandCalls {
    /// The commands run since `before`, leaving out the `INFO` that reads them.
    pub fn since(&self, before: &CommandCalls) -> CommandCalls {
        let calls = self
            .0
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(name, n)| (name.clone(), n - before.0.get(name).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        CommandCalls(calls)
    }

    /// `del=1 evalsha=1 get=1 set=1`: name=count, by name.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(n, c)| format!("{n}={c}")).collect();
        parts.join(" ")
    }
}

/// A `tracing` subscriber that keeps every event as a line of text: its level, then its
/// fields (`message=…`, …).
pub struct Recorder(pub std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut text = Text(event.metadata().level().to_string());
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// The member that holds `member`'s heartbeat in a line or a fair lock's queue, as
/// helpers.lua's `beat_of` names it: `member`, then '~' up to 65 bytes.
pub fn beat_of(member: &str) -> String {
    let mut beat = format!("{member}~");
    while beat.len() < 65 {
        beat.push('~');
    }
    beat
}

/// How many places the line `line` (a key's line, `{key}:line`) holds: its tickets are
/// scored from 0 up, its heartbeats below 0.
/// An acquire of `keys` (a 30 s TTL) on `locker`, in a task of its own, that tries again
/// only every 10 s for up to 20 s: a quick grant can only come from a wake-up. It returns
/// when it ended, and what it got.
pub fn waiting_for(
    locker: &Locker<MultiplexedConnection>,
    keys: &'static [&'static str],
) -> tokio::task::JoinHandle<(
    std::time::Instant,
    Result<redmutex::Lock<MultiplexedConnection>, redmutex::Error>,
)> {
    let acquire = locker.acquire_all(keys.iter().copied(), ms(30_000));
    tokio::spawn(async move {
        let lock = (acquire.retry(redmutex::retry::constant(ms(10_000))))
            .deadline(ms(20_000))
            .await;
        (std::time::Instant::now(), lock)
    })
}

pub fn places_in_line(server: &RedisServer, line: &str) -> u64 {
    let reply = server.command(&["ZCOUNT", line, "0", "+inf"]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// Checks what separate lockers waiting in line did, given per locker the instants its
/// tries failed, in order: each found the claim taken at least once, and after
/// `released_at` none tried again sooner than a heartbeat try (a third of the default
/// heartbeat, less 100 ms) after its last — each release woke one process, and nobody
/// else tried because of it.
pub fn assert_tries_only_on_heartbeat(
    tries: &[std::sync::Mutex<Vec<std::time::Instant>>],
    released_at: std::time::Instant,
) {
    let heartbeat_try = redmutex::limits::DEFAULT_HEARTBEAT / 3 - ms(100);
    for (i, tries) in tries.iter().enumerate() {
        let tries = tries.lock().unwrap();
        assert!(!tries.is_empty(), "locker {i} found the claim free first");
        for pair in tries.windows(2) {
            assert!(
                pair[1] < released_at || pair[1] - pair[0] >= heartbeat_try,
                "locker {i} tried {:?} after the releases began, {:?} after its last try",
                pair[1] - released_at,
                pair[1] - pair[0]
            );
        }
    }
}
