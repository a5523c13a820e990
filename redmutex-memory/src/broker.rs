//! Pub/sub inside the in-memory server: `PUBLISH` reaches the subscriber connections
//! opened with [`MemoryRedis::subscriber`](crate::MemoryRedis::subscriber).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::lock;

/// Every open subscriber connection and its channels.
#[derive(Default)]
pub(crate) struct Broker {
    subscribers: Mutex<Vec<Channels>>,
    next_id: Mutex<u64>,
}

/// One subscriber connection's channels and where its messages go.
struct Channels {
    id: u64,
    channels: HashSet<Vec<u8>>,
    deliver: mpsc::UnboundedSender<Published>,
}

/// A message `PUBLISH` delivered to a [`Subscriber`]'s channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The channel it was published on.
    pub channel: Vec<u8>,
    /// What was published.
    pub payload: Vec<u8>,
}

/// A subscriber connection to the in-memory server, as `SUBSCRIBE` opens on Redis: its
/// messages arrive on the receiver [`MemoryRedis::subscriber`](crate::MemoryRedis::subscriber)
/// returned with it. Dropping it closes the connection (the receiver then ends).
pub struct Subscriber {
    broker: Arc<Broker>,
    id: u64,
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
                let message = Published {
                    channel: channel.to_vec(),
                    payload: payload.to_vec(),
                };
                heard += i64::from(subscriber.deliver.send(message).is_ok());
            }
        }
        heard
    }

    /// Drops every subscriber connection, as a server that restarts does: their receivers
    /// end, and whoever listened connects and subscribes again.
    pub(crate) fn disconnect_all(&self) {
        lock(&self.subscribers).clear();
    }

    /// A new subscriber connection, subscribed to nothing yet.
    pub(crate) fn open(self: &Arc<Self>) -> (Subscriber, mpsc::UnboundedReceiver<Published>) {
        let (deliver, received) = mpsc::unbounded_channel();
        let id = {
            let mut next_id = lock(&self.next_id);
            *next_id += 1;
            *next_id
        };
        lock(&self.subscribers).push(Channels {
            id,
            channels: HashSet::new(),
            deliver,
        });
        let subscriber = Subscriber {
            broker: self.clone(),
            id,
        };
        (subscriber, received)
    }

    fn update(&self, id: u64, channels: impl IntoIterator<Item = Vec<u8>>, subscribe: bool) {
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

impl Subscriber {
    /// Subscribes to `channels` (as `SUBSCRIBE`); messages published from now on arrive.
    pub fn subscribe(&self, channels: impl IntoIterator<Item = Vec<u8>>) {
        self.broker.update(self.id, channels, true);
    }

    /// Unsubscribes from `channels` (as `UNSUBSCRIBE`).
    pub fn unsubscribe(&self, channels: impl IntoIterator<Item = Vec<u8>>) {
        self.broker.update(self.id, channels, false);
    }
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").field("id", &self.id).finish()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        lock(&self.broker.subscribers).retain(|subscriber| subscriber.id != self.id);
    }
}
