//! Push wake-up: an acquire waiting for a held lock is woken by its release instead of
//! polling for it.
//!
//! How the pieces fit:
//! - Where one node decides, a lock's waiting lockers line up beside its key (the key's
//!   line, see `mutex.lua`): a waiter's try puts its locker in line and flags the holder's
//!   value. The holder's release hands the key to the first locker in line and tells that
//!   locker alone, on its own turn channel for the key (the key, `:~`, and 16 hex digits
//!   of the locker id's SHA-1): one message and one try per hand-off, however many
//!   processes wait. Elsewhere (Redlock, a cluster, and the other primitives), a waiter's
//!   try marks the holder's value as awaited, and its release publishes on the channel
//!   named like the key (`release`). Releases nobody waits for publish nothing.
//! - On a cluster every channel is a shard channel in its key's slot (`{KEY}`,
//!   `{KEY}:~a`, …; see [`Channels`](crate::token::Channels)), announced with `SPUBLISH`
//!   and heard from the slot's master alone, so that announcements stay off the cluster
//!   bus. The subscriber there is one cluster connection (`pubsub.rs`), which ends its
//!   messages whenever a subscription may have lapsed (a node's connection dropped, a
//!   slot moved away): this hub then connects again, subscribes afresh and has its
//!   waiters re-check, as after any lost connection. A shard whose master does not answer
//!   a subscription or a health check leaves its channels unheard while the others stand:
//!   they are subscribed again with backoff, and confirmed (a re-check) once they are.
//! - A locker with wake-up has one [`Hub`]: one subscriber connection per node, opened on
//!   first use, and one [`Channel`] per channel its acquires wait on. The connection is
//!   subscribed to exactly the channels that have waiters.
//! - On an exclusive channel a wake-up goes to one waiter at a time — the *baton*, longest
//!   waiter first — so a release costs one try per woken process, not one per waiting task.
//!   Announcements that arrive while the baton is out are kept (`pending`) and handed on if
//!   its holder finds the key held again; a holder that leaves without trying hands it on
//!   at once. A semaphore's release says how many permits came back (the message), and that
//!   many waiters not already trying get a turn each.
//! - No release is missed: a waiter's first try only says the key was held. Once the
//!   subscription is confirmed, one waiter tries again (a *re-check*), which lines its
//!   locker up or marks the holder; every later release of that holder is announced.
//! - A channel stays subscribed for [`LINGER`] after its last waiter left, since contention
//!   comes in bursts. On a subscribed channel, a newcomer joins before its first try: behind
//!   other waiters of its locker (whose place in line is its too), or — where nobody lines
//!   up — behind a holder that was itself a waiter, whose value says "awaited", it queues
//!   without a try; otherwise its first try is a waiter's try. In a steady contended state
//!   an acquisition then costs one try that succeeds plus the release and its message: no
//!   failed tries, no polling.
//! - Between lockers (processes), no one starves: the line serves them in the order they
//!   joined it, and a locker whose waiters still wait after one of them took the key joins
//!   its end again. The releaser coming straight back finds the key handed to another, and
//!   lines up.
//! - Polling per the retry strategy stays the fallback for what no message announces: a
//!   holder that dies (its key expires), a hand-off its locker let pass (its process died
//!   or froze: a locker in line tries at least every third of its heartbeat), an owner that
//!   is not a redmutex waiter taking the key in between, or a subscriber connection that
//!   dropped (it reconnects with backoff and, once subscribed again, wakes one waiter to
//!   re-check).
//! - The same connection carries requests to let go (polite revocation): each lease this
//!   locker keeps alive [`listen`](Hub::listen)s on its keys' ask channels, and a request
//!   announced there prompts its renewal at once. The message is only a prompt; the
//!   renewal reads the request where it is kept. A key held again within [`LINGER`] keeps
//!   its subscription.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::connection::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use crate::pubsub::{Messages, SubscriberSink, WakeUpSource};
use crate::sync::lock;

/// First pause before reconnecting a dropped subscriber connection; doubled per failure.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// Longest pause between reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// How long a key stays subscribed after its last waiter left. Contention comes in bursts:
/// a key that had waiters a moment ago probably gets more, and keeping the subscription
/// saves a SUBSCRIBE, an UNSUBSCRIBE and the race window of a new subscription each time.
const LINGER: Duration = Duration::from_secs(1);
/// How often an idle subscriber connection is checked with a PING: a connection that died
/// silently (a frozen server, a dropped route) must not leave waiters without wake-ups for
/// longer than this.
const HEALTH_CHECK: Duration = Duration::from_secs(5);

/// Why a waiter was woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The key was released, as a message said (or a waiter handed its turn on): try now.
    Released,
    /// This locker learned that the key is probably free — a holder of its own released
    /// it or let it run out, a wait for its release saw it free: try now, and a plain
    /// `SET` will likely do.
    Local,
    /// The subscription was (re)confirmed: re-check, since a release may have gone unheard
    /// before it.
    Subscribed,
}

/// What the try that followed a wake-up found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Obtained, for a lease that lasts until `until` unless renewed.
    Obtained { until: Instant },
    /// Held, until `until` as the try's reply said (`None`: not said).
    Held { until: Option<Instant> },
    /// Held, but another key of a claim of several than this waiter's: a turn it was given
    /// for its own key went unused, and passes on to another waiter of that key.
    /// `passed`: its own key was free at the try (or its locker's: see `mutex.lua`).
    HeldElsewhere { passed: bool },
    /// An error: the key's state is unknown. The turn is not handed on, so an outage does
    /// not make every waiter try in turn; they poll.
    Failed,
}

/// The wake-up machinery of one locker (and its clones).
pub(crate) struct Hub {
    channels: Mutex<BTreeMap<Box<[u8]>, Arc<Channel>>>,
    /// Leases of this locker that listen for requests to let go, by channel.
    listeners: Mutex<BTreeMap<Box<[u8]>, Listeners>>,
    next_listener: AtomicU64,
    subscribers: Vec<Subscriber>,
    /// Nodes that must confirm a subscription before it counts: all of one, a quorum of N.
    needed: usize,
}

/// One node's subscriber connection, served by a task started on first use.
struct Subscriber {
    source: WakeUpSource,
    /// Keys whose subscription the task must bring in line with the channel map.
    keys: Mutex<Option<mpsc::UnboundedSender<Box<[u8]>>>>,
    /// How the connection fares, for [`Hub::state`].
    status: Mutex<NodeStatus>,
}

/// One subscriber connection's state.
#[derive(Debug, Clone)]
enum NodeStatus {
    /// No acquire has waited on this node yet.
    Idle,
    /// Connecting, or subscribing after a connection was lost.
    Connecting,
    /// Connected and subscribed to every key that has waiters.
    Up,
    /// The last connection or subscription failed with this error (retried with backoff).
    Failed(redis::RedisError),
}

/// Whether push wake-up works, as far as a locker can tell ([`Locker::wake_up_state`]).
///
/// While it does not, waiting acquires are not stuck: they poll per their retry strategy,
/// as they always do for what no release announces.
///
/// [`Locker::wake_up_state`]: crate::Locker::wake_up_state
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{memory::MemoryRedis, retry, Locker, WakeUpState};
/// assert!(matches!(Locker::new(MemoryRedis::new()).wake_up_state(), WakeUpState::Off));
/// let locker = Locker::in_memory(); // with wake-up
/// assert!(matches!(locker.wake_up_state(), WakeUpState::Idle)); // nobody waited yet
/// let held = locker.acquire("job", Duration::from_secs(30)).await?;
/// let waited = locker
///     .acquire("job", Duration::from_secs(30))
///     .retry(retry::constant(Duration::from_millis(100)))
///     .deadline(Duration::from_secs(1))
///     .await;
/// assert!(waited.unwrap_err().is_not_obtained());
/// assert!(matches!(locker.wake_up_state(), WakeUpState::Working));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum WakeUpState {
    /// Not configured ([`Locker::with_wake_up`](crate::Locker::with_wake_up) not called).
    Off,
    /// Configured, and no acquire has had to wait yet: no subscriber connection is open.
    Idle,
    /// A subscriber connection is being (re)established.
    Connecting,
    /// Every node's subscriber connection is up and subscribed to the keys waited for.
    Working,
    /// A node's subscriber connection or subscription fails (retried with backoff): a
    /// server that is down, or an ACL user without permission for `SUBSCRIBE` or the key's
    /// channel ([`redmutex::check::acl_rule`](crate::check::acl_rule) has both).
    Failing {
        /// The node's position (0 for a single node).
        node: usize,
        /// The last error.
        error: redis::RedisError,
    },
}

impl WakeUpState {
    /// Failing because the ACL user may not subscribe (to the keys' channels): no retry
    /// helps until the user gets the permission.
    ///
    /// ```
    /// use redis::{ErrorKind, RedisError, ServerErrorKind};
    /// use redmutex::WakeUpState;
    /// let noperm = RedisError::from((ErrorKind::Server(ServerErrorKind::NoPerm), "denied"));
    /// let refused = WakeUpState::Failing { node: 0, error: noperm };
    /// assert!(refused.is_permission_denied()); // grant SUBSCRIBE: no retry helps
    /// let down = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
    /// assert!(!WakeUpState::Failing { node: 0, error: down }.is_permission_denied());
    /// ```
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, WakeUpState::Failing { error, .. } if crate::classify::is_no_permission(error))
    }
}

/// The waiters of one key.
struct Channel {
    wake: Notify,
    /// One owner at a time holds the key (a lock): a release frees it for one waiter.
    /// Otherwise (a semaphore) a release frees room for as many waiters as it announces.
    exclusive: bool,
    state: Mutex<ChannelState>,
}

struct ChannelState {
    members: usize,
    /// How many units each member wants (a semaphore's waiters: permits; 1 otherwise):
    /// waiters of one locker wanting as many share its place in the key's line.
    units: Vec<u32>,
    /// Since when the channel has had no members (it lingers for [`LINGER`]).
    idle_since: Option<Instant>,
    /// Which nodes confirmed the subscription.
    confirmed: Vec<bool>,
    /// Turns handed out whose waiters have not yet said what their try found (on an
    /// exclusive channel at most one: the baton).
    turns: usize,
    /// Of those, turns no waiter has taken up yet.
    unclaimed: usize,
    /// Why the latest turn was handed out.
    why: Wake,
    /// Announcements no turn could be handed out for: exclusive, any that came while the
    /// baton was out (counted as one); otherwise, permits freed while every waiter was
    /// already trying.
    pending: usize,
    /// The nodes that announced a release since the last announcement that counted (on
    /// Redlock, a release counts once a quorum of nodes announced it).
    heard: Vec<bool>,
    /// A waiter of this locker got the key and no release was announced since: the holder
    /// is marked, and newcomers can queue even when nobody else waits — until this instant,
    /// when its lease runs out unless renewed: a holder that lets it expire announces
    /// nothing, so no newcomer waits for it longer than that.
    held_by_waiter: Option<Instant>,
    /// Waiters that queued without a try and have not tried since (see [`Entry::Queue`]):
    /// they count on the others' tries to learn how long the key is held.
    untried: usize,
    /// An announcement came while nobody waited here (see [`Channel::announce`]): the
    /// next waiter to join re-checks, since what it announced reached no one.
    missed: bool,
    /// Until when the latest try of a waiter here found the key held, if it said: a
    /// holder that runs out announces nothing, and a newcomer that queues without a try
    /// (see [`Entry::Queue`]) wakes then — or tries at once once it has passed.
    seen_until: Option<Instant>,
    /// The units of the places a try of this locker put back at the end of the key's line
    /// as it took the key (for the others that waited then): the last of those others to
    /// go withdraws the place, or releases would hand the key to a locker nobody waits in.
    kept: Vec<u32>,
}

/// What a lease does when a request to let go is announced: renew at once.
pub(crate) type Prompt = Arc<dyn Fn() + Send + Sync>;

/// The leases listening on one ask channel.
struct Listeners {
    prompts: Vec<(u64, Prompt)>,
    /// Since when nobody listens (it lingers for [`LINGER`], as a waiters' channel does).
    idle_since: Option<Instant>,
    /// A subscriber connection that carried it was lost: a request announced meanwhile
    /// went unheard, so the listeners are prompted once it is subscribed again.
    lapsed: bool,
}

impl Listeners {
    /// Every listener's prompt, to call once the lock is let go.
    fn all(&self) -> impl Iterator<Item = Prompt> + '_ {
        self.prompts.iter().map(|(_, prompt)| prompt.clone())
    }
}

/// A lease's place among the listeners of an ask channel; dropping it leaves.
pub(crate) struct Listening {
    hub: Weak<Hub>,
    channel: Box<[u8]>,
    id: u64,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let mut listeners = lock(&hub.listeners);
        if let Some(on) = listeners.get_mut(&self.channel) {
            on.prompts.retain(|(id, _)| *id != self.id);
            if on.prompts.is_empty() {
                on.idle_since = Some(Instant::now());
            }
        }
    }
}

/// How a newcomer joins the waiters of a key (see [`Hub::enter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Make the first try, as a waiter.
    Try,
    /// Queue without a try, at most until `expires` (when known).
    Queue { expires: Option<Instant> },
}

/// One waiting acquire's place at a key.
pub(crate) struct Member {
    key: Box<[u8]>,
    channel: Arc<Channel>,
    /// Woken, and its try not reported yet.
    turn: bool,
    /// Its last try obtained what it waited for.
    obtained: bool,
    /// Its acquire goes on waiting, for another of its keys (see [`Member::move_on`]).
    moved: bool,
    /// How many units it wants (see [`ChannelState::units`]).
    units: u32,
    /// Its units are counted in [`ChannelState::units`] (until it leaves).
    counted: bool,
    /// It queued without a try and has not tried since.
    untried: bool,
}

impl Hub {
    /// A hub over one subscriber client per node; a subscription counts once `needed`
    /// nodes confirmed it.
    pub(crate) fn new(sources: Vec<WakeUpSource>, needed: usize) -> Hub {
        Hub {
            channels: Mutex::new(BTreeMap::new()),
            listeners: Mutex::new(BTreeMap::new()),
            next_listener: AtomicU64::new(0),
            subscribers: sources
                .into_iter()
                .map(|source| Subscriber {
                    source,
                    keys: Mutex::new(None),
                    status: Mutex::new(NodeStatus::Idle),
                })
                .collect(),
            needed,
        }
    }

    /// Before a first try: joins the waiters of `key` if the key is subscribed (it has
    /// waiters, or had some within [`LINGER`]). Returns the place and how to go on:
    /// - [`Entry::Queue`]: others already wait. The holder is marked (by them, or by a
    ///   waiter's own value), so its release will be announced: wait for a turn without a
    ///   try — at most until `expires`, when a waiter's lease held now runs out unless
    ///   renewed.
    /// - [`Entry::Try`]: nobody waits now, but the key was contended a moment ago. Make the
    ///   first try as a waiter (mark the holder, or store an "awaited" value), so that
    ///   newcomers can queue behind this one instead of all trying at once.
    ///
    /// `behind_holder`: a newcomer may queue behind a holder of this locker that was a
    /// waiter even when nobody else waits — where nobody lines up, since that holder's
    /// value says "awaited" and any release of it, forced or expired-and-taken, is
    /// announced on the key's own channel. Where lockers line up, waiters hear only their
    /// locker's turn channel, and the locker left the line when its holder took the key:
    /// a forced release of that key would tell the line, not them. There the first
    /// newcomer tries, which puts its locker back in line.
    pub(crate) fn enter(
        &self,
        key: &[u8],
        units: u32,
        behind_holder: bool,
    ) -> Option<(Member, Entry)> {
        let channels = lock(&self.channels);
        let channel = channels.get(key)?;
        let mut state = lock(&channel.state);
        if !self.subscribed(&state) {
            return None;
        }
        let now = Instant::now();
        let held_by_waiter = (state.held_by_waiter).filter(|until| behind_holder && *until > now);
        // What the others' tries saw: the key may have run out since (seed 6848: a holder
        // that shortened its lease and stopped, while the one waiter left here slept on
        // the longer TTL its own try had seen).
        let seen = (state.seen_until).filter(|_| state.members > 0);
        let entry = match (state.members, held_by_waiter.or(seen)) {
            (_, Some(until)) if until <= now => Entry::Try,
            (0, None) => Entry::Try,
            (_, expires) => Entry::Queue { expires },
        };
        let mut member = Member::admit(key, channel, &mut state, units);
        if let Entry::Queue { .. } = entry {
            member.untried = true;
            state.untried += 1;
        }
        Some((member, entry))
    }

    /// Before a first try that takes a place in a queue kept in Redis (see
    /// [`Waits::queue`](crate::scripts::Waits::queue)): joins the waiters of `key` if the
    /// key is subscribed, so that a turn announced while the try is under way is not
    /// missed. The try is made whatever others wait: it is what takes the place.
    pub(crate) fn admit(&self, key: &[u8], units: u32) -> Option<Member> {
        let channels = lock(&self.channels);
        let channel = channels.get(key)?;
        let mut state = lock(&channel.state);
        match self.subscribed(&state) {
            true => Some(Member::admit(key, channel, &mut state, units)),
            false => None,
        }
    }

    /// Joins (or starts) the waiters of `key`; the key is subscribed to if it was not.
    /// `exclusive`: the key is held by one owner at a time (see [`Channel`]); `units`: how
    /// many of its units the waiter wants (a semaphore's permits); `moved`: a waiter for
    /// several keys that waited on another of them until its try found this one held.
    pub(crate) fn join(
        self: &Arc<Self>,
        key: &[u8],
        exclusive: bool,
        units: u32,
        moved: bool,
    ) -> Member {
        let mut channels = lock(&self.channels);
        let mut created = false;
        let channel = channels
            .entry(key.into())
            .or_insert_with(|| {
                created = true;
                Arc::new(Channel {
                    wake: Notify::new(),
                    exclusive,
                    state: Mutex::new(ChannelState {
                        members: 0,
                        units: Vec::new(),
                        idle_since: None,
                        confirmed: vec![false; self.subscribers.len()],
                        turns: 0,
                        kept: Vec::new(),
                        unclaimed: 0,
                        why: Wake::Released,
                        pending: 0,
                        heard: vec![false; self.subscribers.len()],
                        held_by_waiter: None,
                        untried: 0,
                        missed: false,
                        seen_until: None,
                    }),
                })
            })
            .clone();
        let mut state = lock(&channel.state);
        let missed = state.missed;
        let member = Member::admit(key, &channel, &mut state, units);
        // A lingering subscription has nobody who marked the holder since: the first new
        // waiter re-checks, as after a new subscription. A waiter for several keys that
        // moves here from another of them (its try found this one held, and marked it)
        // re-checks only if a release announced here meanwhile reached no one: it moves
        // from key to key as its tries find one or the other held, and a re-check at every
        // move made lockers waiting for the same keys try again at once, round and round,
        // while a holder kept one of them (simulator seed 171).
        if state.members == 1 && (missed || !moved) && self.subscribed(&state) {
            channel.announce(&mut state, Wake::Subscribed, 1);
        }
        drop(state);
        drop(channels);
        if created {
            self.sync(key);
        }
        member
    }

    /// Listens on `channel` (a key's ask channel) until the returned [`Listening`] is
    /// dropped: a message there calls `prompt`. The channel is subscribed to if it was not.
    pub(crate) fn listen(self: &Arc<Self>, channel: &[u8], prompt: Prompt) -> Listening {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        let mut listeners = lock(&self.listeners);
        let created = !listeners.contains_key(channel);
        let on = listeners.entry(channel.into()).or_insert(Listeners {
            prompts: Vec::new(),
            idle_since: None,
            lapsed: false,
        });
        on.prompts.push((id, prompt));
        on.idle_since = None;
        drop(listeners);
        if created {
            self.sync(channel);
        }
        Listening {
            hub: Arc::downgrade(self),
            channel: channel.into(),
            id,
        }
    }

    fn subscribed(&self, state: &ChannelState) -> bool {
        state.confirmed.iter().filter(|c| **c).count() >= self.needed
    }

    /// A claim at `key` held by this locker now ends sooner than it did, at `until` (it
    /// was refreshed to a shorter TTL, or lost): newcomers that queue behind it without a
    /// try wait no longer than that, and one waiter tries again to learn it — the others'
    /// waits were set by what their tries saw.
    pub(crate) fn held_until(&self, key: &[u8], until: Instant) {
        let channel = lock(&self.channels).get(key).cloned();
        if let Some(channel) = channel {
            let mut state = lock(&channel.state);
            if state.held_by_waiter.is_some() {
                state.held_by_waiter = Some(until);
            }
            channel.announce(&mut state, Wake::Local, 1);
        }
    }

    /// How many of this locker's waiters wait on `key`'s channel.
    pub(crate) fn waiters_at(&self, key: &[u8]) -> usize {
        let channel = lock(&self.channels).get(key).cloned();
        channel.map_or(0, |channel| lock(&channel.state).members)
    }

    /// Whether `member`'s channel is subscribed: a release announced there reaches it.
    pub(crate) fn hears(&self, member: &Member) -> bool {
        self.subscribed(&lock(&member.channel.state))
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
                subscriber.source.clone(),
                rx,
            ));
        }
    }

    /// Records whether `node` is subscribed to `keys`; a subscription that becomes
    /// confirmed by enough nodes wakes one waiter to re-check.
    fn confirm(&self, node: usize, keys: Option<&[Box<[u8]>]>, confirmed: bool) {
        self.relisten(keys, confirmed);
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
            if !confirmed {
                // Its release may go unheard now.
                state.held_by_waiter = None;
            }
            if !was && self.subscribed(&state) {
                // Releases may have gone unheard: on a lock one waiter re-checks (and
                // hands on if the key is free); a semaphore may have freed permits for
                // all of its waiters, who each re-check.
                let recheck = match channel.exclusive {
                    true => 1,
                    false => state.members.max(1),
                };
                channel.announce(&mut state, Wake::Subscribed, recheck);
            }
        }
    }

    /// The listeners' side of [`confirm`](Hub::confirm): a lost connection lapses every
    /// ask channel; a lapsed one subscribed again prompts its listeners to renew, which
    /// finds any request announced while nobody heard.
    fn relisten(&self, keys: Option<&[Box<[u8]>]>, confirmed: bool) {
        let mut prompts: Vec<Prompt> = Vec::new();
        let mut listeners = lock(&self.listeners);
        match (keys, confirmed) {
            (None, false) => listeners.values_mut().for_each(|on| on.lapsed = true),
            (Some(keys), false) => {
                for key in keys {
                    if let Some(on) = listeners.get_mut(key) {
                        on.lapsed = true;
                    }
                }
            }
            (Some(keys), true) => {
                for key in keys {
                    if let Some(on) = listeners.get_mut(key)
                        && std::mem::take(&mut on.lapsed)
                    {
                        prompts.extend(on.all());
                    }
                }
            }
            (None, true) => {}
        }
        drop(listeners);
        for prompt in prompts {
            prompt();
        }
    }

    /// A release announced on `key` by `node`, with what it freed: `freed` permits of a
    /// semaphore (a lock's release says no number: it frees the one key). Where a quorum
    /// decides, it counts once a quorum of nodes announced a release: one node's alone
    /// frees nothing anyone can take — it is usually a failed try undone there, and
    /// waking the waiters for it would have them try, fail and undo in turn, waking each
    /// other without end while the key is held elsewhere.
    fn released(&self, node: usize, key: &[u8], freed: usize) {
        // A request to let go, for the leases listening (on any node: it only prompts a
        // renewal, which counts the nodes itself). A user's key may be named like another
        // key's ask channel: its waiters and the listeners then each take the other's
        // messages as prompts, which costs a try or a renewal and nothing more.
        let prompts: Vec<Prompt> = (lock(&self.listeners).get(key))
            .map(|on| on.all().collect())
            .unwrap_or_default();
        for prompt in prompts {
            prompt();
        }
        let channel = lock(&self.channels).get(key).cloned();
        if let Some(channel) = channel {
            let mut state = lock(&channel.state);
            if let Some(heard) = state.heard.get_mut(node) {
                *heard = true;
            }
            if state.heard.iter().filter(|h| **h).count() < self.needed {
                return;
            }
            state.heard.iter_mut().for_each(|h| *h = false);
            tracing::trace!(
                channel = %String::from_utf8_lossy(key),
                freed,
                waiters = state.members,
                "redmutex: release heard"
            );
            state.held_by_waiter = None;
            channel.announce(&mut state, Wake::Released, freed);
        }
    }

    /// Whether each node's subscriber client may subscribe to `channel`: a connection of
    /// its own, one SUBSCRIBE, then closed ([`crate::Locker::check_server`]).
    pub(crate) async fn probe(&self, channel: &[u8]) -> Vec<redis::RedisResult<()>> {
        let probes = self.subscribers.iter().map(|subscriber| async move {
            let connect = subscriber.source.0.open();
            let (mut sink, _messages) = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .unwrap_or_else(|_| Err(timed_out("connecting a probe subscriber")))?;
            answered(sink.subscribe(vec![channel.to_vec()])).await?;
            answered(sink.unsubscribe(vec![channel.to_vec()])).await
        });
        futures_util::future::join_all(probes).await
    }

    /// How the subscriber connections fare: failing if any node fails.
    pub(crate) fn state(&self) -> WakeUpState {
        let statuses: Vec<NodeStatus> = (self.subscribers.iter())
            .map(|s| lock(&s.status).clone())
            .collect();
        if let Some((node, error)) = statuses.iter().enumerate().find_map(|(n, s)| match s {
            NodeStatus::Failed(e) => Some((n, e.clone())),
            _ => None,
        }) {
            return WakeUpState::Failing { node, error };
        }
        if statuses.iter().all(|s| matches!(s, NodeStatus::Up)) {
            WakeUpState::Working
        } else if statuses.iter().all(|s| matches!(s, NodeStatus::Idle)) {
            WakeUpState::Idle
        } else {
            WakeUpState::Connecting
        }
    }

    /// Records how `node`'s connection fares; a new kind of failure is logged (once per
    /// change, not per retry), so that a refused subscription does not go unnoticed.
    fn set_status(&self, node: usize, status: NodeStatus) {
        let mut current = lock(&self.subscribers[node].status);
        if let NodeStatus::Failed(error) = &status {
            let same =
                matches!(&*current, NodeStatus::Failed(e) if e.to_string() == error.to_string());
            if !same {
                let hint = match crate::classify::is_no_permission(error) {
                    true => "; the ACL user needs +subscribe and the keys' channels (see redmutex::check::acl_rule)",
                    false => "",
                };
                tracing::warn!(
                    node,
                    "redmutex: wake-up subscriber failing, waiters poll instead: {error}{hint}"
                );
            }
        }
        *current = status;
    }

    /// The channels that have waiters or listeners now (or had them within [`LINGER`]).
    fn keys(&self) -> Vec<Box<[u8]>> {
        let mut keys: Vec<Box<[u8]>> = lock(&self.channels).keys().cloned().collect();
        keys.extend(lock(&self.listeners).keys().cloned());
        keys
    }

    /// Drops the channels that have had no waiters for [`LINGER`], and unsubscribes them.
    fn sweep(self: &Arc<Self>) {
        let now = Instant::now();
        let mut gone = Vec::new();
        lock(&self.channels).retain(|key, channel| {
            let idle = lock(&channel.state)
                .idle_since
                .is_some_and(|since| now.duration_since(since) >= LINGER);
            if idle {
                gone.push(key.clone());
            }
            !idle
        });
        lock(&self.listeners).retain(|channel, on| {
            let idle = (on.idle_since).is_some_and(|since| now.duration_since(since) >= LINGER);
            if idle {
                gone.push(channel.clone());
            }
            !idle
        });
        for key in gone {
            self.sync(&key);
        }
    }
}

impl Channel {
    /// Wakes one waiter just after `until`, when a waiter of this locker's lease, obtained
    /// with that validity, may have run out without a release: unless a release (or a new
    /// validity) was heard meanwhile.
    fn wake_at_expiry(self: &Arc<Self>, until: Instant) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let channel = Arc::downgrade(self);
        runtime.spawn(async move {
            tokio::time::sleep_until(until + Duration::from_millis(1)).await;
            let Some(channel) = channel.upgrade() else {
                return;
            };
            let mut state = lock(&channel.state);
            if state.held_by_waiter == Some(until) {
                state.held_by_waiter = None;
                channel.announce(&mut state, Wake::Local, 1);
            }
        });
    }

    /// Hands out turns for what a release freed. Exclusive: the longest waiter gets the
    /// turn, unless one is already trying; then the announcement is remembered. Otherwise:
    /// up to `freed` waiters that are not trying get one each.
    fn announce(&self, state: &mut ChannelState, why: Wake, freed: usize) {
        if state.members == 0 {
            // Nobody to wake; a newcomer finds out with its own first try, and a waiter
            // whose try came before it re-checks as it joins (see [`Hub::join`]).
            state.missed = true;
            return;
        }
        let turns = match self.exclusive {
            true if state.turns > 0 => {
                state.pending = 1;
                0
            }
            true => 1,
            false => {
                let turns = freed.min(state.members.saturating_sub(state.turns));
                // More than one per waiter would only cost tries.
                state.pending = (state.pending + freed - turns).min(state.members);
                turns
            }
        };
        state.turns += turns;
        state.unclaimed += turns;
        if turns > 0 {
            state.why = why;
        }
        for _ in 0..turns {
            // With nobody waiting right now (all between tries), the turn stays unclaimed
            // for the next one to look.
            self.wake.notify_one();
        }
    }
}

impl Member {
    /// A new waiter at `channel`, whose state the caller has locked.
    fn admit(key: &[u8], channel: &Arc<Channel>, state: &mut ChannelState, units: u32) -> Member {
        state.members += 1;
        state.units.push(units);
        state.idle_since = None;
        state.missed = false;
        Member {
            key: key.into(),
            channel: channel.clone(),
            turn: false,
            obtained: false,
            moved: false,
            untried: false,
            units,
            counted: true,
        }
    }

    /// The key this member waits for.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Whether no other waiter of this locker waits for the key wanting as many units (the
    /// locker's place in its line is this waiter's alone).
    pub(crate) fn alone(&self) -> bool {
        let state = lock(&self.channel.state);
        state
            .units
            .iter()
            .filter(|units| **units == self.units)
            .count()
            == 1
    }

    /// Its try took the key and put the locker's place back at the end of the line, for
    /// the others of this locker that waited (see [`ChannelState::kept`]).
    pub(crate) fn kept_place(&self) {
        let mut state = lock(&self.channel.state);
        if !state.kept.contains(&self.units) {
            state.kept.push(self.units);
        }
    }

    /// Stops waiting. Whether the locker's place must be withdrawn from the key's line:
    /// this was the last of the locker's waiters wanting as many units, and the place may
    /// be there — `in_line` (its own tries put it there), or kept for others (see
    /// [`Member::kept_place`]). Decided under the lock that counts the waiters: of two
    /// that leave at once, exactly the second withdraws.
    pub(crate) fn leave(mut self, in_line: bool) -> bool {
        let mut state = lock(&self.channel.state);
        if let Some(mine) = state.units.iter().position(|units| *units == self.units) {
            state.units.swap_remove(mine);
        }
        self.counted = false;
        if state.units.contains(&self.units) {
            return false;
        }
        let kept = state.kept.iter().position(|units| *units == self.units);
        if let Some(at) = kept {
            state.kept.swap_remove(at);
        }
        // The rest of leaving (turns, members) is Drop's, which takes the lock again.
        drop(state);
        in_line || kept.is_some()
    }

    /// Waits for this member's turn.
    ///
    /// Cancel safe: a turn is taken up only when this returns; a wake-up that reaches a
    /// dropped wait passes to the next waiter.
    pub(crate) async fn woken(&mut self) -> Wake {
        loop {
            // Registered before looking, so that no turn handed out in between is missed.
            let notified = self.channel.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = lock(&self.channel.state);
                if state.unclaimed > 0 {
                    state.unclaimed -= 1;
                    self.turn = true;
                    tracing::trace!(why = ?state.why, "redmutex: waiter woken");
                    return state.why;
                }
            }
            notified.await;
        }
    }

    /// This member saw the key free without taking it (a wait for its release): the
    /// others of this locker, which may have queued behind it without a try, are told —
    /// one of them tries now — as no release may have been announced (a key that ran out).
    pub(crate) fn saw_free(&mut self) {
        let mut state = lock(&self.channel.state);
        if state.members > 1 {
            state.held_by_waiter = None;
            self.channel.announce(&mut state, Wake::Local, 1);
        }
    }

    /// Leaves this key's waiters for another key of the same acquire (several keys, all or
    /// nothing: its last try found this other one held). The acquire is not gone — it goes
    /// on trying every key on its schedule — and the holder it marked still announces its
    /// release to the waiters left here; only those that queued without a try of their
    /// own (and so do not know how long the key is held) are owed a turn, as when a
    /// waiter gives up. (Waking one of any kind made two such acquires of one locker, each
    /// finding the other's key in turn, wake each other without end, and without time
    /// passing.)
    pub(crate) fn move_on(mut self) {
        self.moved = true;
    }

    /// Reports what this member's try found. After a wake-up, that settles its turn.
    pub(crate) fn tried(&mut self, outcome: Outcome) {
        let mut state = lock(&self.channel.state);
        if std::mem::take(&mut self.untried) {
            state.untried -= 1;
        }
        self.obtained = matches!(outcome, Outcome::Obtained { .. });
        match outcome {
            Outcome::Held { until } => state.seen_until = until,
            Outcome::Obtained { .. } => state.seen_until = None,
            Outcome::HeldElsewhere { passed: true } => state.seen_until = Some(Instant::now()),
            Outcome::HeldElsewhere { passed: false } | Outcome::Failed => {}
        }
        if let (Outcome::Obtained { until }, true) = (outcome, self.channel.exclusive) {
            // Our value says "awaited": its release will be announced.
            state.held_by_waiter = Some(until);
            // The others of this locker that wait may have queued without a try: they do not
            // know how long the key is held now. Should it run out unreleased (a holder
            // that stopped), one of them is woken then to try.
            if state.members > 1 {
                self.channel.wake_at_expiry(until);
            }
        }
        if !std::mem::take(&mut self.turn) {
            if outcome == (Outcome::HeldElsewhere { passed: true }) && state.members > 1 {
                // The others here wait by the TTLs their tries saw: the key may have run
                // out since, announcing nothing (a holder that shortened its lease and
                // stopped: seed 4910). One of them tries now.
                self.channel.announce(&mut state, Wake::Local, 1);
            }
            return;
        }
        state.turns -= 1;
        let pending = std::mem::take(&mut state.pending);
        // Exclusive — held: a release announced while we tried may be a newer one than
        // ours; let the next waiter look. Obtained: announcements so far are of releases
        // before ours. Otherwise the permits freed while everyone was trying are still
        // free (but perhaps the ones we got): hand them out now.
        let unused = matches!(outcome, Outcome::HeldElsewhere { .. }) && state.members > 1;
        let hand_on = match self.channel.exclusive {
            true => usize::from((matches!(outcome, Outcome::Held { .. }) && pending > 0) || unused),
            false => pending,
        };
        if hand_on > 0 {
            self.channel.announce(&mut state, Wake::Released, hand_on);
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut state = lock(&self.channel.state);
        state.members -= 1;
        let mine = state.units.iter().position(|units| *units == self.units);
        if let (Some(mine), true) = (mine, self.counted) {
            state.units.swap_remove(mine);
        }
        if self.untried {
            state.untried -= 1;
        }
        if self.turn {
            state.turns -= 1;
            if state.members > 0 {
                // Woken but gone without a try (given up, cancelled): pass the turn on.
                self.channel.announce(&mut state, Wake::Released, 1);
            } else {
                state.pending = 0;
            }
        } else if !self.obtained
            && (!self.moved || state.untried > 0)
            && state.members > 0
            && state.turns == 0
            && self.channel.exclusive
        {
            // Gone without the key (given up, cancelled) while others of this locker wait
            // — perhaps queued behind it without a try of their own, counting on its
            // tries: one of them tries now, and learns how long the key is held.
            self.channel.announce(&mut state, Wake::Released, 1);
        }
        // Turns nobody is left to take up are no turns: more unclaimed than members
        // without a turn.
        let without_turn = state.members - (state.turns - state.unclaimed);
        let stale = state.unclaimed.saturating_sub(without_turn);
        state.unclaimed -= stale;
        state.turns -= stale;
        if state.members == 0 {
            // Lingers, subscribed, until swept (see `LINGER`); no turn is owed to anyone.
            state.idle_since = Some(Instant::now());
            state.turns = 0;
            state.unclaimed = 0;
            state.pending = 0;
            state.seen_until = None;
        }
    }
}

/// The task behind one node's subscriber connection: connects (again after any failure,
/// with backoff), keeps the subscriptions in line with the hub's channels, and delivers
/// announcements. Ends when the hub is gone.
async fn serve(
    hub: Weak<Hub>,
    node: usize,
    source: WakeUpSource,
    mut keys: mpsc::UnboundedReceiver<Box<[u8]>>,
) {
    let mut backoff = RECONNECT_MIN;
    loop {
        let ended = match connect(&hub, node, &source).await {
            Err(ended) => ended,
            Ok((mut sink, stream)) => {
                // Whatever was queued is covered by subscribing to every key the hub has.
                while keys.try_recv().is_ok() {}
                let Some(all) = hub.upgrade().map(|hub| hub.keys()) else {
                    return;
                };
                match reconcile(&hub, node, &mut *sink, all).await {
                    Some(unheard) => {
                        backoff = RECONNECT_MIN;
                        relay(&hub, node, &mut *sink, stream, &mut keys, unheard).await
                    }
                    None => Ended::ConnectionLost,
                }
            }
        };
        // Connection lost: no wake-up can be trusted until subscribed again.
        match (ended, hub.upgrade()) {
            (Ended::ConnectionLost, Some(hub)) => hub.confirm(node, None, false),
            _ => return,
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// What ended a subscriber connection's work.
enum Ended {
    /// Every locker of the hub is gone: the task ends.
    HubGone,
    /// The connection failed or was refused: connect again after a pause.
    ConnectionLost,
}

/// Opens `node`'s subscriber connection, recording how it fares.
async fn connect(
    hub: &Weak<Hub>,
    node: usize,
    source: &WakeUpSource,
) -> Result<(Box<dyn SubscriberSink>, Messages), Ended> {
    let Some(strong) = hub.upgrade() else {
        return Err(Ended::HubGone);
    };
    strong.set_status(node, NodeStatus::Connecting);
    // Channels whose waiters left are dropped even while no connection is up, so that a
    // subscriber that keeps failing holds only the keys waited for now (and asks for no
    // more than those on its next try), and the other nodes' subscribers, which may be
    // up, unsubscribe from them.
    strong.sweep();
    drop(strong);
    let connected = tokio::time::timeout(CONNECT_TIMEOUT, source.0.open()).await;
    let error = match connected {
        Ok(Ok(opened)) => return Ok(opened),
        Ok(Err(e)) => e,
        Err(_) => timed_out("connecting the wake-up subscriber"),
    };
    match hub.upgrade() {
        Some(hub) => hub.set_status(node, NodeStatus::Failed(error)),
        None => return Err(Ended::HubGone),
    }
    Err(Ended::ConnectionLost)
}

/// Serves a subscribed connection: delivers announcements, brings subscriptions in line
/// with the waiters, sweeps lingering channels and checks the connection's health, until
/// the connection fails or the hub is gone.
///
/// `unheard`: channels the connection could not subscribe, or lost, while it stands for the
/// others (a cluster's shard whose master does not answer): subscribed again every
/// [`RECONNECT_MIN`]…[`RECONNECT_MAX`], backing off, until they are.
async fn relay(
    hub: &Weak<Hub>,
    node: usize,
    sink: &mut dyn SubscriberSink,
    mut stream: Messages,
    keys: &mut mpsc::UnboundedReceiver<Box<[u8]>>,
    mut unheard: Vec<Box<[u8]>>,
) -> Ended {
    let mut health = tokio::time::interval(HEALTH_CHECK);
    health.reset();
    let mut sweep = tokio::time::interval(LINGER);
    sweep.reset();
    let mut backoff = RECONNECT_MIN;
    let retry = tokio::time::sleep(backoff);
    tokio::pin!(retry);
    loop {
        // In a fixed order: announcements first, so that a run is a function of its
        // inputs (the simulator replays runs).
        tokio::select! {
            biased;
            message = stream.next() => {
                let Some(message) = message else { return Ended::ConnectionLost };
                let Some(hub) = hub.upgrade() else { return Ended::HubGone };
                // A semaphore's release says how many permits it freed.
                let freed = std::str::from_utf8(&message.payload).ok().and_then(|p| p.parse().ok());
                hub.released(node, &message.channel, freed.unwrap_or(1));
            }
            key = keys.recv() => {
                let Some(key) = key else { return Ended::HubGone };
                let mut batch = vec![key];
                while let Ok(key) = keys.try_recv() {
                    batch.push(key);
                }
                match reconcile(hub, node, sink, batch).await {
                    Some(more) => unheard.extend(more),
                    None => return Ended::ConnectionLost,
                }
            }
            () = &mut retry, if !unheard.is_empty() => {
                match reconcile(hub, node, sink, std::mem::take(&mut unheard)).await {
                    Some(still) => unheard = still,
                    None => return Ended::ConnectionLost,
                }
                backoff = match unheard.is_empty() {
                    true => RECONNECT_MIN,
                    false => (backoff * 2).min(RECONNECT_MAX),
                };
                retry.as_mut().reset(Instant::now() + backoff);
            }
            _ = sweep.tick() => match hub.upgrade() {
                Some(hub) => hub.sweep(),
                None => return Ended::HubGone,
            },
            _ = health.tick() => {
                let ping = tokio::time::timeout(RESPONSE_TIMEOUT, sink.ping());
                let Ok(Ok(lapsed)) = ping.await else {
                    return Ended::ConnectionLost;
                };
                // A shard that does not answer: its announcements may go unheard until
                // it is subscribed again.
                let Some(strong) = hub.upgrade() else { return Ended::HubGone };
                let lapsed: Vec<Box<[u8]>> = lapsed.into_iter().map(Vec::into_boxed_slice).collect();
                if !lapsed.is_empty() {
                    strong.confirm(node, Some(&lapsed), false);
                    strong.set_status(node, NodeStatus::Failed(timed_out("a shard's health check")));
                    unheard.extend(lapsed);
                    retry.as_mut().reset(Instant::now() + backoff);
                }
            }
        }
    }
}

/// Subscribes to those of `keys` that have waiters and unsubscribes from the others, then
/// records the confirmations and the connection's status. Returns the channels left
/// unheard (see [`Unheard`](crate::pubsub::Unheard)), or `None` when the connection failed.
async fn reconcile(
    hub: &Weak<Hub>,
    node: usize,
    sink: &mut dyn SubscriberSink,
    mut keys: Vec<Box<[u8]>>,
) -> Option<Vec<Box<[u8]>>> {
    let strong = hub.upgrade()?;
    keys.sort_unstable();
    keys.dedup();
    let (wanted, unwanted): (Vec<_>, Vec<_>) = {
        let (channels, listeners) = (lock(&strong.channels), lock(&strong.listeners));
        (keys.into_iter())
            .partition(|key| channels.contains_key(key) || listeners.contains_key(key))
    };
    drop(strong);
    let names = |keys: &[Box<[u8]>]| keys.iter().map(|k| k.to_vec()).collect::<Vec<Vec<u8>>>();
    let outcome = async {
        if !unwanted.is_empty() {
            answered(sink.unsubscribe(names(&unwanted))).await?;
        }
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let unheard = answered(sink.subscribe(names(&wanted))).await?;
        let (unheard, heard): (Vec<_>, Vec<_>) =
            (wanted.into_iter()).partition(|key| unheard.iter().any(|u| **u == **key));
        if let Some(hub) = hub.upgrade() {
            hub.confirm(node, Some(&heard), true);
        }
        Ok(unheard)
    };
    let outcome = outcome.await;
    let hub = hub.upgrade()?;
    match outcome {
        Ok(unheard) if unheard.is_empty() => {
            hub.set_status(node, NodeStatus::Up);
            Some(unheard)
        }
        Ok(unheard) => {
            let error = timed_out("the subscription of a shard's channels");
            hub.set_status(node, NodeStatus::Failed(error));
            Some(unheard)
        }
        Err(error) => {
            hub.set_status(node, NodeStatus::Failed(error));
            None
        }
    }
}

/// A subscriber request's answer within [`RESPONSE_TIMEOUT`].
async fn answered<T>(
    request: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    tokio::time::timeout(RESPONSE_TIMEOUT, request)
        .await
        .unwrap_or_else(|_| Err(timed_out("a wake-up subscription")))
}

fn timed_out(what: &str) -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer to {what} within {RESPONSE_TIMEOUT:?}"),
    )
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::{RedisServer, ServerOptions};

    /// A subscriber that keeps being refused (the user may not subscribe) still drops the
    /// channels of keys nobody waits for any more: memory holds the keys waited for now,
    /// not every key ever waited for.
    #[tokio::test]
    async fn a_refused_subscriber_keeps_only_the_channels_waited_for_now() {
        let server = RedisServer::spawn_with(ServerOptions {
            extra_args: testkit::acl_user("nosub on >pw ~* resetchannels +@all"),
            ..ServerOptions::default()
        });
        let url = format!("redis://nosub:pw@127.0.0.1:{}", server.port());
        let client = redis::Client::open(url).unwrap();
        let hub = Arc::new(Hub::new(vec![client.into()], 1));
        for i in 0..2_000 {
            drop(hub.join(format!("key-{i}").as_bytes(), true, 1, false));
        }
        let still_waiting = hub.join(b"still-waiting", true, 1, false);
        let until = Instant::now() + Duration::from_secs(10);
        while !hub.state().is_permission_denied() {
            assert!(Instant::now() < until, "{:?}", hub.state());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let until = Instant::now() + LINGER + 3 * RECONNECT_MAX;
        while lock(&hub.channels).len() > 1 {
            assert!(
                Instant::now() < until,
                "{} channels kept",
                lock(&hub.channels).len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(hub.keys(), [b"still-waiting".to_vec().into_boxed_slice()]);
        drop(still_waiting);
    }

    /// A waiter for several keys moves from one key's wake-ups to another's as its tries
    /// find one or the other held: it re-checks at the move only if a release announced
    /// there meanwhile reached no one. (A re-check at every move made lockers waiting for
    /// the same two keys, one of them held on, try again at once, round and round:
    /// simulator seed 171.) A first waiter on a lingering subscription re-checks, as after
    /// a new subscription.
    #[tokio::test]
    async fn a_waiter_moving_between_keys_rechecks_only_after_an_unheard_release() {
        let server = RedisServer::spawn();
        let client = redis::Client::open(server.url()).unwrap();
        let hub = Arc::new(Hub::new(vec![client.clone().into()], 1));
        let told = |mut member: Member| async move {
            let why = tokio::time::timeout(Duration::from_secs(5), member.woken()).await;
            member.tried(Outcome::Held { until: None });
            why.ok()
        };
        // Both keys subscribed, as waiters left them a moment ago (they linger).
        for key in [&b"a"[..], b"b"] {
            assert_eq!(
                told(hub.join(key, true, 1, false)).await,
                Some(Wake::Subscribed)
            );
        }
        let mut moved = hub.join(b"a", true, 1, true);
        let quiet = tokio::time::timeout(Duration::from_millis(300), moved.woken()).await;
        assert!(quiet.is_err(), "a waiter that moved re-checked: {quiet:?}");
        moved.move_on();
        // A release announced while nobody waited at `b`.
        let mut publisher = client.get_multiplexed_async_connection().await.unwrap();
        let heard: i64 = redis::cmd("PUBLISH")
            .arg("b")
            .arg("released")
            .query_async(&mut publisher)
            .await
            .unwrap();
        assert_eq!(heard, 1, "the hub's subscriber");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            told(hub.join(b"b", true, 1, true)).await,
            Some(Wake::Subscribed)
        );
        // A first waiter re-checks.
        assert_eq!(
            told(hub.join(b"a", true, 1, false)).await,
            Some(Wake::Subscribed)
        );
    }

    /// A newcomer behind waiters of its locker bounds its wait by the expiry their latest
    /// try saw — and tries at once once that has passed: a key that ran out announces
    /// nothing, and the waiter left here may sleep by a longer TTL its own try saw (seed
    /// 6848). A waiter for several keys whose try found this one free (another held) wakes
    /// one waiter here to try (seed 4910).
    #[tokio::test]
    async fn newcomers_and_waiters_learn_what_the_latest_try_saw() {
        let server = RedisServer::spawn();
        let client = redis::Client::open(server.url()).unwrap();
        let hub = Arc::new(Hub::new(vec![client.into()], 1));
        let mut sleeper = hub.join(b"k", true, 1, false);
        let subscribed = tokio::time::timeout(Duration::from_secs(5), sleeper.woken()).await;
        assert_eq!(subscribed.ok(), Some(Wake::Subscribed));
        sleeper.tried(Outcome::Held { until: None });
        let soon = Instant::now() + Duration::from_secs(30);
        let mut other = hub.join(b"k", true, 1, false);
        other.tried(Outcome::Held { until: Some(soon) });
        let (_queued, entry) = hub.enter(b"k", 1, false).expect("subscribed");
        assert_eq!(
            entry,
            Entry::Queue {
                expires: Some(soon)
            }
        );
        other.tried(Outcome::Held {
            until: Some(Instant::now()),
        });
        let (_trying, entry) = hub.enter(b"k", 1, false).expect("subscribed");
        assert_eq!(entry, Entry::Try, "the key may have run out");
        // The one that tried moves on to another of its keys, having found this one free.
        other.tried(Outcome::HeldElsewhere { passed: false });
        let quiet = tokio::time::timeout(Duration::from_millis(200), sleeper.woken()).await;
        assert!(quiet.is_err(), "woken by a try that learned nothing here");
        other.tried(Outcome::HeldElsewhere { passed: true });
        let woken = tokio::time::timeout(Duration::from_secs(1), sleeper.woken()).await;
        assert_eq!(woken.ok(), Some(Wake::Local));
    }
}
