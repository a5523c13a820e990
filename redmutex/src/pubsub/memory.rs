//! Push wake-up over the in-memory server: its own subscriber connections.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use redis::RedisResult;
use redmutex_memory::{MemoryRedis, Subscriber};

use super::{Message, Messages, SubscriberSink, SubscriberSource, Unheard, WakeUpSource};

impl From<MemoryRedis> for WakeUpSource {
    fn from(redis: MemoryRedis) -> WakeUpSource {
        WakeUpSource(Arc::new(MemorySource(redis)))
    }
}

impl From<&MemoryRedis> for WakeUpSource {
    fn from(redis: &MemoryRedis) -> WakeUpSource {
        redis.clone().into()
    }
}

struct MemorySource(MemoryRedis);

impl SubscriberSource for MemorySource {
    fn open(&self) -> BoxFuture<'_, RedisResult<(Box<dyn SubscriberSink>, Messages)>> {
        let (subscriber, received) = self.0.subscriber();
        let messages = futures_util::stream::unfold(received, |mut received| async move {
            let published = received.recv().await?;
            let message = Message {
                channel: published.channel,
                payload: published.payload,
            };
            Some((message, received))
        });
        let sink: Box<dyn SubscriberSink> = Box::new(MemorySink(subscriber));
        Box::pin(async move { Ok((sink, messages.boxed())) })
    }
}

/// One subscriber connection's subscribing half; dropping it closes the connection.
struct MemorySink(Subscriber);

impl SubscriberSink for MemorySink {
    fn subscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<Unheard>> {
        self.0.subscribe(channels);
        Box::pin(async { Ok(Vec::new()) })
    }

    fn unsubscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<()>> {
        self.0.unsubscribe(channels);
        Box::pin(async { Ok(()) })
    }

    fn ping(&mut self) -> BoxFuture<'_, RedisResult<Unheard>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}
