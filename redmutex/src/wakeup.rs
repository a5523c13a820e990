//! Push wake-up: an acquire waiting for a held lock is woken by its release instead of
//! polling for it.
//!
//! How the pieces fit:
//! - A waiter's tries mark the holder's value as awaited (its flag byte; `obtain.lua`), and
//!   the holder's release then publishes on the channel named like the key
//!   (`release.lua`). Releases nobody waits for publish nothing.
//! - A locker with wake-up has one [`Hub`]: one subscriber connection per node, opened on
//!   first use, and one [`Channel`] per key its acquires wait for. The connection is
//!   subscribed to exactly the keys that have waiters.
//! - A wake-up goes to one waiter at a time — the *baton*, longest waiter first — so a
//!   release costs one try per waiting process, not one per waiting task. Announcements
//!   that arrive while the baton is out are kept (`pending`) and handed on if its holder
//!   finds the key held again; a holder that leaves without trying hands it on at once.
//! - No release is missed: a waiter's first try only says the key was held. Once the
//!   subscription is confirmed, one waiter tries again (a *re-check*) and marks the
//!   holder; every later release of that holder is announced. While the locker's waiters
//!   on a confirmed subscription exist, newcomers queue behind them without a try: the
//!   holder is marked, so its release will be announced.
//! - Polling per the retry strategy stays the fallback for what no message announces: a
//!   holder that dies (its key expires), an owner that is not a redmutex waiter taking the
//!   key in between, or a subscriber connection that dropped (it reconnects with backoff
//!   and, once subscribed again, wakes one waiter to re-check).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{mpsc, Notify};

use crate::connection::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

/// First pause before reconnecting a dropped subscriber connection; doubled per failure.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// Longest pause between reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// How often an idle subscriber connection is checked with a PING: a connection that died
/// silently (a frozen server, a dropped route) must not leave waiters without wake-ups for
/// longer than this.
const HEALTH_CHECK: Duration = Duration::from_secs(5);

/// Why a waiter was woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The key was released (or a waiter handed its turn on): try now.
    Released,
    /// The subscription was (re)confirmed: re-check, since a release may have gone unheard
    /// before it.
    Subscribed,
}

/// What the try that followed a wake-up found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Obtained,
    Held,
    /// An error: the key's state is unknown. The turn is not handed on, so an outage does
    /// not make every waiter try in turn; they poll.
    Failed,
}

/// The wake-up machinery of one locker (and its clones).
pub(crate) struct Hub {
    channels: Mutex<HashMap<Box<[u8]>, Arc<Channel>>>,
    subscribers: Vec<Subscriber>,
    /// Nodes that must confirm a subscription before it counts: all of one, a quorum of N.
    needed: usize,
}

/// One node's subscriber connection, served by a task started on first use.
struct Subscriber {
    client: redis::Client,
    /// Keys whose subscription the task must bring in line with the channel map.
    keys: Mutex<Option<mpsc::UnboundedSender<Box<[u8]>>>>,
}

/// The waiters of one key.
struct Channel {
    wake: Notify,
    state: Mutex<ChannelState>,
}

struct ChannelState {
    members: usize,
    /// Which nodes confirmed the subscription.
    confirmed: Vec<bool>,
    /// A waiter has been woken and not yet said what its try found.
    baton: Option<Wake>,
    /// Announcements that came while the baton was out.
    pending: bool,
}

/// One waiting acquire's place at a key.
pub(crate) struct Member {
    hub: Arc<Hub>,
    key: Box<[u8]>,
    channel: Arc<Channel>,
    /// Woken, and its try not reported yet.
    turn: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here can panic while holding a lock; if it did, the state is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Hub {
    /// A hub over one subscriber client per node; a subscription counts once `needed`
    /// nodes confirmed it.
    pub(crate) fn new(clients: Vec<redis::Client>, needed: usize) -> Hub {
        Hub {
            channels: Mutex::new(HashMap::new()),
            subscribers: clients
                .into_iter()
                .map(|client| Subscriber {
                    client,
                    keys: Mutex::new(None),
                })
                .collect(),
            needed,
        }
    }

    /// Joins the waiters of `key` if they are already waiting on a confirmed subscription:
    /// then the holder is marked, and a newcomer can queue behind them without a try.
    pub(crate) fn join_queue(self: &Arc<Self>, key: &[u8]) -> Option<Member> {
        let channels = lock(&self.channels);
        let channel = channels.get(key)?;
        let mut state = lock(&channel.state);
        if state.members == 0 || !self.subscribed(&state) {
            return None;
        }
        state.members += 1;
        Some(Member {
            hub: self.clone(),
            key: key.into(),
            channel: channel.clone(),
            turn: false,
        })
    }

    /// Joins (or starts) the waiters of `key`; the key is subscribed to if it was not.
    pub(crate) fn join(self: &Arc<Self>, key: &[u8]) -> Member {
        let mut channels = lock(&self.channels);
        let mut created = false;
        let channel = channels
            .entry(key.into())
            .or_insert_with(|| {
                created = true;
                Arc::new(Channel {
                    wake: Notify::new(),
                    state: Mutex::new(ChannelState {
                        members: 0,
                        confirmed: vec![false; self.subscribers.len()],
                        baton: None,
                        pending: false,
                    }),
                })
            })
            .clone();
        lock(&channel.state).members += 1;
        drop(channels);
        if created {
            self.sync(key);
        }
        Member {
            hub: self.clone(),
            key: key.into(),
            channel,
            turn: false,
        }
    }

    fn subscribed(&self, state: &ChannelState) -> bool {
        state.confirmed.iter().filter(|c| **c).count() >= self.needed
    }

    /// Asks every node's task to bring `key`'s subscription in line with the channel map.
    fn sync(self: &Arc<Self>, key: &[u8]) {
        for (node, subscriber) in self.subscribers.iter().enumerate() {
            let mut keys = lock(&subscriber.keys);
            let key = match keys.as_ref().map(|tx| tx.send(key.into())) {
                Some(Ok(())) => continue,
                Some(Err(unsent)) => unsent.0,
                None => key.into(),
            };
            // No task yet, or its runtime is gone. Outside a runtime (a waiter dropped late)
            // there is nothing to do: a dead task's connection is closed, its subscriptions
            // with it, and the next waiter starts a new one.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                *keys = None;
                continue;
            };
            let (tx, rx) = mpsc::unbounded_channel();
            // The new task subscribes to every key in the map on connecting; this is just
            // the wake-up for its queue.
            let _ = tx.send(key);
            *keys = Some(tx);
            runtime.spawn(serve(
                Arc::downgrade(self),
                node,
                subscriber.client.clone(),
                rx,
            ));
        }
    }

    /// Records whether `node` is subscribed to `keys`; a subscription that becomes
    /// confirmed by enough nodes wakes one waiter to re-check.
    fn confirm(&self, node: usize, keys: Option<&[Box<[u8]>]>, confirmed: bool) {
        let channels = lock(&self.channels);
        let mut touched: Vec<Arc<Channel>> = Vec::new();
        match keys {
            Some(keys) => touched.extend(keys.iter().filter_map(|k| channels.get(k).cloned())),
            None => touched.extend(channels.values().cloned()),
        }
        drop(channels);
        for channel in touched {
            let mut state = lock(&channel.state);
            let was = self.subscribed(&state);
            state.confirmed[node] = confirmed;
            if !was && self.subscribed(&state) {
                channel.announce(&mut state, Wake::Subscribed);
            }
        }
    }

    /// A release announced on `key` by one node.
    fn released(&self, key: &[u8]) {
        let channel = lock(&self.channels).get(key).cloned();
        if let Some(channel) = channel {
            let mut state = lock(&channel.state);
            channel.announce(&mut state, Wake::Released);
        }
    }

    /// The keys that have waiters now.
    fn keys(&self) -> Vec<Box<[u8]>> {
        lock(&self.channels).keys().cloned().collect()
    }
}

impl Channel {
    /// Wakes the longest waiter unless one is already trying; then remembers it.
    fn announce(&self, state: &mut ChannelState, why: Wake) {
        if state.baton.is_some() {
            state.pending = true;
        } else {
            state.baton = Some(why);
            // With nobody waiting right now (all between tries), the permit is kept for
            // the next one.
            self.wake.notify_one();
        }
    }
}

impl Member {
    /// The key this member waits for.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Waits for this member's turn.
    ///
    /// Cancel safe: a turn given to a dropped wait passes to the next waiter.
    pub(crate) async fn woken(&mut self) -> Wake {
        self.channel.wake.notified().await;
        self.turn = true;
        lock(&self.channel.state).baton.unwrap_or(Wake::Released)
    }

    /// Reports what the try after a wake-up found; a no-op for a try made on the member's
    /// own schedule (polling).
    pub(crate) fn tried(&mut self, outcome: Outcome) {
        if !std::mem::take(&mut self.turn) {
            return;
        }
        let mut state = lock(&self.channel.state);
        state.baton = None;
        let pending = std::mem::take(&mut state.pending);
        // Held: a release announced while we tried may be a newer one than ours; let the
        // next waiter look. Obtained: announcements so far are of releases before ours.
        if outcome == Outcome::Held && pending {
            self.channel.announce(&mut state, Wake::Released);
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut channels = lock(&self.hub.channels);
        let mut state = lock(&self.channel.state);
        state.members -= 1;
        if state.members > 0 {
            if self.turn {
                // Woken but gone without a try (given up, cancelled): pass the turn on.
                state.baton = None;
                self.channel.announce(&mut state, Wake::Released);
            }
            return;
        }
        drop(state);
        if channels
            .get(&self.key)
            .is_some_and(|c| Arc::ptr_eq(c, &self.channel))
        {
            channels.remove(&self.key);
            drop(channels);
            self.hub.sync(&self.key);
        }
    }
}

/// The task behind one node's subscriber connection: connects (again after any failure,
/// with backoff), keeps the subscriptions in line with the hub's channels, and delivers
/// announcements. Ends when the hub is gone.
async fn serve(
    hub: Weak<Hub>,
    node: usize,
    client: redis::Client,
    mut keys: mpsc::UnboundedReceiver<Box<[u8]>>,
) {
    let mut backoff = RECONNECT_MIN;
    loop {
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            if hub.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RECONNECT_MAX);
            continue;
        };
        let (mut sink, mut stream) = pubsub.split();
        // Whatever was queued is covered by subscribing to every key the hub has now.
        while keys.try_recv().is_ok() {}
        let Some(all) = hub.upgrade().map(|hub| hub.keys()) else {
            return;
        };
        if reconcile(&hub, node, &mut sink, all).await {
            backoff = RECONNECT_MIN;
            let mut health = tokio::time::interval(HEALTH_CHECK);
            health.reset();
            loop {
                tokio::select! {
                    message = stream.next() => {
                        let Some(message) = message else { break };
                        let Some(hub) = hub.upgrade() else { return };
                        if let Ok(key) = message.get_channel::<Vec<u8>>() {
                            hub.released(&key);
                        }
                    }
                    key = keys.recv() => {
                        let Some(key) = key else { return };
                        let mut batch = vec![key];
                        while let Ok(key) = keys.try_recv() {
                            batch.push(key);
                        }
                        if !reconcile(&hub, node, &mut sink, batch).await {
                            break;
                        }
                    }
                    _ = health.tick() => {
                        let ping = tokio::time::timeout(RESPONSE_TIMEOUT, sink.ping::<redis::Value>());
                        if !matches!(ping.await, Ok(Ok(_))) {
                            break;
                        }
                    }
                }
            }
        }
        // Connection lost: no wake-up can be trusted until subscribed again.
        match hub.upgrade() {
            Some(hub) => hub.confirm(node, None, false),
            None => return,
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// Subscribes to those of `keys` that have waiters and unsubscribes from the others, then
/// records the confirmations. Returns `false` when the connection failed.
async fn reconcile(
    hub: &Weak<Hub>,
    node: usize,
    sink: &mut PubSubSink,
    mut keys: Vec<Box<[u8]>>,
) -> bool {
    let Some(strong) = hub.upgrade() else {
        return false;
    };
    keys.sort_unstable();
    keys.dedup();
    let (wanted, unwanted): (Vec<_>, Vec<_>) = {
        let channels = lock(&strong.channels);
        keys.into_iter().partition(|key| channels.contains_key(key))
    };
    drop(strong);
    let names = |keys: &[Box<[u8]>]| keys.iter().map(|k| k.to_vec()).collect::<Vec<Vec<u8>>>();
    if !unwanted.is_empty() && !answered(sink.unsubscribe(names(&unwanted))).await {
        return false;
    }
    if !wanted.is_empty() {
        if !answered(sink.subscribe(names(&wanted))).await {
            return false;
        }
        if let Some(hub) = hub.upgrade() {
            hub.confirm(node, Some(&wanted), true);
        }
    }
    true
}

/// Whether a subscriber request was confirmed within [`RESPONSE_TIMEOUT`].
async fn answered(request: impl std::future::Future<Output = redis::RedisResult<()>>) -> bool {
    matches!(
        tokio::time::timeout(RESPONSE_TIMEOUT, request).await,
        Ok(Ok(()))
    )
}
