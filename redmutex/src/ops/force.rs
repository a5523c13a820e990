//! An operator's hand on a key, whoever holds it: the forced release (with its
//! lock-delay, or at once) and the polite request to let go ([`Locker::force_release`],
//! [`Locker::request_release`]). Each reads the key as a listing does, in the same script
//! call that changes it (`listing.lua`'s `force` and `ask`).

use crate::backend::Backend;
use crate::connection::Connection;
use crate::error::{Argument, Error};
use crate::fence::{self, Companion};
use crate::locker::Locker;
use crate::ops::listing::{add_keys, one_key, ListedLock, PageReader, ASK, FORCE};
use crate::token::Token;

impl<C: Connection> Locker<C> {
    /// Releases whatever redmutex holds at `key`, **whoever holds it**, without breaking
    /// mutual exclusion: for operators, when a holder is stuck (its process frozen, its
    /// job hung) and renews a long TTL. Atomically, it reads what was held (kind, holders'
    /// metadata, fence — returned, to be shown and logged) and turns each holder into a
    /// **tombstone** that keeps its place until its TTL ends (a lock-delay, as Consul's and
    /// Chubby's): a lock's value (its TTL kept), a semaphore's holders (their permits and
    /// expiry kept), readers. The holder's next renewal, refresh or release finds itself
    /// gone — a kept-alive lease is then lost
    /// ([`LostReason::NotHeld`](crate::LostReason::NotHeld)), so `exec` stops its command;
    /// at once when its locker has [wake-up](Locker::with_wake_up), which hears the force
    /// where it hears requests to let go — and nobody else is let in before the holder's validity has surely ended (it ends
    /// before its TTL on the server: [claim 13](crate::safety)). Waiters take the lock as the
    /// tombstone ends: their waits are bounded by
    /// the TTL they were told. A tombstone is listed as such
    /// ([`ListedLock::forced`](crate::state::ListedLock::forced)); forcing it again changes
    /// nothing. Something redmutex did not write is left alone (returned as
    /// [`LockKind::Foreign`](crate::state::LockKind::Foreign)). Redlock: on every node.
    ///
    /// For a holder known to be dead, whose TTL is too long to wait out, see
    /// [`force_release_now`](Locker::force_release_now).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key (before any request); [`Error::Redis`] /
    /// [`Error::NoQuorum`].
    ///
    /// # Cancel safety
    /// If cancelled, the release may or may not have happened; call it again to know (it
    /// then answers the tombstone, `forced` set, if it had).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let redis = redmutex::memory::MemoryRedis::new();
    /// let (stuck, operator) = (redmutex::Locker::in_memory_on(&redis), redmutex::Locker::in_memory_on(&redis));
    /// let mut held = stuck.acquire("jobs:nightly", Duration::from_secs(60)).metadata("host=web-3").await?;
    /// let was = operator.force_release("jobs:nightly").await?.expect("it was held");
    /// assert_eq!(was.holders[0].metadata.as_deref(), Some("host=web-3"));
    /// // Nobody gets in while the old holder may still believe it holds:
    /// let once = || operator.acquire("jobs:nightly", Duration::from_secs(5)).retry(redmutex::retry::none());
    /// assert!(once().await.unwrap_err().is_not_obtained());
    /// assert_eq!(operator.describe("jobs:nightly").await?.expect("a tombstone").forced, 1);
    /// // The holder finds out at its next refresh (or renewal, or release):
    /// assert!(held.refresh(Duration::from_secs(60)).await.unwrap_err().is_not_held());
    /// tokio::time::sleep(Duration::from_secs(61)).await; // its TTL has ended
    /// let next = once().await?;
    /// # drop(next);
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, key: impl AsRef<[u8]>) -> Result<Option<ListedLock>, Error> {
        let keys = self.keys([key])?;
        let key = keys.get(0).expect("one key");
        force_release(&self.context.backend, key, false).await
    }

    /// Asks whoever holds `key` to let it go (polite revocation, as Curator's `Revoker`):
    /// a lock's, fair lock's or writer's holder; every holder of a semaphore and every
    /// reader (which of them should yield is the application's to say, and a writer
    /// waits for them all). Each holder's kept-alive lease learns it at once when its
    /// locker has [wake-up](Locker::with_wake_up) (the request is announced, and prompts a
    /// renewal; a request made before the locker's subscription is up, a round trip after
    /// `keep_alive`, or while its subscriber connection is down, waits for the next
    /// renewal), and otherwise at its next renewal — within its renewal interval, a third
    /// of its TTL by default — as a signal of its own
    /// ([`Lease::release_requested`](crate::Lease::release_requested)), distinct from
    /// loss; `redmutex exec` then signals its command and releases when it ends. It is a
    /// request: a holder that ignores it keeps the key, and nobody else is let in before
    /// it lets go. The request lasts as long as the holders' TTLs at the time (a later
    /// holder is not asked). Returns what holds the key, or `None` when free (nothing is
    /// asked: a tombstone of a forced release or something redmutex did not write has no
    /// holder to ask). Redlock: asked on every node that answers; what a quorum holds.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key (before any request), and when the key
    /// beside it where requests are kept (`{KEY}:ask`) holds something else's data
    /// (nothing asked); [`Error::Redis`] / [`Error::NoQuorum`].
    ///
    /// # Cancel safety
    /// If cancelled, the request may or may not have been stored; asking again is
    /// harmless.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let redis = redmutex::memory::MemoryRedis::new();
    /// let (worker, operator) = (redmutex::Locker::in_memory_on(&redis), redmutex::Locker::in_memory_on(&redis));
    /// let lease = worker.acquire("reindex", Duration::from_secs(30)).metadata("host=web-3").await?.keep_alive()?;
    /// tokio::time::sleep(Duration::from_millis(100)).await; // the worker subscribes meanwhile
    /// let held = operator.request_release("reindex").await?.expect("it is held");
    /// assert_eq!(held.holders[0].metadata.as_deref(), Some("host=web-3"));
    /// let asked = tokio::time::Instant::now();
    /// lease.release_requested().await; // at once: the worker's locker has wake-up
    /// assert!(asked.elapsed() < Duration::from_secs(1)); // (else at its next renewal, in 10 s)
    /// assert!(!lease.is_lost()); // a request, not a loss: the holder lets go when it can
    /// lease.release().await?;
    /// assert!(operator.request_release("reindex").await?.is_none()); // free: nobody to ask
    /// # Ok(()) }
    /// ```
    pub async fn request_release(
        &self,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<ListedLock>, Error> {
        let keys = self.keys([key])?;
        let key = keys.get(0).expect("one key");
        request_release(&self.context.backend, key).await
    }

    /// Releases whatever redmutex holds at `key`, whoever holds it, **at once** (a
    /// tombstone too): for a holder known to be dead whose TTL is too long to wait out.
    /// **This breaks mutual exclusion** if the holder still lives: it finds out only at its
    /// next renewal, refresh or release (a kept-alive lease whose locker has wake-up at
    /// once, as for [`force_release`](Locker::force_release)), and may go on working meanwhile
    /// while another takes the lock (fences keep storage safe: the next holder's is
    /// greater). Prefer [`force_release`](Locker::force_release). Atomically, it reads what
    /// was held (returned) and removes it: a lock's key; a semaphore's or readers' holders
    /// with their details. Waiters hear of it as of a release; a fair lock's line and the
    /// fence counter stay, and something redmutex did not write is left alone. Redlock: on
    /// every node.
    ///
    /// # Errors
    /// As [`force_release`](Locker::force_release).
    ///
    /// # Cancel safety
    /// If cancelled, the release may or may not have happened; call it again to know (it
    /// then answers `None` if it had).
    ///
    /// ```
    /// # async fn demo(locker: redmutex::Locker<redis::aio::MultiplexedConnection>) -> Result<(), redmutex::Error> {
    /// // The host that held it is gone for good (its machine was replaced).
    /// if let Some(was) = locker.force_release_now("jobs:stuck").await? {
    ///     let who = was.holders.first().and_then(|h| h.metadata.as_deref());
    ///     eprintln!("released {} ({}), held by {who:?}, fence {:?}", was.key_lossy(), was.kind.name(), was.fence);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_release_now(
        &self,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<ListedLock>, Error> {
        let keys = self.keys([key])?;
        let key = keys.get(0).expect("one key");
        force_release(&self.context.backend, key, true).await
    }
}

/// An operator's release of `key` (with the prefix), whoever holds it (see
/// [`Locker::force_release`](crate::Locker::force_release)): what it held, as it was, or
/// `None` when nothing was there. Redlock: on every node; what the most nodes held alike,
/// with their count.
pub(crate) async fn force_release<C: Connection>(
    backend: &Backend<C>,
    key: &[u8],
    at_once: bool,
) -> Result<Option<ListedLock>, Error> {
    // At once, it tells a fair lock's first waiter and a lock's first locker in line:
    // their lines are among the companions.
    let mode = if at_once { "now" } else { "delay" };
    one_key(backend, &FORCE, key, Some(mode)).await
}

/// A request that whoever holds `key` (with the prefix) let it go (see
/// [`Locker::request_release`](crate::Locker::request_release)): what holds it, as a
/// listing would show it, or `None` when free. Redlock: asked on every node that answers;
/// what a quorum holds alike.
pub(crate) async fn request_release<C: Connection>(
    backend: &Backend<C>,
    key: &[u8],
) -> Result<Option<ListedLock>, Error> {
    let keys = [key.to_vec()];
    let asks = fence::companion_key(key, Companion::Ask);
    let mut call = ASK.script(backend.channels()).prepare_invoke();
    add_keys(&mut call, key);
    call.key(&asks);
    // The request's id, the same on every node: Redlock's holders count each request on
    // its own (see `helpers.lua`'s `asked`).
    call.arg(Token::generate()?.as_str());
    let view = PageReader {
        keys: &keys,
        quorum_only: true,
    };
    match backend.inspect(&view, &call).await {
        Ok(mut listed) => Ok(listed.pop()),
        // Something else's data where requests are kept (`listing.lua`): the key cannot
        // take requests, as a lock key whose companion holds foreign data cannot be taken.
        Err(Error::Redis(e)) if e.to_string().contains(ASK_TAKEN) => {
            let reason = format!(
                "{} holds data of another kind, where requests to release this key are \
                 kept; nothing was asked",
                String::from_utf8_lossy(&asks)
            );
            Err(Error::invalid(Argument::Key, reason))
        }
        Err(e) => Err(e),
    }
}

/// What `listing.lua`'s `ask` answers when the key's ask companion holds something else.
const ASK_TAKEN: &str = "holds data of another kind, where requests to release";
