//! Pub/sub inside the in-memory server: `PUBLISH` reaches the subscriber connections that
//! push wake-up opens on it ([`crate::pubsub`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use redis::RedisResult;
use tokio::sync::mpsc;

use crate::pubsub::{Message, Messages, SubscriberSink, SubscriberSource, Unheard};
use crate::sync::lock;

/// Every open subscriber connection and its channels.
#[derive(Default)]
pub(crate) struct Broker {
    subscribers: Mutex<Vec<Subscriber>>,
    next_id: Mutex<u64>,
}

struct Subscriber {
    id: u64,
    channels: HashSet<Vec<u8>>,
    deliver: mpsc::UnboundedSender<Message>,
}

impl Broker {
    /// Delivers `payload` to every connection subscribed to `channel`; how many heard it.
    pub(crate) fn publish(&self, channel: &[u8], payload: &[u8]) -> i64 {
        let mut subscribers = lock(&self.subscribers);
        // Connections whose other end is gone are dropped here.
        subscribers.retain(|subscriber| !subscriber.deliver.is_closed());
        let mut heard = 0;
        for subscriber in subscribers.iter() {
            if subscriber.channels.contains(channel) {
                let message = Message {
                    channel: channel.to_vec(),
                    payload: payload.to_vec(),
                };
                heard += i64::from(subscriber.deliver.send(message).is_ok());
            }
        }
        heard
    }

    /// Drops every subscriber connection, as a server that restarts does: their streams
    /// end, and push wake-up connects and subscribes again.
    pub(crate) fn disconnect_all(&self) {
        lock(&self.subscribers).clear();
    }

    fn update(&self, id: u64, channels: Vec<Vec<u8>>, subscribe: bool) {
        let mut subscribers = lock(&self.subscribers);
        if let Some(subscriber) = subscribers.iter_mut().find(|s| s.id == id) {
            for channel in channels {
                match subscribe {
                    true => subscriber.channels.insert(channel),
                    false => subscriber.channels.remove(&channel),
                };
            }
        }
    }
}

impl SubscriberSource for Arc<Broker> {
    fn open(&self) -> BoxFuture<'_, RedisResult<(Box<dyn SubscriberSink>, Messages)>> {
        let (deliver, received) = mpsc::unbounded_channel();
        let id = {
            let mut next_id = lock(&self.next_id);
            *next_id += 1;
            *next_id
        };
        lock(&self.subscribers).push(Subscriber {
            id,
            channels: HashSet::new(),
            deliver,
        });
        let sink: Box<dyn SubscriberSink> = Box::new(Sink {
            broker: self.clone(),
            id,
        });
        let messages = futures_util::stream::unfold(received, |mut received| async move {
            received.recv().await.map(|message| (message, received))
        });
        Box::pin(async move { Ok((sink, messages.boxed())) })
    }
}

/// One subscriber connection's subscribing half; dropping it closes the connection.
struct Sink {
    broker: Arc<Broker>,
    id: u64,
}

impl SubscriberSink for Sink {
    fn subscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<Unheard>> {
        self.broker.update(self.id, channels, true);
        Box::pin(async { Ok(Vec::new()) })
    }

    fn unsubscribe(&mut self, channels: Vec<Vec<u8>>) -> BoxFuture<'_, RedisResult<()>> {
        self.broker.update(self.id, channels, false);
        Box::pin(async { Ok(()) })
    }

    fn ping(&mut self) -> BoxFuture<'_, RedisResult<Unheard>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        lock(&self.broker.subscribers).retain(|subscriber| subscriber.id != self.id);
    }
}
