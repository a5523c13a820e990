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
/// for the node's server; for a cluster, with the feature `cluster`, from its seed nodes
/// ([`WakeUpSource::cluster`]); or, with the
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
mod cluster;

#[cfg(feature = "memory")]
mod memory;
