//! The mutex: one or more keys, all or nothing, each a string holding the owner's value
//! (token, awaited flag, metadata) with a TTL — today's [`Lock`], with its script
//! (`mutex.lua`). Everything else a lock does (the acquire loop, refresh, release on drop,
//! keep-alive, fences, wake-up) is the engine's.

use redis::aio::ConnectionLike;
use redis::{Cmd, ScriptInvocation, Value};

use crate::args::Keys;
use crate::connection::Connection;
use crate::engine::guard::Lock;
use crate::fence::{companion_key, counter_key, Companion};
use crate::scripts::{
    eval_whole, held, operations, AcquireTerms, Call, Claim, Conn, Obtain, ObtainTry, Operations,
    ScriptConn, Waits,
};
use crate::token::{lock_value, Channels, Token, TOKEN_LEN};

operations!(
    "primitives/mutex.lua";
    OBTAIN = "obtain",
    OBTAIN_ONE = "obtain_one",
    RELEASE = "release",
    REFRESH = "refresh",
    RENEW = "renew",
    TTL = "ttl",
    AWAIT = "await",
    FENCE = "fence",
    RAISE_FENCE = "raise_fence",
    GUARDED = "guarded",
);

/// The `await` call for one key (with the prefix): marks its holder as awaited when `mark`
/// (so that its release announces itself), then reads it as [`inspect_call`] does.
pub(crate) fn await_call(key: &[u8], mark: bool, channels: Channels) -> ScriptInvocation<'static> {
    let mut call = AWAIT.script(channels).prepare_invoke();
    call.key(key).key(counter_key(key));
    call.arg(if mark { "1" } else { "0" }).arg(TOKEN_LEN);
    call
}

/// The call that reads one key (with the prefix): what it holds and its latest fence.
pub(crate) fn inspect_call(key: &[u8], channels: Channels) -> ScriptInvocation<'static> {
    await_call(key, false, channels)
}

/// The operations every primitive answers alike (see [`Operations`]).
static OPERATIONS: Operations = Operations {
    release: &RELEASE,
    refresh: &REFRESH,
    ttl: &TTL,
    fence: &FENCE,
    raise_fence: &RAISE_FENCE,
    renew: &RENEW,
    guarded: &GUARDED,
};

/// The release's third argument: undo a quorum's failed try (see `mutex.lua`).
const UNDO: &str = "undo";

held!(Keys);

impl Claim for Keys {
    fn kind(&self) -> &'static str {
        "lock"
    }

    /// The release, told to announce nothing (see `mutex.lua`): a quorum's failed try
    /// undone on a node frees nothing anyone waits for.
    fn undo_unattended<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, ()> {
        let mut cmd = self.release_eval(token, 0);
        cmd.arg(0).arg(UNDO);
        Box::pin(async move { eval_whole(conn, cmd).await })
    }

    /// The release given the locker's id, told which lines to stay in (see `mutex.lua`).
    fn withdraw_unattended<'a>(
        &'a self,
        conn: Conn<'a>,
        locker: &'a Token,
        kept: &'a [u8],
    ) -> Call<'a, ()> {
        let mut cmd = self.release_eval(locker, 0);
        if kept.contains(&b'1') {
            cmd.arg(0).arg("").arg(kept);
        }
        Box::pin(async move { eval_whole(conn, cmd).await })
    }

    fn keys(&self) -> &Keys {
        self
    }

    /// The value the keys hold when nobody waits for them and they carry no metadata (the
    /// token and its flag, see `mutex.lua`), then `keep_ms` when > 0: the common release
    /// compares the value whole, which makes no string on the server.
    fn release_args(&self, token: &Token, keep_ms: u64, add: &mut dyn FnMut(&[u8])) {
        add(&lock_value(token, None));
        if keep_ms > 0 {
            add(keep_ms.to_string().as_bytes());
        }
    }

    /// The lock keys, then (fenced) the fence counter of each, in the same order.
    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8])) {
        self.iter().for_each(&mut *add);
        if fenced {
            self.iter().for_each(|key| add(&counter_key(key)));
        }
    }

    fn operations(&self) -> &'static Operations {
        &OPERATIONS
    }

    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        Box::pin(obtain(ScriptConn(conn), self, request))
    }

    /// The lock keys, then (where lockers line up) the line of each, in the same order.
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        self.iter().for_each(&mut *add);
        if Keys::lined(self) {
            (self.iter()).for_each(|key| add(&companion_key(key, Companion::Line)));
        }
    }

    /// Waiting lockers line up beside each key where the keys have lines (not on a
    /// cluster).
    fn waits(&self) -> Waits {
        Waits::one_holder(Keys::lined(self))
    }

    /// One key, taken by a try that neither waits, nor takes a fence, nor may hold it
    /// already: a plain `SET NX PX` (see [`obtain`]).
    fn plain_try(&self, request: &ObtainTry<'_>) -> Option<Cmd> {
        let plain = !request.retrying_own && !request.terms.fenced && !request.waiting();
        match (self.len(), self.get(0)) {
            (1, Some(key)) if plain => {
                Some(set_nx_cmd(key, &request.terms.value, request.terms.ttl_ms))
            }
            _ => None,
        }
    }

    /// The keys, then the ask companion of each (see `mutex.lua`'s `renew`).
    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        for key in self.iter() {
            call.key(key);
        }
        for key in self.iter() {
            call.key(companion_key(key, Companion::Ask));
        }
        call.arg(self.len()).arg(token.as_bytes()).arg(ttl_ms);
    }
}

/// One try to take every key. The common case — a single key, a try that does not wait —
/// takes the cheapest path: unfenced a plain `SET NX PX`, fenced a lean script op (`SET NX
/// PX`, then the counter). So does, unfenced, a waiter's try after its own locker released
/// the key (it is probably free), going on with the full `obtain` only when the `SET`
/// fails. Any other waiter's try goes straight to the full `obtain`: the key is probably
/// held (or handed to its locker), and the script puts the locker in line, flags the
/// holder, or takes the key handed to it, where a `SET` could not. Everything else goes
/// through the full `obtain` too.
async fn obtain(
    mut conn: ScriptConn<'_>,
    keys: &Keys,
    request: ObtainTry<'_>,
) -> redis::RedisResult<Obtain> {
    let ObtainTry {
        terms,
        retrying_own,
        waiter,
        ..
    } = request;
    let waiting = waiter.is_some();
    let probably_free = waiter.is_some_and(|waiter| waiter.probably_free);
    let AcquireTerms {
        ref value,
        ttl_ms,
        fenced,
        retention_ms,
        ..
    } = *terms;
    if let (1, false, Some(key)) = (keys.len(), retrying_own, keys.get(0)) {
        if fenced && !waiting {
            let mut call = OBTAIN_ONE.script(keys.channels()).prepare_invoke();
            call.key(key).key(counter_key(key));
            call.arg(value).arg(ttl_ms).arg(retention_ms);
            // Held: `{ 1, -3 }` — here "no TTL read on this path", not a hand-off.
            let obtain = Obtain::from_reply(call.invoke_async(&mut conn).await?, true);
            return Ok(match obtain {
                Obtain::Held { index, ahead, .. } => Obtain::Held {
                    index,
                    ttl: None,
                    ahead,
                },
                obtain => obtain,
            });
        }
        if !fenced && (!waiting || probably_free) {
            if set_nx(&mut conn, key, value, ttl_ms).await? {
                return Ok(Obtain::Obtained { fence: None });
            }
            if !waiting {
                return Ok(Obtain::Held {
                    index: 0,
                    ttl: None,
                    ahead: None,
                });
            }
        }
    }
    let mut call = keys.call(&OBTAIN, fenced);
    let place = request.place();
    if place.is_some() {
        for key in keys.iter() {
            call.key(companion_key(key, Companion::Line));
        }
    }
    call.arg(value)
        .arg(ttl_ms)
        .arg(TOKEN_LEN)
        .arg(if waiting { "1" } else { "0" })
        .arg(keys.len())
        .arg(retention_ms)
        .arg(if fenced { "1" } else { "0" });
    if let Some(place) = place {
        call.arg(place.locker.as_bytes());
        if !place.kept.is_empty() {
            call.arg(place.kept);
        }
    }
    Ok(Obtain::from_reply(
        call.invoke_async(&mut conn).await?,
        fenced,
    ))
}

/// `SET key value NX PX ttl`: whether it was set.
async fn set_nx(
    conn: &mut impl ConnectionLike,
    key: &[u8],
    value: &[u8],
    ttl_ms: u64,
) -> redis::RedisResult<bool> {
    let reply: Value = set_nx_cmd(key, value, ttl_ms).query_async(conn).await?;
    Ok(reply != Value::Nil)
}

/// `SET key value NX PX ttl`.
fn set_nx_cmd(key: &[u8], value: &[u8], ttl_ms: u64) -> Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value).arg("NX").arg("PX").arg(ttl_ms);
    cmd
}

impl<C: Connection> Lock<C, Keys> {
    /// The keys of this lock as stored in Redis (with the locker's prefix).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory().with_prefix("bank:");
    /// let lock = locker.acquire_all(["account:17", "account:42"], Duration::from_secs(5)).await?;
    /// let keys: Vec<&[u8]> = lock.keys().collect();
    /// assert_eq!(keys, [b"bank:account:17", b"bank:account:42"]);
    /// assert_eq!(locker.connection().keys(), keys); // exactly these, in Redis
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.what().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_section() {
        for operation in [
            &OBTAIN,
            &OBTAIN_ONE,
            &RELEASE,
            &REFRESH,
            &RENEW,
            &TTL,
            &AWAIT,
            &FENCE,
            &RAISE_FENCE,
        ] {
            assert!(operation.source(Channels::Plain).contains("redis.call"));
        }
    }
}
