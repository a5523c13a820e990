//! The seam between the engine and the primitives: [`Claim`], what a primitive keeps in
//! Redis and its operations on one node, and the values those operations take and give.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, RedisResult, Script, ScriptInvocation, Value};

use super::lua::{Operation, HANDOFF};
use super::send::{eval_whole, evalsha, send_notice, Conn, ScriptConn};
use crate::args::Keys;
use crate::error::InvalidArgument;
use crate::fence::{companion_key, Companion};
use crate::token::Token;
use crate::writes::Writes;

/// What a [`Lock`](crate::Lock) holds: a lock's [`Keys`], a semaphore's
/// [`Permits`](crate::claim::Permits), a [`FairKey`](crate::claim::FairKey), a
/// [`ReadKey`](crate::claim::ReadKey) or [`WriteKey`](crate::claim::WriteKey), an
/// [`ElectionKey`](crate::claim::ElectionKey). Sealed: implemented by these alone, each a
/// primitive's claim, which the lock drives through the trait's hidden methods.
///
/// A function over locks of every primitive names it as their bound:
///
/// ```
/// use redmutex::{claim::Held, Lock};
/// fn describe<C: redmutex::connection::Connection, P: Held>(lock: &Lock<C, P>) -> String {
///     format!("held until {:?}", lock.valid_until())
/// }
/// ```
pub trait Held: Send + Sync + 'static {
    /// The claim, as the engine drives it.
    #[doc(hidden)]
    fn as_claim(&self) -> ClaimRef<'_>;
    /// The claim, shared with what outlives the lock (a background release, a renewal).
    #[doc(hidden)]
    fn into_claim(this: Arc<Self>) -> SharedClaim;
    /// See [`Claim::with_metadata`].
    #[doc(hidden)]
    fn with_metadata(self) -> Self
    where
        Self: Sized;
}

/// A [`Held`] claim as the engine drives it (what no user can make: the seal).
#[doc(hidden)]
pub struct ClaimRef<'a>(pub(crate) &'a dyn Claim);

/// A [`Held`] claim shared with what outlives the lock.
#[doc(hidden)]
pub struct SharedClaim(pub(crate) Arc<dyn Claim>);

/// Implements [`Held`] for a primitive's claim.
macro_rules! held {
    ($claim:ty) => {
        impl $crate::scripts::Held for $claim {
            fn as_claim(&self) -> $crate::scripts::ClaimRef<'_> {
                $crate::scripts::ClaimRef(self)
            }
            fn into_claim(this: std::sync::Arc<Self>) -> $crate::scripts::SharedClaim {
                $crate::scripts::SharedClaim(this)
            }
            fn with_metadata(self) -> Self {
                $crate::scripts::Claim::with_metadata(self)
            }
        }
    };
}
pub(crate) use held;

pub(crate) type Call<'a, T> = Pin<Box<dyn Future<Output = RedisResult<T>> + Send + 'a>>;

/// What a primitive keeps in Redis, and its operations on one node. Every state change is
/// owner-checked in the script, atomically, and sets a TTL on every key it writes.
pub(crate) trait Claim: Send + Sync + 'static {
    /// The keys that identify the claim, with the locker's prefix: a waiter waits for the
    /// release of one of them ([`Obtain::Held`] names it by index), and renewals on a
    /// cluster are batched by the hash slot of the first.
    fn keys(&self) -> &Keys;

    /// What kind of claim it is, for traces and metrics: `lock`, `semaphore`, `fair_lock`,
    /// `read`, `write`, `election`.
    fn kind(&self) -> &'static str;

    /// Hands `add` every key its scripts declare, in order: the claim's own keys, then,
    /// when `fenced`, its fence counters.
    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8]));

    /// The primitive's owner-checked operations.
    fn operations(&self) -> &'static Operations;

    /// One acquire try.
    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain>;

    /// Adds this claim to a renewal call: its keys and arguments. The call answers one
    /// integer per claim, in order: 1 renewed, 0 not held.
    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64);

    /// How its waiters wait ([`Waits`]): by default as a lock's do without a line.
    fn waits(&self) -> Waits {
        Waits::one_holder(false)
    }

    /// This claim for a holder that stores metadata, where that changes what the claim
    /// sends (a semaphore's holder then has a details entry its release deletes).
    fn with_metadata(self) -> Self
    where
        Self: Sized,
    {
        self
    }

    /// Hands `add` the keys of a release, in order: the claim's own keys, and whatever
    /// else a release must change (a fair lock's queue, which a waiter that gives up
    /// leaves through its release).
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        self.script_keys(false, add);
    }

    /// Hands `add` the arguments of a release: the owner's token, then `keep_ms` when > 0
    /// (see [`release`](Claim::release)).
    fn release_args(&self, token: &Token, keep_ms: u64, add: &mut dyn FnMut(&[u8])) {
        add(token.as_bytes());
        if keep_ms > 0 {
            add(keep_ms.to_string().as_bytes());
        }
    }

    /// A call of `operation` over the claim's script keys.
    fn call(&self, operation: &'static Operation, fenced: bool) -> ScriptInvocation<'static> {
        let mut call = operation.script(self.keys().channels()).prepare_invoke();
        self.script_keys(fenced, &mut |key| {
            call.key(key);
        });
        call
    }

    /// Owner-checked release; `true` when every part of the claim was still held (what was
    /// still held is released either way). `keep_ms` > 0: instead of deleting it, let what
    /// is still held expire in that many milliseconds (a minimum hold time).
    fn release<'a>(&'a self, conn: Conn<'a>, token: &'a Token, keep_ms: u64) -> Call<'a, bool> {
        let cmd = self.release_cmd(token, keep_ms);
        Box::pin(async move {
            let missing: i64 = evalsha(&mut *conn, &cmd).await?;
            send_notice(conn, self.release_notice().as_ref()).await;
            Ok(missing == 0)
        })
    }

    /// A command a release sends after its script on each node that answered it, its
    /// reply ignored (a hint): an election's announcement to its observers. None by
    /// default — a lock's script announces its own release.
    fn release_notice(&self) -> Option<Cmd> {
        None
    }

    /// The release as one `EVALSHA` command (see [`release`](Claim::release)), built once
    /// for every node of a quorum (see [`evalsha`]).
    fn release_cmd(&self, token: &Token, keep_ms: u64) -> Cmd {
        let mut keys = 0;
        self.release_keys(&mut |_| keys += 1);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(
            self.operations()
                .release
                .script(self.keys().channels())
                .get_hash(),
        )
        .arg(keys);
        self.release_keys(&mut |key| {
            cmd.arg(key);
        });
        self.release_args(token, keep_ms, &mut |arg| {
            cmd.arg(arg);
        });
        cmd
    }

    /// A try that is one plain command, the same on every node, when this one is (a lock's
    /// `SET NX PX` of one key, by a try that neither waits, nor takes a fence, nor may hold
    /// already): built once for every node of a quorum. Its reply is `Nil` when the claim
    /// is held by someone else, anything else when it was taken.
    fn plain_try(&self, _request: &ObtainTry<'_>) -> Option<Cmd> {
        None
    }

    /// [`release`](Claim::release) for when nobody may wait for the reply (see
    /// [`eval_whole`]).
    fn release_unattended<'a>(
        &'a self,
        conn: Conn<'a>,
        token: &'a Token,
        keep_ms: u64,
    ) -> Call<'a, ()> {
        let cmd = self.release_eval(token, keep_ms);
        Box::pin(async move {
            eval_whole(&mut *conn, cmd).await?;
            send_notice(conn, self.release_notice().as_ref()).await;
            Ok(())
        })
    }

    /// The release as one `EVAL` (the whole script, see [`eval_whole`]): the release keys
    /// and arguments.
    fn release_eval(&self, token: &Token, keep_ms: u64) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.operations().release.source(self.keys().channels()));
        let mut keys: Vec<Vec<u8>> = Vec::new();
        self.release_keys(&mut |key| keys.push(key.to_vec()));
        cmd.arg(keys.len()).arg(keys);
        self.release_args(token, keep_ms, &mut |arg| {
            cmd.arg(arg);
        });
        cmd
    }

    /// Takes `locker` out of the claim's lines, unattended: the release call given the
    /// locker's id, which releases nothing (see `mutex.lua`). `kept`: per key, `'1'` where
    /// another waiter of the locker still waits for it (several keys; empty otherwise).
    /// By default the claim has one key, so nothing is kept.
    fn withdraw_unattended<'a>(
        &'a self,
        conn: Conn<'a>,
        locker: &'a Token,
        _kept: &'a [u8],
    ) -> Call<'a, ()> {
        self.release_unattended(conn, locker, 0)
    }

    /// Undoes one failed try of a quorum's acquire on a node, unattended: what the try
    /// took goes; what a waiter keeps while it waits (a writer's intent) stays — it goes
    /// when the acquire gives up, through [`release_unattended`](Claim::release_unattended).
    fn undo_unattended<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, ()> {
        self.release_unattended(conn, token, 0)
    }

    /// Owner-checked new TTL; `true` when extended (all or nothing).
    fn refresh<'a>(&'a self, conn: Conn<'a>, token: &'a Token, ttl_ms: u64) -> Call<'a, bool> {
        let mut call = self.call(self.operations().refresh, false);
        call.arg(token.as_bytes()).arg(ttl_ms);
        Box::pin(async move {
            let extended: i64 = call.invoke_async(&mut ScriptConn(conn)).await?;
            Ok(extended == 1)
        })
    }

    /// How long this owner's claim has left.
    fn ttl<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, Remaining> {
        let mut call = self.call(self.operations().ttl, false);
        call.arg(token.as_bytes());
        Box::pin(async move {
            Ok(Remaining::from_reply(
                call.invoke_async(&mut ScriptConn(conn)).await?,
            ))
        })
    }

    /// The next fence, stored in the claim's counters, if this owner holds the claim.
    fn fence<'a>(
        &'a self,
        conn: Conn<'a>,
        token: &'a Token,
        retention_ms: u64,
    ) -> Call<'a, Option<u64>> {
        let mut call = self.call(self.operations().fence, true);
        call.arg(token.as_bytes()).arg(retention_ms);
        Box::pin(async move {
            let fence: u64 = call.invoke_async(&mut ScriptConn(conn)).await?;
            Ok((fence > 0).then_some(fence))
        })
    }

    /// Runs `writes` in one call with the check that this owner holds the claim (the
    /// primitive's `guarded` operation): `None` when it does not (nothing ran), otherwise
    /// each command's reply, in order.
    fn write_if_held<'a>(
        &'a self,
        conn: Conn<'a>,
        token: &'a Token,
        writes: &'a Writes,
    ) -> Call<'a, Option<Vec<Value>>> {
        let mut call = (self.operations().guarded.script(self.keys().channels())).prepare_invoke();
        let mut own_keys = 0;
        self.script_keys(false, &mut |key| {
            call.key(key);
            own_keys += 1;
        });
        writes.keys().for_each(|key| {
            call.key(key);
        });
        call.arg(token.as_bytes()).arg(own_keys);
        writes.args().iter().for_each(|word| {
            call.arg(&word[..]);
        });
        Box::pin(async move {
            let reply: Value = call.invoke_async(&mut ScriptConn(conn)).await?;
            guarded_reply(reply)
        })
    }

    /// Redlock's second step for fences: raises the counters to `fence` where lower, if
    /// this owner holds the claim on the node. Returns whether it did.
    fn raise_fence<'a>(&'a self, conn: Conn<'a>, raise: FenceRaise<'a>) -> Call<'a, bool> {
        let mut call = self.call(self.operations().raise_fence, true);
        call.arg(raise.token.as_bytes())
            .arg(raise.fence)
            .arg(raise.retention_ms);
        Box::pin(async move {
            let raised: i64 = call.invoke_async(&mut ScriptConn(conn)).await?;
            Ok(raised == 1)
        })
    }

    /// The script that renews many claims of this kind in one call (keep-alive). Claims
    /// with the same renewal script share calls.
    fn renewal_script(&self) -> &'static Script {
        self.operations().renew.script(self.keys().channels())
    }
}

/// The owner-checked operations every primitive's Lua file has, each answering alike:
/// `release` (ARGV: token, and optionally how many ms to keep what is held instead of
/// freeing it) the number of parts no longer held (0: fully released);
/// `refresh` (token, TTL in ms) 1 or 0; `ttl` (token) ms left, -1 no expiry, -2 not held;
/// `fence` (token, retention; KEYS with the counters) the fence or 0; `raise_fence` (token,
/// fence, retention; with the counters) 1 or 0; `renew` as the primitive's
/// [`Claim::add_renewal`] lays it out.
pub(crate) struct Operations {
    pub(crate) release: &'static LazyLock<Operation>,
    pub(crate) refresh: &'static LazyLock<Operation>,
    pub(crate) ttl: &'static LazyLock<Operation>,
    pub(crate) fence: &'static LazyLock<Operation>,
    pub(crate) raise_fence: &'static LazyLock<Operation>,
    pub(crate) renew: &'static LazyLock<Operation>,
    pub(crate) guarded: &'static LazyLock<Operation>,
}

/// The keys of the operations of one holder of a holder set (`scripts/holders.lua`), for
/// [`Claim::script_keys`] of a semaphore's holder and a reader: the set, its details, then
/// (`fenced`) the fence counter.
pub(crate) fn holder_keys(keys: [&[u8]; 3], fenced: bool, add: &mut dyn FnMut(&[u8])) {
    let used = if fenced { 3 } else { 2 };
    keys[..used].iter().for_each(|key| add(key));
}

/// A holder's part of a holder set's renewal call (`scripts/holders.lua`'s `renew`), for
/// [`Claim::add_renewal`]: its script keys (the set, its details) and the set's ask
/// companion; its token and the TTL.
pub(crate) fn add_holder_renewal(
    claim: &impl Claim,
    call: &mut ScriptInvocation<'static>,
    token: &Token,
    ttl_ms: u64,
) {
    claim.script_keys(false, &mut |key| {
        call.key(key);
    });
    let set = claim.keys().get(0).expect("one key");
    call.key(companion_key(set, Companion::Ask));
    call.arg(token.as_bytes()).arg(ttl_ms);
}

/// A change made to a held claim by one owner-checked script call — a writer becoming a
/// reader, a leader's new value — driven through the backend's refresh, so that it counts
/// as a refresh does (on every node, confirmed by a quorum, within the validity). It is
/// `claim` in all but its refresh, which is `call`, prepared whole (the token and the
/// arguments it needs), answering 1 when done and 0 when the owner does not hold the claim.
pub(crate) struct ChangeViaRefresh<K> {
    pub(crate) claim: K,
    pub(crate) call: ScriptInvocation<'static>,
}

impl<K: Claim> Claim for ChangeViaRefresh<K> {
    fn keys(&self) -> &Keys {
        self.claim.keys()
    }

    fn kind(&self) -> &'static str {
        self.claim.kind()
    }

    fn script_keys(&self, fenced: bool, add: &mut dyn FnMut(&[u8])) {
        self.claim.script_keys(fenced, add);
    }

    fn operations(&self) -> &'static Operations {
        self.claim.operations()
    }

    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        self.claim.obtain(conn, request)
    }

    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        self.claim.add_renewal(call, token, ttl_ms);
    }

    fn waits(&self) -> Waits {
        self.claim.waits()
    }

    /// The change: `call` carries the token, and whatever TTL it sets.
    fn refresh<'a>(&'a self, conn: Conn<'a>, _token: &'a Token, _ttl_ms: u64) -> Call<'a, bool> {
        Box::pin(async move {
            let done: i64 = self.call.invoke_async(&mut ScriptConn(conn)).await?;
            Ok(done == 1)
        })
    }
}

/// A `guarded` operation's reply: `{ 0 }` not held, `{ 1, replies }` the commands' replies,
/// taken as they are (a command's error among them is its reply, not the call's failure).
fn guarded_reply(reply: Value) -> RedisResult<Option<Vec<Value>>> {
    let malformed = || {
        RedisError::from((
            ErrorKind::Parse,
            "a guarded write's reply is { 0 } or { 1, replies }",
        ))
    };
    let Value::Array(mut parts) = reply else {
        return Err(malformed());
    };
    match (parts.first(), parts.len()) {
        (Some(Value::Int(0)), 1) => Ok(None),
        (Some(Value::Int(1)), 2) => match parts.pop() {
            Some(Value::Array(replies)) => replies.into_iter().map(command_reply).collect(),
            _ => Err(malformed()),
        }
        .map(Some),
        _ => Err(malformed()),
    }
}

/// One command's reply in a guarded write: `{ 1, reply }`, or `{ 0, message }` for an
/// error, given back as the server's error value (as a command's error reads in a
/// transaction's replies).
fn command_reply(reply: Value) -> RedisResult<Value> {
    let Value::Array(mut parts) = reply else {
        return Err(RedisError::from((ErrorKind::Parse, "a command's reply")));
    };
    let reply = parts.pop().unwrap_or(Value::Nil);
    match parts.first() {
        Some(Value::Int(0)) => {
            let message: String = redis::from_redis_value(reply)?;
            // One line, as the protocol carries an error.
            let line = message.replace(['\r', '\n'], " ");
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
        }
        _ => Ok(reply),
    }
}

/// What every try of one acquire sends, whatever it found before: the claim it asks for.
pub(crate) struct AcquireTerms {
    pub(crate) token: Token,
    /// Token, awaited flag, metadata (see [`crate::token::lock_value`]): the flag is the
    /// one thing a try may change.
    pub(crate) value: Vec<u8>,
    pub(crate) ttl_ms: u64,
    /// Take the fence with the claim.
    pub(crate) fenced: bool,
    /// How long fence counters are kept after this use.
    pub(crate) retention_ms: u64,
}

/// What one acquire try sends: the same for every node — the acquire's terms, and what
/// its waiting so far tells the script.
#[derive(Clone, Copy)]
pub(crate) struct ObtainTry<'a> {
    pub(crate) terms: &'a AcquireTerms,
    /// An earlier try may have set some keys without us seeing the reply: the script then
    /// treats what holds our token as ours.
    pub(crate) retrying_own: bool,
    /// The caller may wait: a claim whose waiters queue in Redis ([`Waits::queue`])
    /// queues it (or renews its place) when it is not its turn.
    pub(crate) queue: bool,
    /// A waiter's try — its acquire waits among its locker's waiters for what it finds
    /// held (see `engine/wakeup.rs`) — and how it waits; `None` for a try that does not
    /// wait (a first one, or without wake-up).
    pub(crate) waiter: Option<Waiter<'a>>,
}

impl<'a> ObtainTry<'a> {
    /// Whether the caller waits for a release: what it finds held is marked as awaited,
    /// so that its release publishes a wake-up, and its TTL is read.
    pub(crate) fn waiting(&self) -> bool {
        self.waiter.is_some()
    }

    /// The waiter's locker's place in the claim's line, where it lines up.
    pub(crate) fn place(&self) -> Option<Place<'a>> {
        self.waiter.and_then(|waiter| waiter.place)
    }
}

/// How a waiter's try waits (see [`ObtainTry::waiter`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct Waiter<'a> {
    /// Its locker's place in the line of what it finds held (`line.lua`), where it lines
    /// up: only when the hand-off's message would reach it, and where one node decides.
    pub(crate) place: Option<Place<'a>>,
    /// The try follows a wake-up of the locker's own (a holder of its own released the
    /// key): it is probably free, and a plain `SET` will likely take it.
    pub(crate) probably_free: bool,
}

/// A waiting locker's place in a claim's line.
#[derive(Clone, Copy)]
pub(crate) struct Place<'a> {
    /// The locker's id, as the line names it: a try puts it in line, and may take what a
    /// release handed to it (see `mutex.lua`).
    pub(crate) locker: &'a Token,
    /// An earlier try of this waiter put the locker in line (and it has not left since): a
    /// release may have handed it something.
    pub(crate) taken: bool,
    /// Other waiters of the locker wait for the same claim, wanting as many units: a place
    /// served keeps the locker in line for them (a semaphore's, see `semaphore.lua`).
    pub(crate) shared: bool,
    /// Several keys: per key, `b'1'` where another waiter of the locker waits for it (its
    /// place in that key's line, and a key handed to it, stay for that waiter when this
    /// try finds another key held); empty for one key.
    pub(crate) kept: &'a [u8],
}

/// How a claim's waiters wait, in one value: what each primitive says of its own waiters,
/// read by the engine nowhere else (DEVELOPMENT.md, "Waiting").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waits {
    /// One holder at a time (a lock, a writer), rather than several at once (a semaphore's
    /// permits, readers): a release then frees it for one waiter, and a newcomer may queue
    /// behind waiters without a try of its own (see `engine/wakeup.rs`).
    pub(crate) one_holder: bool,
    /// How many units a waiter takes (a semaphore's permits): waiters of one locker wanting
    /// as many share the locker's place in line.
    pub(crate) units: u32,
    /// Its waiters' lockers line up beside each key (`line.lua`): where one node decides,
    /// a waiting try given the locker's place ([`Waiter::place`]) joins the line, and a
    /// release hands the key to the first locker in it, telling it alone on its turn
    /// channel ([`crate::token::turn_channel`]).
    pub(crate) lined: bool,
    /// Each waiter keeps a place of its own in Redis that its tries renew (a fair lock's
    /// queue, a writer's intent), as [`Queue`] says: `None` where waiters just try.
    pub(crate) queue: Option<Queue>,
    /// The channel its waiters hear of releases on, when not the held key's own (a
    /// read-write lock's readers: one announcement lets all of them in).
    pub(crate) channel: Option<Vec<u8>>,
}

impl Waits {
    /// A lock's waiters, in its keys' lines where `lined`: one holder at a time, one unit,
    /// no place of their own, the key's channel.
    pub(crate) fn one_holder(lined: bool) -> Waits {
        Waits {
            one_holder: true,
            units: 1,
            lined,
            queue: None,
            channel: None,
        }
    }
}

/// How the waiters of a claim queue in Redis (a fair lock): a try that is not the
/// waiter's turn leaves its place in the queue, renewed by each try and dropped by the
/// server when no try came for a heartbeat — so a waiter tries at least every `every`;
/// a waiter that gives up leaves the queue through the claim's release; and its turn is
/// announced on a channel of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queue {
    /// The channel on which the waiter's turn is announced.
    pub(crate) channel: Vec<u8>,
    /// The longest pause between a waiter's tries: a third of its heartbeat.
    pub(crate) every: Duration,
}

/// The arguments of [`Claim::raise_fence`].
#[derive(Clone, Copy)]
pub(crate) struct FenceRaise<'a> {
    pub(crate) token: &'a Token,
    pub(crate) fence: u64,
    pub(crate) retention_ms: u64,
}

/// The answer to one acquire try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Obtain {
    /// Taken; for a fenced acquire, this node's next fence.
    Obtained { fence: Option<u64> },
    /// The key at `index` of [`Claim::keys`] is held by others, for `ttl` more when the
    /// reply says (`None`: unknown, or no expiry); nothing was written but the awaited mark.
    /// A fair lock's waiter: `ahead` live waiters are ahead of it in line.
    Held {
        index: usize,
        ttl: Option<Duration>,
        ahead: Option<u32>,
    },
    /// The server refused the arguments (e.g. a semaphore's limit that its holders do not
    /// share); nothing was written, and retrying the same call cannot help.
    Refused(InvalidArgument),
}

/// The pttl an acquire script answers for a key being handed to another locker.
const HANDED_ELSEWHERE: i64 = -3;

impl Obtain {
    /// The reply `{ held, fence_or_pttl }` of the acquire scripts.
    pub(crate) fn from_reply((held, detail): (usize, i64), fenced: bool) -> Obtain {
        match held {
            0 => Obtain::Obtained {
                fence: fenced.then_some(detail as u64),
            },
            i => Obtain::Held {
                index: i - 1,
                // Being handed to another locker, which takes it or lets it go within
                // the hand-off: look again then (nobody announces a hand-off that lapsed).
                ttl: match detail {
                    HANDED_ELSEWHERE => Some(HANDOFF),
                    ms => u64::try_from(ms).ok().map(Duration::from_millis),
                },
                ahead: None,
            },
        }
    }
}

/// The remaining TTL of an owned claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remaining {
    /// Milliseconds until the first key expires.
    Millis(u64),
    /// No key has an expiry (someone removed it).
    Forever,
    /// Not held by this owner.
    NotHeld,
}

impl Remaining {
    /// The reply of the TTL scripts: milliseconds; -1 no expiry; -2 not held.
    pub(crate) fn from_reply(ms: i64) -> Remaining {
        match ms {
            -1 => Remaining::Forever,
            ms if ms < 0 => Remaining::NotHeld,
            ms => Remaining::Millis(ms as u64),
        }
    }
}
