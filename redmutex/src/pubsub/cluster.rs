//! A cluster's subscriber: a RESP3 connection of its own to each master that serves a
//! subscribed channel's slot, found in the cluster's slot map (`CLUSTER SLOTS`). A shard
//! channel is subscribed on its slot's master (`SSUBSCRIBE`); a plain one (Redis 6.2, or a
//! key with a `}` but no hash tag) on the same master, where the cluster bus brings it.
//!
//! Why a connection per master rather than redis-rs's cluster connection: a master that
//! stops answering (paused, overloaded, cut off) stalls a cluster connection's requests to
//! every master while it refreshes its slot map, and with them every shard's wake-ups.
//! Here it leaves only its own channels unheard ([`Unheard`]), to be subscribed again with
//! backoff (after the slot map is asked for again: the slot may have a new master), while
//! the other masters' subscriptions stand.
//!
//! Any sign that a subscription may have lapsed — a master's connection dropped, or the
//! server unsubscribed a channel we still want (its slot moved away) — ends the messages,
//! so that the wake-up machinery connects again, subscribes everything afresh and has its
//! waiters re-check: no release goes unheard for longer than a reconnection.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{join_all, select_ok, BoxFuture};
use futures_util::{FutureExt, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion,
    PushInfo, PushKind, RedisResult, Value,
};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::{Message, Messages, SubscriberSink, SubscriberSource, Unheard, WakeUpSource};
use crate::connection::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use crate::fence::hash_slot;
use crate::sync::lock;
use crate::token::is_shard_channel;

impl WakeUpSource {
    /// A Redis Cluster's wake-up source, from seed nodes as a `redis::cluster::ClusterClient`
    /// takes them: URLs, or [`ConnectionInfo`]s (for TLS certificates of your own, a
    /// [`redis::Client::build_with_tls`]'s `get_connection_info()`). The first seed's
    /// credentials and TLS settings are used for every master.
    ///
    /// The subscriber keeps a connection of its own to each master that serves a waited-on
    /// key, and subscribes each key's shard channel there; it speaks RESP3 whatever the
    /// URLs say. A master that stops answering leaves only its own keys' waiters polling
    /// until it answers again or its slots move; see [docs/SAFETY.md] for what wake-up
    /// promises.
    ///
    /// # Errors
    ///
    /// A URL that does not parse, or no seed at all, before anything is sent.
    ///
    /// [docs/SAFETY.md]: https://github.com/redmutex/redmutex/blob/main/docs/SAFETY.md
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let conn = redis::cluster::ClusterClient::new(nodes)?
    ///     .get_async_connection()
    ///     .await?;
    /// let source = redmutex::WakeUpSource::cluster(nodes)?;
    /// let locker = redmutex::Locker::cluster(conn).with_wake_up([source])?;
    /// # Ok(()) }
    /// ```
    pub fn cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> RedisResult<WakeUpSource> {
        let seeds = (nodes.into_iter())
            .map(|node| node.into_connection_info().map(resp3))
            .collect::<RedisResult<Vec<_>>>()?;
        if seeds.is_empty() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a cluster's wake-up source needs at least one seed node",
            )));
        }
        let source = ClusterSource { seeds };
        Ok(WakeUpSource(Arc::new(source)))
    }
}

fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info.redis_settings().clone();
    info.set_redis_settings(settings.set_protocol(ProtocolVersion::RESP3))
}

/// A node by host and port, as the slot map names it.
type Address = (String, u16);

fn address(info: &ConnectionInfo) -> Address {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            (host.clone(), *port)
        }
        other => (other.to_string(), 0),
    }
}

/// How to reach `address`: the seed's settings (credentials, TLS) at another address.
fn node_info(seed: &ConnectionInfo, (host, port): &Address) -> ConnectionInfo {
    let addr = match seed.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.clone(),
            port: *port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.clone(), *port),
    };
    seed.clone().set_addr(addr)
}

struct ClusterSource {
    seeds: Vec<ConnectionInfo>,
}

impl SubscriberSource for ClusterSource {
    fn sharded(&self) -> bool {
        true
    }

    fn open(&self) -> BoxFuture<'_, RedisResult<(Box<dyn SubscriberSink>, Messages)>> {
        Box::pin(async move {
            let (pushes, heard) = tokio::sync::mpsc::unbounded_channel();
            let state = Arc::new(Mutex::new(State::default()));
            let mut sink = ClusterSink {
                seeds: self.seeds.clone(),
                slots: SlotMap::default(),
                masters: BTreeMap::new(),
                pushes,
                state: state.clone(),
                stale: false,
            };
            sink.slots = sink.ask_slots(CONNECT_TIMEOUT).await?;
            Ok((
                Box::new(sink) as Box<dyn SubscriberSink>,
                messages(heard, state),
            ))
        })
    }
}

/// Which master serves each slot: ranges of slots, as `CLUSTER SLOTS` lists them.
#[derive(Default, Debug, PartialEq)]
struct SlotMap(Vec<(u16, u16, Address)>);

impl SlotMap {
    /// `CLUSTER SLOTS`'s reply from the node at `asked` (a master listed without a host is
    /// that node), or `None` if it is not one.
    fn parse(reply: &Value, asked: &Address) -> Option<SlotMap> {
        let text = |value: &Value| match value {
            Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
            Value::SimpleString(text) => Some(text.clone()),
            _ => None,
        };
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = Vec::with_capacity(ranges.len());
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let (Some(host), Some(Value::Int(port))) =
                (master.first().and_then(text), master.get(1))
            else {
                return None;
            };
            let host = match host.as_str() {
                "" | "?" => asked.0.clone(),
                _ => host,
            };
            let slot = |n: i64| u16::try_from(n).ok();
            let port = u16::try_from(*port).ok()?;
            map.push((slot(*start)?, slot(*end)?, (host, port)));
        }
        Some(SlotMap(map))
    }

    fn master(&self, slot: u16) -> Option<&Address> {
        (self.0.iter())
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, address)| address)
    }
}

/// What one push means to the wake-up machinery.
enum Heard {
    Message(Message),
    /// A subscription may have lapsed: end the messages.
    Lapsed,
    Nothing,
}

/// What the messages' reader shares with the subscribing side.
#[derive(Default)]
struct State {
    /// The unsubscriptions asked for whose confirmation has not been heard yet: any other
    /// unsubscription means a subscription lapsed.
    leaving: BTreeMap<Vec<u8>, usize>,
    /// The connections that hold subscriptions (by number): a connection opened for a
    /// request that then failed was never relied on, and its end means nothing.
    live: BTreeSet<u64>,
}

impl State {
    /// Whether an unsubscription of `channel` was not asked for (and so lapsed); one that
    /// was is counted off.
    fn unasked(&mut self, channel: &[u8]) -> bool {
        if let Some(count) = self.leaving.get_mut(channel) {
            *count -= 1;
            if *count == 0 {
                self.leaving.remove(channel);
            }
            return false;
        }
        true
    }
}

/// The messages published on the channels subscribed, until a subscription may have
/// lapsed (see the module's docs).
fn messages(heard: UnboundedReceiver<(u64, PushInfo)>, state: Arc<Mutex<State>>) -> Messages {
    let pushes = futures_util::stream::unfold(heard, |mut heard| async move {
        heard.recv().await.map(|push| (push, heard))
    });
    pushes
        .map(move |(connection, push)| meaning(connection, push, &state))
        .take_while(|heard| std::future::ready(!matches!(heard, Heard::Lapsed)))
        .filter_map(|heard| async move {
            match heard {
                Heard::Message(message) => Some(message),
                _ => None,
            }
        })
        .boxed()
}

fn meaning(connection: u64, push: PushInfo, state: &Mutex<State>) -> Heard {
    let bytes = |value: Option<&Value>| match value {
        Some(Value::BulkString(bytes)) => Some(bytes.clone()),
        Some(Value::SimpleString(text)) => Some(text.clone().into_bytes()),
        _ => None,
    };
    match push.kind {
        PushKind::Message | PushKind::SMessage => match bytes(push.data.first()) {
            Some(channel) => Heard::Message(Message {
                channel,
                payload: bytes(push.data.get(1)).unwrap_or_default(),
            }),
            None => Heard::Nothing,
        },
        PushKind::Disconnection if lock(state).live.contains(&connection) => Heard::Lapsed,
        // The server drops a shard channel's subscribers when its slot moves away (or is
        // deleted): an unsubscription we did not ask for is a lost one.
        PushKind::SUnsubscribe | PushKind::Unsubscribe => {
            let channel = bytes(push.data.first()).unwrap_or_default();
            match lock(state).unasked(&channel) {
                true => Heard::Lapsed,
                false => Heard::Nothing,
            }
        }
        _ => Heard::Nothing,
    }
}

/// How long a master may take to answer a subscription or a ping (a new connection's
/// handshake included) before its channels count as unheard: within the wake-up's own
/// limit for the whole request.
const SHARD_TIMEOUT: Duration = Duration::from_millis(RESPONSE_TIMEOUT.as_millis() as u64 * 3 / 4);

/// How long asking for the slot map again may take before a subscription: the rest of the
/// wake-up's limit.
const REFRESH_TIMEOUT: Duration = RESPONSE_TIMEOUT.saturating_sub(SHARD_TIMEOUT);

/// `request`'s answer within `limit`.
async fn within<T>(
    limit: Duration,
    request: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(limit, request).await {
        Ok(answer) => answer,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("a cluster node did not answer within {limit:?}"),
        )
        .into()),
    }
}

fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

/// Numbers the subscriber's connections, for [`State::live`].
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// A RESP3 connection to `info`, whose pushes go to `pushes` under a new number.
async fn connect(
    info: ConnectionInfo,
    pushes: UnboundedSender<(u64, PushInfo)>,
) -> RedisResult<(u64, MultiplexedConnection)> {
    let number = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    let config = bounded().set_push_sender(move |push| pushes.send((number, push)));
    Ok((number, open(info, config).await?))
}

/// A connection's limits: as the wake-up machinery's own.
fn bounded() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

async fn open(
    info: ConnectionInfo,
    config: AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(info)?;
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Sends `command` once for each channel, in one pipeline: one channel per command, so that
/// each command has one reply (its confirmation, a push; or an error).
async fn each(
    conn: &mut MultiplexedConnection,
    command: &str,
    channels: &[Vec<u8>],
) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for channel in channels {
        pipe.cmd(command).arg(channel);
    }
    let replies: Vec<Value> = pipe.query_async(conn).await?;
    match replies.into_iter().find_map(|reply| match reply {
        Value::ServerError(e) => Some(e),
        _ => None,
    }) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Subscribes `channels` on `conn`: shard channels with `SSUBSCRIBE` unless the servers
/// have none (`plain_only`, or learnt here: the returned flag), the others with
/// `SUBSCRIBE`.
async fn subscribe_on(
    conn: &mut MultiplexedConnection,
    channels: &[Vec<u8>],
    plain_only: bool,
) -> RedisResult<bool> {
    let (shard, plain): (Vec<_>, Vec<_>) =
        (channels.iter().cloned()).partition(|channel| !plain_only && is_shard_channel(channel));
    let mut plain_only = plain_only;
    if !shard.is_empty() {
        match each(conn, "SSUBSCRIBE", &shard).await {
            Err(e) if is_unknown_command(&e) => {
                plain_only = true;
                each(conn, "SUBSCRIBE", &shard).await?;
            }
            result => result?,
        }
    }
    if !plain.is_empty() {
        each(conn, "SUBSCRIBE", &plain).await?;
    }
    Ok(plain_only)
}

/// The slot map as the node on `conn` (or a new connection to `info`) tells it.
async fn slots_of(
    info: ConnectionInfo,
    conn: Option<MultiplexedConnection>,
) -> RedisResult<SlotMap> {
    let asked = address(&info);
    let mut conn = match conn {
        Some(conn) => conn,
        None => open(info, bounded()).await?,
    };
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await?;
    SlotMap::parse(&reply, &asked).ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "CLUSTER SLOTS answered with something else than a slot map",
        ))
    })
}

/// A master's connection, and the channels subscribed on it.
struct Master {
    conn: MultiplexedConnection,
    channels: BTreeSet<Vec<u8>>,
    /// The server has no shard channels (Redis 6.2, where scripts fall back to `PUBLISH`
    /// too, see `sharded.lua`'s `announce_on`): learnt per master, as a cluster being
    /// upgraded has both kinds.
    plain_only: bool,
}

struct ClusterSink {
    seeds: Vec<ConnectionInfo>,
    slots: SlotMap,
    masters: BTreeMap<Address, Master>,
    pushes: UnboundedSender<(u64, PushInfo)>,
    state: Arc<Mutex<State>>,
    /// A request failed: the slot map is asked for again before the next subscription.
    stale: bool,
}

/// What requests sent each on its own (one per master) left: the channels of those that
/// failed ([`Unheard`]), or the last error when every request failed.
#[derive(Default)]
struct Outcome {
    requests: usize,
    failed: Vec<Vec<u8>>,
    failures: usize,
    error: Option<redis::RedisError>,
}

impl Outcome {
    fn add(&mut self, channels: Vec<Vec<u8>>, result: RedisResult<()>) {
        self.requests += 1;
        if let Err(e) = result {
            self.failed.extend(channels);
            self.failures += 1;
            self.error = Some(e);
        }
    }

    fn unheard(self) -> RedisResult<Unheard> {
        match self.error {
            Some(error) if self.failures >= self.requests => Err(error),
            _ => Ok(self.failed),
        }
    }
}

impl ClusterSink {
    /// The slot map from the first node that answers within `limit`: the masters already
    /// connected, all at once, else the seeds.
    async fn ask_slots(&self, limit: Duration) -> RedisResult<SlotMap> {
        let connected: Vec<_> = (self.masters.iter())
            .map(|(address, master)| {
                let info = node_info(&self.seeds[0], address);
                slots_of(info, Some(master.conn.clone())).boxed()
            })
            .collect();
        if !connected.is_empty()
            && let Ok(Ok((map, _))) = tokio::time::timeout(limit, select_ok(connected)).await
        {
            return Ok(map);
        }
        let seeds = (self.seeds.iter()).map(|seed| slots_of(seed.clone(), None).boxed());
        within(limit, select_ok(seeds)).await.map(|(map, _)| map)
    }

    /// Subscribes each master's channels on its own connection, all at once, so that a
    /// master that does not answer leaves only its own channels unheard.
    async fn subscribe_all(&mut self, channels: Vec<Vec<u8>>) -> RedisResult<Unheard> {
        if self.stale
            && let Ok(map) = self.ask_slots(REFRESH_TIMEOUT).await
        {
            self.slots = map;
            self.stale = false;
        }
        let mut outcome = Outcome::default();
        let mut groups: BTreeMap<Address, Vec<Vec<u8>>> = BTreeMap::new();
        for channel in channels {
            match self.slots.master(hash_slot(&channel)) {
                Some(address) => groups.entry(address.clone()).or_default().push(channel),
                None => {
                    self.stale = true;
                    let e = (
                        redis::ErrorKind::ClusterConnectionNotFound,
                        "no master serves the slot",
                    );
                    outcome.add(vec![channel], Err(e.into()));
                }
            }
        }
        // A request on a connection that stands is sent even if its answer comes too late:
        // its channels count as subscribed there (to be pinged, and unsubscribed when
        // nobody waits — else a subscription a paused master makes later would stay).
        for (address, channels) in &groups {
            if let Some(master) = self.masters.get_mut(address) {
                master.channels.extend(channels.iter().cloned());
            }
        }
        let requests = groups.into_iter().map(|(address, channels)| {
            let known = (self.masters.get(&address)).map(|m| (m.conn.clone(), m.plain_only));
            let info = node_info(&self.seeds[0], &address);
            let pushes = self.pushes.clone();
            async move {
                let subscribed = within(SHARD_TIMEOUT, async {
                    let (number, mut conn, plain_only) = match known {
                        Some((conn, plain_only)) => (None, conn, plain_only),
                        None => (connect(info, pushes).await)
                            .map(|(number, conn)| (Some(number), conn, false))?,
                    };
                    let plain_only = subscribe_on(&mut conn, &channels, plain_only).await?;
                    Ok((number, conn, plain_only))
                })
                .await;
                (address, channels, subscribed)
            }
        });
        for (address, channels, result) in join_all(requests).await {
            let (number, conn, plain_only) = match result {
                Ok(subscribed) => subscribed,
                Err(e) => {
                    self.stale = true;
                    outcome.add(channels, Err(e));
                    continue;
                }
            };
            if let Some(number) = number {
                lock(&self.state).live.insert(number);
            }
            // A channel that moved lives on its new master alone.
            for (other, master) in self.masters.iter_mut() {
                if *other != address {
                    master
                        .channels
                        .retain(|channel| !channels.contains(channel));
                }
            }
            let master = self.masters.entry(address).or_insert_with(|| Master {
                conn,
                channels: BTreeSet::new(),
                plain_only,
            });
            master.plain_only = plain_only;
            master.channels.extend(channels.iter().cloned());
            outcome.add(channels, Ok(()));
        }
        outcome.unheard()
    }

    /// Unsubscribes each channel where it is subscribed. A master that does not answer in
    /// time still gets the request, queued on its connection; its confirmation is expected
    /// whenever it comes.
    async fn unsubscribe_all(&mut self, channels: Vec<Vec<u8>>) -> RedisResult<()> {
        let mut requests = Vec::new();
        for master in self.masters.values_mut() {
            let plain_only = master.plain_only;
            let leaving: Vec<_> = (channels.iter())
                .filter(|channel| master.channels.remove(*channel))
                .cloned()
                .collect();
            if leaving.is_empty() {
                continue;
            }
            {
                let mut state = lock(&self.state);
                for channel in &leaving {
                    *state.leaving.entry(channel.clone()).or_default() += 1;
                }
            }
            let (shard, plain): (Vec<_>, Vec<_>) =
                (leaving.into_iter()).partition(|channel| !plain_only && is_shard_channel(channel));
            let mut conn = master.conn.clone();
            requests.push(async move {
                if !shard.is_empty() {
                    let _ = within(SHARD_TIMEOUT, each(&mut conn, "SUNSUBSCRIBE", &shard)).await;
                }
                if !plain.is_empty() {
                    let _ = within(SHARD_TIMEOUT, each(&mut conn, "UNSUBSCRIBE", &plain)).await;
                }
            });
        }
        join_all(requests).await;
        Ok(())
    }

    /// Pings every master a channel is subscribed on, each on its own (a frozen one must
    /// not leave its waiters without wake-ups, nor the others'): the channels of those that
    /// do not answer. With nothing subscribed, asks a node for the slot map instead.
    async fn ping_all(&mut self) -> RedisResult<Unheard> {
        let pings: Vec<_> = (self.masters.values())
            .filter(|master| !master.channels.is_empty())
            .map(|master| {
                let mut conn = master.conn.clone();
                let channels: Vec<_> = master.channels.iter().cloned().collect();
                async move {
                    let ping = redis::cmd("PING");
                    let answer = within(SHARD_TIMEOUT, ping.query_async::<Value>(&mut conn));
                    (channels, answer.await.map(drop))
                }
            })
            .collect();
        if pings.is_empty() {
            self.slots = self.ask_slots(SHARD_TIMEOUT).await?;
            return Ok(Vec::new());
        }
        let mut outcome = Outcome::default();
        for (channels, result) in join_all(pings).await {
            self.stale |= result.is_err();
            outcome.add(channels, result);
        }
        outcome.unheard()
    }
}

impl SubscriberSink for ClusterSink {
    fn subscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<Unheard>> {
        Box::pin(self.subscribe_all(channels))
    }

    fn unsubscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<()>> {
        Box::pin(self.unsubscribe_all(channels))
    }

    fn ping(&mut self) -> BoxFuture<'_, RedisResult<Unheard>> {
        Box::pin(self.ping_all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(kind: PushKind, channel: &str) -> PushInfo {
        let data = vec![Value::BulkString(channel.into()), Value::Int(0)];
        PushInfo { kind, data }
    }

    #[test]
    fn a_subscription_lapses_when_unsubscribed_unasked_or_when_a_master_drops() {
        let state = Mutex::new(State::default());
        let message = meaning(1, push(PushKind::SMessage, "{job}"), &state);
        assert!(matches!(message, Heard::Message(m) if m.channel == b"{job}"));
        let confirmed = meaning(1, push(PushKind::SSubscribe, "{job}"), &state);
        assert!(matches!(confirmed, Heard::Nothing));
        // The slot moved away: the server unsubscribed us.
        let moved = meaning(1, push(PushKind::SUnsubscribe, "{job}"), &state);
        assert!(matches!(moved, Heard::Lapsed));
        // Our own unsubscriptions, as many as asked for, confirm; the next is the server's.
        lock(&state).leaving.insert(b"{job}".to_vec(), 2);
        for _ in 0..2 {
            let ours = meaning(1, push(PushKind::SUnsubscribe, "{job}"), &state);
            assert!(matches!(ours, Heard::Nothing));
        }
        let theirs = meaning(1, push(PushKind::Unsubscribe, "{job}"), &state);
        assert!(matches!(theirs, Heard::Lapsed));
        // A connection that holds subscriptions dropped; one that holds none means nothing.
        let dropped = || PushInfo {
            kind: PushKind::Disconnection,
            data: Vec::new(),
        };
        assert!(matches!(meaning(1, dropped(), &state), Heard::Nothing));
        lock(&state).live.insert(1);
        assert!(matches!(meaning(1, dropped(), &state), Heard::Lapsed));
        assert!(matches!(meaning(2, dropped(), &state), Heard::Nothing));
    }

    fn node(host: &str, port: i64) -> Value {
        let id = Value::BulkString(b"07c37dfeb235213a872192d90877d0cd55635b91".to_vec());
        Value::Array(vec![Value::BulkString(host.into()), Value::Int(port), id])
    }

    #[test]
    fn the_slot_map_names_each_ranges_master_and_the_asked_node_where_no_host_is_given() {
        let range = |start, end, master, replica| {
            Value::Array(vec![Value::Int(start), Value::Int(end), master, replica])
        };
        let reply = Value::Array(vec![
            range(0, 5460, node("10.0.0.1", 7000), node("10.0.0.4", 7003)),
            range(5461, 10922, node("", 7001), node("10.0.0.5", 7004)),
            range(10923, 16383, node("?", 7002), node("10.0.0.6", 7005)),
        ]);
        let asked = ("10.0.0.9".to_string(), 7009);
        let map = SlotMap::parse(&reply, &asked).unwrap();
        let at = |slot| map.master(slot).cloned();
        assert_eq!(at(0), Some(("10.0.0.1".into(), 7000)));
        assert_eq!(at(5460), Some(("10.0.0.1".into(), 7000)));
        assert_eq!(at(5461), Some(("10.0.0.9".into(), 7001)));
        assert_eq!(at(16383), Some(("10.0.0.9".into(), 7002)));
        let partial = Value::Array(vec![range(0, 99, node("h", 1), node("r", 2))]);
        assert_eq!(SlotMap::parse(&partial, &asked).unwrap().master(100), None);
        for garbage in [
            Value::Okay,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![range(0, 70000, node("h", 1), node("r", 2))]),
            Value::Array(vec![range(0, 1, node("h", 70000), node("r", 2))]),
        ] {
            assert_eq!(SlotMap::parse(&garbage, &asked), None, "{garbage:?}");
        }
    }

    #[test]
    fn a_master_is_reached_with_the_seeds_settings_at_its_own_address_over_resp3() {
        let source = WakeUpSource::cluster(["redis://user:secret@10.0.0.1:7000/?protocol=resp2"]);
        assert!(source.is_ok_and(|source| source.sharded()));
        let seed = resp3(
            "redis://user:secret@10.0.0.1:7000"
                .into_connection_info()
                .unwrap(),
        );
        let info = node_info(&seed, &("10.0.0.2".to_string(), 7001));
        assert_eq!(address(&info), ("10.0.0.2".to_string(), 7001));
        assert_eq!(info.redis_settings().username(), Some("user"));
        assert_eq!(info.redis_settings().password(), Some("secret"));
        assert_eq!(info.redis_settings().protocol(), ProtocolVersion::RESP3);
        let none: [&str; 0] = [];
        assert!(WakeUpSource::cluster(none).is_err());
        assert!(WakeUpSource::cluster(["not a url"]).is_err());
    }
}
