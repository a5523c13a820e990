//! Where push wake-up hears releases: a subscriber connection that subscribes to channels
//! and delivers what is published on them. Over Redis, a redis-rs pub/sub connection of
//! the [`redis::Client`] given; in memory, the in-process server's own broker. The
//! wake-up machinery (`engine/wakeup.rs`) sees only this.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use redis::RedisResult;

/// A message published on a channel.
pub(crate) struct Message {
    pub(crate) channel: Vec<u8>,
    pub(crate) payload: Vec<u8>,
}

/// Channels a subscriber connection could not subscribe, or may have lost, while the
/// others stand: a cluster's shards whose masters do not answer now. (A connection to one
/// node has all or none: an error.)
pub(crate) type Unheard = Vec<Vec<u8>>;

/// The subscribing half of a subscriber connection.
pub(crate) trait SubscriberSink: Send {
    /// Subscribes to `channels`: those it could not subscribe (see [`Unheard`]); an error
    /// when none could be.
    fn subscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<Unheard>>;
    fn unsubscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<()>>;
    /// Checks that the connection still answers: the channels whose node does not (see
    /// [`Unheard`]); an error when the connection failed.
    fn ping(&mut self) -> BoxFuture<'_, RedisResult<Unheard>>;
}

/// What a subscriber connection hears; it ends when the connection is lost.
pub(crate) type Messages = BoxStream<'static, Message>;

/// Opens subscriber connections to one node.
pub(crate) trait SubscriberSource: Send + Sync {
    fn open(&self) -> BoxFuture<'_, RedisResult<(Box<dyn SubscriberSink>, Messages)>>;

    /// Subscribes a cluster's shard channels where each lives (see [`Channels`]).
    ///
    /// [`Channels`]: crate::token::Channels
    fn sharded(&self) -> bool {
        false
    }
}

/// Where a locker's push wake-up subscribes, one per node (see
/// [`Locker::with_wake_up`](crate::Locker::with_wake_up)): made from a [`redis::Client`]
/// for the node's server; for a cluster, with the feature `cluster`, from a
/// `redis::cluster::ClusterClient` that speaks RESP3 (see the `From` impl); or, with the
/// feature `memory`, from the in-memory server itself.
///
/// ```
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let source = redmutex::WakeUpSource::from(client);
/// # Ok::<(), redis::RedisError>(())
/// ```
#[derive(Clone)]
pub struct WakeUpSource(pub(crate) Arc<dyn SubscriberSource>);

impl std::fmt::Debug for WakeUpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WakeUpSource")
    }
}

impl WakeUpSource {
    /// A cluster's source, for shard channels.
    pub(crate) fn sharded(&self) -> bool {
        self.0.sharded()
    }
}

impl From<redis::Client> for WakeUpSource {
    fn from(client: redis::Client) -> WakeUpSource {
        WakeUpSource(Arc::new(ClientSource(client)))
    }
}

struct ClientSource(redis::Client);

impl SubscriberSource for ClientSource {
    fn open(&self) -> BoxFuture<'_, RedisResult<(Box<dyn SubscriberSink>, Messages)>> {
        Box::pin(async move {
            let (sink, stream) = self.0.get_async_pubsub().await?.split();
            let messages = stream.filter_map(|message| async move {
                let channel = message.get_channel::<Vec<u8>>().ok()?;
                let payload = message.get_payload::<Vec<u8>>().unwrap_or_default();
                Some(Message { channel, payload })
            });
            let sink: Box<dyn SubscriberSink> = Box::new(ClientSink(sink));
            Ok((sink, messages.boxed()))
        })
    }
}

struct ClientSink(redis::aio::PubSubSink);

impl SubscriberSink for ClientSink {
    fn subscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<Unheard>> {
        Box::pin(async move { self.0.subscribe(channels).await.map(|()| Vec::new()) })
    }

    fn unsubscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<()>> {
        Box::pin(self.0.unsubscribe(channels))
    }

    fn ping(&mut self) -> BoxFuture<'_, RedisResult<Unheard>> {
        Box::pin(async move { self.0.ping::<redis::Value>().await.map(|_| Vec::new()) })
    }
}

#[cfg(feature = "cluster")]
mod cluster {
    //! A cluster's subscriber: one cluster connection (RESP3) that subscribes each shard
    //! channel on the master of its slot (`SSUBSCRIBE`), and redis-rs's connection follows
    //! the slot's moves. Any sign that a subscription may have lapsed — a node's
    //! connection dropped, or the server unsubscribed a channel we still want (its slot
    //! moved away) — ends the messages, so that the wake-up machinery connects again,
    //! subscribes everything afresh and has its waiters re-check: no release goes unheard
    //! for longer than a reconnection. Each slot is subscribed and pinged on its own; the
    //! channels of a master that does not answer are reported unheard ([`Unheard`]), to be
    //! subscribed again, while the others stand.

    use std::collections::{BTreeMap, BTreeSet};
    use std::future::Future;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures_util::future::{join_all, BoxFuture};
    use futures_util::StreamExt;
    use redis::cluster::{ClusterClient, ClusterConfig};
    use redis::cluster_async::ClusterConnection;
    use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
    use redis::{PushInfo, PushKind, RedisResult, Value};

    use super::{Message, Messages, SubscriberSink, SubscriberSource, Unheard, WakeUpSource};
    use crate::connection::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
    use crate::fence::hash_slot;
    use crate::token::is_shard_channel;

    /// A cluster's subscriber connections: a [`ClusterClient`] that speaks RESP3 (built with
    /// `.use_protocol(redis::ProtocolVersion::RESP3)`, or from `?protocol=resp3` URLs) —
    /// shard channels are subscribed on RESP3 connections only. A client that speaks RESP2
    /// leaves wake-up [failing](crate::WakeUpState::Failing) with redis-rs's error, and
    /// waiters polling.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let client = redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
    ///     .use_protocol(redis::ProtocolVersion::RESP3)
    ///     .build()?;
    /// let conn = client.get_async_connection().await?;
    /// let locker = redmutex::Locker::cluster(conn).with_wake_up([client])?;
    /// # Ok(()) }
    /// ```
    impl From<ClusterClient> for WakeUpSource {
        fn from(client: ClusterClient) -> WakeUpSource {
            WakeUpSource(Arc::new(ClusterSource(client)))
        }
    }

    struct ClusterSource(ClusterClient);

    impl SubscriberSource for ClusterSource {
        fn sharded(&self) -> bool {
            true
        }

        fn open(&self) -> BoxFuture<'_, RedisResult<(Box<dyn SubscriberSink>, Messages)>> {
            Box::pin(async move {
                let (pushes, heard) = tokio::sync::mpsc::unbounded_channel::<PushInfo>();
                let config = ClusterConfig::new()
                    .set_connection_timeout(CONNECT_TIMEOUT)
                    .set_response_timeout(RESPONSE_TIMEOUT)
                    .set_push_sender(pushes);
                let conn = self.0.get_async_connection_with_config(config).await?;
                let wanted = Arc::new(Mutex::new(Subscribed::default()));
                let messages = messages(heard, wanted.clone());
                let sink = ClusterSink {
                    conn,
                    wanted,
                    shard_channels: true,
                };
                Ok((Box::new(sink) as Box<dyn SubscriberSink>, messages))
            })
        }
    }

    /// What one push means to the wake-up machinery.
    enum Heard {
        Message(Message),
        /// A subscription may have lapsed: end the messages.
        Lapsed,
        Nothing,
    }

    /// The messages published on the channels subscribed, until a subscription may have
    /// lapsed (see the module's docs).
    fn messages(
        heard: tokio::sync::mpsc::UnboundedReceiver<PushInfo>,
        wanted: Arc<Mutex<Subscribed>>,
    ) -> Messages {
        let pushes = futures_util::stream::unfold(heard, |mut heard| async move {
            heard.recv().await.map(|push| (push, heard))
        });
        pushes
            .map(move |push| meaning(push, &wanted))
            .take_while(|heard| std::future::ready(!matches!(heard, Heard::Lapsed)))
            .filter_map(|heard| async move {
                match heard {
                    Heard::Message(message) => Some(message),
                    _ => None,
                }
            })
            .boxed()
    }

    fn meaning(push: PushInfo, wanted: &Mutex<Subscribed>) -> Heard {
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
            PushKind::Disconnection => Heard::Lapsed,
            // The server drops a shard channel's subscribers when its slot moves away
            // (or is deleted): an unsubscription we did not ask for is a lost one.
            PushKind::SUnsubscribe | PushKind::Unsubscribe => {
                let channel = bytes(push.data.first()).unwrap_or_default();
                match lock(wanted).unasked(&channel) {
                    true => Heard::Lapsed,
                    false => Heard::Nothing,
                }
            }
            _ => Heard::Nothing,
        }
    }

    fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        mutex
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The channels subscribed, and the unsubscriptions asked for whose confirmation has
    /// not been heard yet: any other unsubscription means a subscription lapsed.
    #[derive(Default)]
    struct Subscribed {
        wanted: BTreeSet<Vec<u8>>,
        leaving: BTreeMap<Vec<u8>, usize>,
    }

    impl Subscribed {
        /// Whether an unsubscription of `channel` was not asked for (and so lapsed); one
        /// that was is counted off.
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

    struct ClusterSink {
        conn: ClusterConnection,
        wanted: Arc<Mutex<Subscribed>>,
        /// The server has shard channels (false once `SSUBSCRIBE` is unknown: Redis 6.2,
        /// where scripts fall back to `PUBLISH` too, see `helpers.lua`'s `announce_on`).
        shard_channels: bool,
    }

    /// `channels` by hash slot: a shard channel command names channels of one slot.
    fn by_slot(channels: Vec<Vec<u8>>) -> BTreeMap<u16, Vec<Vec<u8>>> {
        let mut slots: BTreeMap<u16, Vec<Vec<u8>>> = BTreeMap::new();
        for channel in channels {
            slots.entry(hash_slot(&channel)).or_default().push(channel);
        }
        slots
    }

    fn is_unknown_command(e: &redis::RedisError) -> bool {
        e.to_string()
            .to_ascii_lowercase()
            .contains("unknown command")
    }

    /// How long a shard's master may take to answer a subscription or a ping before its
    /// channels count as unheard: within the wake-up's own limit for the whole request.
    const SHARD_TIMEOUT: Duration =
        Duration::from_millis(RESPONSE_TIMEOUT.as_millis() as u64 * 3 / 4);

    /// `request`'s answer within [`SHARD_TIMEOUT`].
    async fn within<T>(request: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        match tokio::time::timeout(SHARD_TIMEOUT, request).await {
            Ok(answer) => answer,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("a shard's master did not answer within {SHARD_TIMEOUT:?}"),
            )
            .into()),
        }
    }

    /// What requests sent each on its own (one per slot, one for plain channels) left:
    /// the channels of those that failed ([`Unheard`]), or the last error when every
    /// request failed (the connection itself, then).
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
        /// Subscribes each slot's channels on its own, at once, so that a master that does
        /// not answer leaves only its own channels unheard.
        async fn subscribe_all(&mut self, channels: Vec<Vec<u8>>) -> RedisResult<Unheard> {
            lock(&self.wanted).wanted.extend(channels.iter().cloned());
            let (shard, mut plain): (Vec<_>, Vec<_>) =
                channels.into_iter().partition(|c| is_shard_channel(c));
            let mut outcome = Outcome::default();
            if self.shard_channels {
                let requests = by_slot(shard).into_values().map(|channels| {
                    let mut conn = self.conn.clone();
                    async move {
                        let result = within(conn.ssubscribe(&channels)).await;
                        (channels, result)
                    }
                });
                for (channels, result) in join_all(requests).await {
                    match result {
                        Err(e) if is_unknown_command(&e) => {
                            self.shard_channels = false;
                            plain.extend(channels);
                        }
                        result => outcome.add(channels, result),
                    }
                }
            } else {
                plain.extend(shard);
            }
            if !plain.is_empty() {
                let result = within(self.conn.subscribe(&plain)).await;
                outcome.add(plain, result);
            }
            outcome.unheard()
        }

        async fn unsubscribe_all(&mut self, channels: Vec<Vec<u8>>) -> RedisResult<()> {
            {
                let mut subscribed = lock(&self.wanted);
                for channel in &channels {
                    subscribed.wanted.remove(channel);
                    *subscribed.leaving.entry(channel.clone()).or_default() += 1;
                }
            }
            let (shard, plain): (Vec<_>, Vec<_>) =
                (channels.into_iter()).partition(|c| self.shard_channels && is_shard_channel(c));
            for (_, channels) in by_slot(shard) {
                self.conn.sunsubscribe(&channels).await?;
            }
            if !plain.is_empty() {
                self.conn.unsubscribe(plain).await?;
            }
            Ok(())
        }

        /// Pings the master of every slot a shard channel is subscribed in, each on its
        /// own (a frozen one must not leave its waiters without wake-ups, nor the others'),
        /// and any node for plain channels: the channels of those that do not answer.
        async fn ping_all(&mut self) -> RedisResult<Unheard> {
            let mut routes: BTreeMap<Option<u16>, Vec<Vec<u8>>> = BTreeMap::new();
            for channel in lock(&self.wanted).wanted.iter() {
                let slot =
                    (self.shard_channels && is_shard_channel(channel)).then(|| hash_slot(channel));
                routes.entry(slot).or_default().push(channel.clone());
            }
            if routes.is_empty() {
                routes.insert(None, Vec::new());
            }
            let pings = routes.into_iter().map(|(slot, channels)| {
                let mut conn = self.conn.clone();
                let route = match slot {
                    Some(slot) => {
                        SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master))
                    }
                    None => SingleNodeRoutingInfo::Random,
                };
                async move {
                    let ping =
                        conn.route_command(redis::cmd("PING"), RoutingInfo::SingleNode(route));
                    (channels, within(ping).await.map(drop))
                }
            });
            let mut outcome = Outcome::default();
            for (channels, result) in join_all(pings).await {
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
        fn a_subscription_lapses_when_unsubscribed_unasked_or_when_a_node_drops() {
            let subscribed = Mutex::new(Subscribed::default());
            let message = meaning(push(PushKind::SMessage, "{job}"), &subscribed);
            assert!(matches!(message, Heard::Message(m) if m.channel == b"{job}"));
            let confirmed = meaning(push(PushKind::SSubscribe, "{job}"), &subscribed);
            assert!(matches!(confirmed, Heard::Nothing));
            // The slot moved away: the server unsubscribed us.
            let moved = meaning(push(PushKind::SUnsubscribe, "{job}"), &subscribed);
            assert!(matches!(moved, Heard::Lapsed));
            // Our own unsubscriptions, as many as asked for, confirm; the next is the
            // server's.
            lock(&subscribed).leaving.insert(b"{job}".to_vec(), 2);
            for _ in 0..2 {
                let ours = meaning(push(PushKind::SUnsubscribe, "{job}"), &subscribed);
                assert!(matches!(ours, Heard::Nothing));
            }
            let theirs = meaning(push(PushKind::Unsubscribe, "{job}"), &subscribed);
            assert!(matches!(theirs, Heard::Lapsed));
            let dropped = PushInfo {
                kind: PushKind::Disconnection,
                data: Vec::new(),
            };
            assert!(matches!(meaning(dropped, &subscribed), Heard::Lapsed));
        }
    }
}
