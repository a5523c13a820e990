//! What a locker shares with everything it hands out: the backend, the renewer of its
//! leases, its wake-up hub, its one look at the eviction policy, and its fence settings.
//! One `Arc` of it travels with each acquire and guard, instead of each piece on its own.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::time::Instant;

use crate::backend::Backend;
use crate::check::EvictionWatch;
use crate::connection::Connection;
use crate::engine::meter::Meter;
use crate::engine::renewer::RenewerSlot;
use crate::engine::waiting::wait_channel;
use crate::engine::wakeup::Hub;
use crate::error::Error;
use crate::fence::Fences;
use crate::scripts::Claim;
use crate::sync::lock;
use crate::token::Token;

/// A locker's shared state (see the module docs).
pub(crate) struct Context<C> {
    pub(crate) backend: Backend<C>,
    /// Renews the leases of this locker and its clones; started on the first keep-alive.
    pub(crate) renewer: Arc<RenewerSlot<C>>,
    /// Wakes waiting acquires on release, when enabled.
    pub(crate) hub: Option<Arc<Hub>>,
    /// Whether the servers' eviction policy was looked at yet (once per locker).
    pub(crate) eviction: Arc<EvictionWatch>,
    /// Whether fences may be taken, and how long counters are kept.
    pub(crate) fences: Fences,
    /// What the locker counts of its activity ([`Locker::stats`](crate::Locker::stats)).
    pub(crate) meter: Arc<Meter>,
    /// This locker's id among the lockers waiting for a key (see `mutex.lua`), drawn when
    /// one of its acquires first waits; shared by its clones.
    id: Arc<OnceLock<Token>>,
    /// The turn channels one waiter of this locker has to itself for now (see
    /// [`Context::own_turns`]).
    turns_taken: TakenTurns,
}

/// Turn channels taken by one waiter each (see [`TurnId`]).
type TakenTurns = Arc<Mutex<HashSet<Vec<u8>>>>;

/// A waiter's id for the turns it is told of (a fair lock's, see `fair.lua`): its locker's
/// id while no other waiter of the locker uses it at the same key — so that the turn
/// channel stays subscribed from one acquire to the next — or a random one of its own.
/// (Each turn goes to one waiter: two waiters sharing a channel could not tell whose it
/// is.) The locker's is given back when this is dropped.
#[derive(Debug)]
pub(crate) struct TurnId {
    pub(crate) id: Token,
    /// The channel taken, and the set it is given back to.
    taken: Option<(Vec<u8>, TakenTurns)>,
}

impl Drop for TurnId {
    fn drop(&mut self) {
        if let Some((channel, taken)) = self.taken.take() {
            lock(&taken).remove(&channel);
        }
    }
}

impl<C: Connection> Context<C> {
    pub(crate) fn new(backend: Backend<C>) -> Context<C> {
        Context {
            backend,
            renewer: Arc::new(RenewerSlot::new()),
            hub: None,
            eviction: Arc::new(EvictionWatch::default()),
            fences: Fences::default(),
            meter: Arc::new(Meter::named(None)),
            id: Arc::new(OnceLock::new()),
            turns_taken: Arc::default(),
        }
    }

    /// An id for a waiter told of its turns on `channel_of(id)` (see [`TurnId`]).
    ///
    /// # Errors
    /// [`Error::Random`], as [`Token::generate`].
    pub(crate) fn own_turns(
        &self,
        channel_of: impl Fn(&Token) -> Vec<u8>,
    ) -> Result<TurnId, Error> {
        let locker = self.id()?;
        let channel = channel_of(&locker);
        let mut taken = lock(&self.turns_taken);
        if taken.insert(channel.clone()) {
            return Ok(TurnId {
                id: locker,
                taken: Some((channel, self.turns_taken.clone())),
            });
        }
        drop(taken);
        Ok(TurnId {
            id: Token::generate()?,
            taken: None,
        })
    }

    /// This locker's id among waiters (random, like a token).
    ///
    /// # Errors
    /// [`Error::Random`], as [`Token::generate`].
    pub(crate) fn id(&self) -> Result<Token, Error> {
        if let Some(id) = self.id.get() {
            return Ok(*id);
        }
        let drawn = Token::generate()?;
        Ok(*self.id.get_or_init(|| drawn))
    }

    /// Whether this locker's waiters line up where their claim has lines: one node
    /// deciding, and wake-up to hear of the hand-offs.
    pub(crate) fn lines_up(&self) -> bool {
        self.hub.is_some() && self.backend.quorum_settings().is_none()
    }

    /// Tells this locker's waiters at `claim`'s keys, if it has wake-up, that the claim is
    /// held until `until` at most (see `Hub::held_until`): one of them tries then. Waiters
    /// of any claim at the same keys: those that line up there hear on the locker's turn
    /// channel, the others on the key's own — a read-write lock's writers behind this
    /// locker's reader, a campaign for a leadership behind its writer (simulator seed
    /// 16582): a key that now ends sooner must not keep any of them waiting.
    pub(crate) fn waiters_held_until(&self, claim: &dyn Claim, until: Instant) {
        let Some(hub) = &self.hub else {
            return;
        };
        let channels = claim.keys().channels();
        let lines = claim.keys().lined() && self.lines_up();
        for key in claim.keys().iter() {
            hub.held_until(&channels.name(key, b""), until);
            // (No id yet: no waiter of this locker ever lined up.)
            if let (true, Some(id)) = (lines, self.id.get()) {
                hub.held_until(&wait_channel(key, true, id, channels), until);
            }
        }
    }
}

impl<C: Clone> Clone for Context<C> {
    fn clone(&self) -> Self {
        Context {
            backend: self.backend.clone(),
            renewer: self.renewer.clone(),
            hub: self.hub.clone(),
            eviction: self.eviction.clone(),
            fences: self.fences,
            meter: self.meter.clone(),
            id: self.id.clone(),
            turns_taken: self.turns_taken.clone(),
        }
    }
}
