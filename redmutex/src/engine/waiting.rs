//! An acquire's place among the waiters of the key it found held (push wake-up, see
//! `wakeup.rs`): joining before the first try or after a failed one, reporting each try,
//! and pausing until woken or until the schedule's next try.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::common::Attempt;
use crate::engine::inspect::LockInfo;
use crate::engine::schedule::pause_until;
use crate::engine::wakeup::{Entry, Hub, Member, Outcome, Wake};
use crate::error::Error;
use crate::retry::{self, Jitter, RetryExt};
use crate::token::{self, Channels, Token};

/// The waiting side of one acquire; without wake-up, it only pauses.
pub(crate) struct Waiting {
    hub: Option<Arc<Hub>>,
    /// What is waited for is held by one owner at a time (see `Waits::one_holder`).
    exclusive: bool,
    /// How many of its units the acquire wants (see `Waits::units`).
    units: u32,
    /// Our place among this locker's waiters for the key found held; once set, our tries
    /// mark the holder and our value says "awaited".
    member: Option<Member>,
}

impl Waiting {
    pub(crate) fn new(hub: Option<Arc<Hub>>, exclusive: bool, units: u32) -> Waiting {
        Waiting {
            hub,
            exclusive,
            units,
            member: None,
        }
    }

    /// Whether this acquire waits among others: its tries mark what they find held.
    pub(crate) fn is_member(&self) -> bool {
        self.member.is_some()
    }

    /// Whether this acquire waits among others and its channel is subscribed: a release
    /// announced there wakes it (a key handed to its locker is taken in time).
    pub(crate) fn hears(&self) -> bool {
        match (&self.hub, &self.member) {
            (Some(hub), Some(member)) => hub.hears(member),
            _ => false,
        }
    }

    /// Whether other waiters of this locker than this acquire wait on `channel`.
    pub(crate) fn others_at(&self, channel: &[u8]) -> bool {
        let Some(hub) = &self.hub else {
            return false;
        };
        let mine = self.member.as_ref().is_some_and(|m| m.key() == channel);
        hub.waiters_at(channel) > usize::from(mine)
    }

    /// Whether this acquire waits for a key no other waiter of its locker waits for wanting
    /// as many units (its locker's place in line there is its own to give up).
    pub(crate) fn alone(&self) -> bool {
        self.member.as_ref().is_some_and(Member::alone)
    }

    /// Before the first try of an acquire that may wait: on a key this locker's waiters
    /// are subscribed to, it joins them. It queues behind them without a try (the holder is
    /// marked; its release will wake them in turn) — the index of that key is returned,
    /// with when it expires at the latest, if known — or, when nobody waits right now,
    /// makes its first try as a waiter. (Only for exclusive claims: where several may
    /// hold at once, there may be room for a newcomer while others wait.)
    /// `channels` are those of the claim's keys, in order (see [`wait_channel`]).
    /// `lined`: its locker lines up beside the keys, and `channels` are its turn channels.
    pub(crate) fn enter(
        &mut self,
        channels: &[Vec<u8>],
        lined: bool,
    ) -> Option<(usize, Option<Instant>)> {
        let hub = (self.hub.as_ref()).filter(|_| self.member.is_none() && self.exclusive)?;
        let (member, entry, index) = channels.iter().enumerate().find_map(|(index, channel)| {
            let (member, entry) = hub.enter(channel, self.units, !lined)?;
            Some((member, entry, index))
        })?;
        self.member = Some(member);
        match entry {
            Entry::Queue { expires } => Some((index, expires)),
            Entry::Try => None,
        }
    }

    /// Before the first try of an acquire that may wait in a queue kept in Redis: on a
    /// `channel` this locker's waiters are subscribed to, it joins them (see
    /// [`Hub::admit`]) — it hears of a turn announced while its try is under way, and needs
    /// no re-check after it.
    pub(crate) fn admit(&mut self, channel: &[u8]) {
        if let (Some(hub), None) = (&self.hub, &self.member) {
            self.member = hub.admit(channel, self.units);
        }
    }

    /// A try that said other waiters of this locker wait took the key: the locker's place
    /// is back at the end of the line, for them (see [`Member::kept_place`]).
    pub(crate) fn kept_place(&self) {
        if let Some(member) = &self.member {
            member.kept_place();
        }
    }

    /// Stops waiting: whether the locker's place must be withdrawn from the key's line
    /// (see [`Member::leave`]; `in_line`: this waiter's own tries put it there).
    pub(crate) fn leave(&mut self, in_line: bool) -> bool {
        self.member
            .take()
            .is_some_and(|member| member.leave(in_line))
    }

    /// Reports what a try found (after a wake-up, that settles its turn). `channels`: where
    /// a claim has several keys, the wait channel of each, in order (else empty).
    pub(crate) fn tried(&mut self, attempt: &Attempt, channels: &[Vec<u8>]) {
        let Some(member) = self.member.as_mut() else {
            return;
        };
        let outcome = match (attempt, attempt.held()) {
            (Attempt::Obtained(obtained), _) => Outcome::Obtained {
                until: obtained.valid_until,
            },
            (_, Some((index, _))) if channels.get(index).is_some_and(|c| c != member.key()) => {
                // Keys before the one found held were free, or its locker's.
                let passed = channels[..index]
                    .iter()
                    .any(|channel| channel == member.key());
                Outcome::HeldElsewhere { passed }
            }
            (_, Some((_, ttl))) => Outcome::Held {
                until: ttl.map(|ttl| Instant::now() + ttl),
            },
            (_, None) => Outcome::Failed,
        };
        member.tried(outcome);
    }

    /// After a wake-up, says it looked (and will wait again): the turn is settled, so the
    /// next announcement wakes it too. For waits that read rather than try.
    pub(crate) fn looked(&mut self) {
        if let Some(member) = self.member.as_mut() {
            member.tried(Outcome::Held { until: None });
        }
    }

    /// Asks to be woken by an announcement on `channel`: the key found held (its release),
    /// or a queued waiter's own channel (its turn).
    pub(crate) fn join(&mut self, channel: Option<&[u8]>) {
        let (Some(hub), Some(channel)) = (&self.hub, channel) else {
            return;
        };
        if self.member.as_ref().is_none_or(|m| m.key() != channel) {
            let moved = self.member.take().map(Member::move_on).is_some();
            self.member = Some(hub.join(channel, self.exclusive, self.units, moved));
        }
    }

    /// Pauses until `wake`, or until woken: why it was woken, `None` at `wake`.
    /// [`Wake::Subscribed`] asks for a re-check: the subscription was confirmed, and a
    /// release may have gone unheard.
    pub(crate) async fn pause(&mut self, wake: Instant) -> Option<Wake> {
        match self.member.as_mut() {
            // In a fixed order (a turn handed out is taken up before a timer that is due
            // too), so that a run is a function of its inputs: the simulator replays runs.
            Some(member) => tokio::select! {
                biased;
                why = member.woken() => Some(why),
                _ = pause_until(wake) => None,
            },
            None => {
                pause_until(wake).await;
                None
            }
        }
    }
}

/// The channel a waiter for `key` of `claim` hears of its release on: where the claim's
/// lockers line up (`lined`, see `Waits::lined`), the turn channel of `locker` for that
/// key, which only a release handing the key to `locker` announces on; otherwise the
/// key's own. Both named as `channels` says (see [`Channels`]).
pub(crate) fn wait_channel(key: &[u8], lined: bool, locker: &Token, channels: Channels) -> Vec<u8> {
    match lined {
        true => token::turn_channel(key, locker, channels),
        false => channels.name(key, b""),
    }
}

/// Waits until `key` is free — as `read` finds it, marking its holder as awaited when asked
/// — without taking it: `true` once free, `false` when `timeout` passed first.
///
/// With wake-up (`hub`), the holder's release wakes the wait; polling backs off from 10 ms
/// to a second otherwise, and with wake-up it is the fallback for what no release
/// announces. No wait lasts past the holder's expiry, when known.
pub(crate) async fn until_free<F, R>(
    hub: Option<&Arc<Hub>>,
    channel: &[u8],
    timeout: Duration,
    mut read: F,
) -> Result<bool, Error>
where
    F: FnMut(bool) -> R,
    R: Future<Output = Result<LockInfo, Error>>,
{
    let deadline = Instant::now().checked_add(timeout);
    // Joined before the first look, so that no release after it goes unheard (once the
    // subscription is confirmed, a re-check covers the moment before).
    let mut waiting = Waiting::new(hub.cloned(), true, 1);
    waiting.join(Some(channel));
    let mut polls = retry::exponential(Duration::from_millis(10), Duration::from_secs(1))
        .jitter(Jitter::equal());
    loop {
        // Without a quorum of answers the key's state is unknown: the wait goes on, polling,
        // and ends with that error if it is still unknown at the timeout — never "free",
        // never "still held".
        let info = match read(waiting.is_member()).await {
            Ok(info) => info,
            Err(unknown @ Error::NoQuorum(_)) => {
                // A turn this look was given is settled (not handed on: it told nothing);
                // one left open would keep every later release from waking this locker's
                // other waiters, who would sleep until their next poll (seed 14673).
                if let Some(member) = waiting.member.as_mut() {
                    member.tried(Outcome::Failed);
                }
                let now = Instant::now();
                if deadline.is_some_and(|deadline| now >= deadline) {
                    return Err(unknown);
                }
                let poll = polls.next().unwrap_or(Duration::from_secs(1));
                let wake = deadline.map_or(now + poll, |d| (now + poll).min(d));
                waiting.pause(wake).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if !info.held {
            // A turn this wait was given passes on to the next waiter as the member goes;
            // and waiters that queued behind this wait hear that the key is free.
            if let Some(member) = waiting.member.as_mut() {
                member.saw_free();
            }
            return Ok(true);
        }
        if let Some(member) = waiting.member.as_mut() {
            member.tried(Outcome::Held { until: None });
        }
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Ok(false);
        }
        let poll = polls.next().unwrap_or(Duration::from_secs(1));
        let mut wake = now + poll;
        if let Some(ttl) = info.ttl {
            // One millisecond more: the key is certainly gone by then.
            wake = wake.min(now + ttl + Duration::from_millis(1));
        }
        let wake = deadline.map_or(wake, |deadline| wake.min(deadline));
        // Woken or not, the next look reads the key again.
        waiting.pause(wake).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::QuorumFailure;
    use testkit::RedisServer;

    /// A wait for a release whose looks cannot tell (no quorum) settles each turn it is
    /// given, so that a release still wakes the locker's other waiters: a turn left open
    /// kept every later release from waking anyone (simulator seed 14673).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_look_that_cannot_tell_does_not_keep_the_turn() {
        let server = RedisServer::spawn();
        let client = redis::Client::open(server.url()).unwrap();
        let hub = Arc::new(Hub::new(vec![client.into()], 1));
        let looks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let watch = {
            let (hub, looks) = (hub.clone(), looks.clone());
            tokio::spawn(async move {
                until_free(Some(&hub), b"job", Duration::from_secs(30), |_| {
                    looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let failure = QuorumFailure::undecided(1, 2, 3, Vec::new());
                    async move { Err::<LockInfo, _>(Error::NoQuorum(failure)) }
                })
                .await
            })
        };
        // The subscription's confirmation hands the watch its re-check: a turn.
        while looks.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut other = hub.join(b"job", true, 1, false);
        let mut publisher = client_of(&server).await;
        let woken = other.woken();
        tokio::pin!(woken);
        let give_up = Instant::now() + Duration::from_secs(5);
        let why = loop {
            // Each release wakes one waiter: the watch or the other.
            let _: i64 = redis::cmd("PUBLISH")
                .arg("job")
                .arg("released")
                .query_async(&mut publisher)
                .await
                .unwrap();
            tokio::select! {
                why = &mut woken => break why,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            assert!(Instant::now() < give_up, "no release woke the other waiter");
        };
        assert_eq!(why, Wake::Released);
        watch.abort();
    }

    async fn client_of(server: &RedisServer) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(server.url()).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }
}
