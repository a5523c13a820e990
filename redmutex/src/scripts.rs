//! The seam between the engine and the primitives: what a primitive's Lua script does on
//! one Redis node ([`Claim`]), and the plumbing every script shares.
//!
//! Each primitive (`primitives/`) is one Rust file and one Lua file. Its Rust file
//! implements [`Claim`] — the keys it occupies and one method per operation, each a single
//! round trip to one node — and everything above (the acquire loop, the held guard, the
//! lease and its renewer, wake-up, fences) and below (one node, a Redlock quorum, a
//! cluster) is written once against this trait. The Lua rules every primitive needs (the
//! owner check, fence counters) live in `scripts/helpers.lua`; each script starts with
//! those it uses ([`Operation`]).
//!
//! Each primitive has one Lua file with a section per operation, each run as a script of
//! its own ([`Operation`]); a semaphore's holders and a read-write lock's readers share
//! the operations of one holder (`scripts/holders.lua`). Scripts are sent by SHA
//! (`EVALSHA`) and loaded on a `NOSCRIPT` reply, which redis-rs's [`Script`] does for us;
//! releases nobody waits for send the whole source ([`eval_whole`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult, Script,
    ScriptInvocation, ServerErrorKind, Value,
};

use crate::args::Keys;
use crate::error::InvalidArgument;
use crate::fence::{companion_key, Companion};
use crate::sync::lock;
use crate::token::{Channels, Token};
use crate::writes::Writes;

/// Runs an idempotent request once more if the first try found the connection broken
/// (e.g. the server restarted since the last request): a [`ConnectionManager`] reconnects
/// on that error, and the second try goes over the new connection. Only for requests that
/// are safe to repeat — release, refresh and reads.
///
/// [`ConnectionManager`]: redis::aio::ConnectionManager
macro_rules! idempotent {
    ($request:expr) => {
        match $request.await {
            Err(e) if e.is_unrecoverable_error() => $request.await,
            result => result,
        }
    };
}
pub(crate) use idempotent;

/// Declares a primitive's operations, each a script of its own (see [`Operation`]), from
/// its Lua file and any file whose operations it shares (named from the crate's `src`
/// directory): `operations!("primitives/mutex.lua"; RELEASE = "release", …)`;
/// `operations!("primitives/semaphore.lua", "scripts/holders.lua"; TTL = "ttl", …)`.
macro_rules! operations {
    ($($file:literal),+; $($name:ident = $op:literal),* $(,)?) => {
        /// The primitive's Lua files, one section per operation.
        pub(crate) const FILES: &[&str] =
            &[$(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $file))),+];
        $(
            pub(crate) static $name: std::sync::LazyLock<$crate::scripts::Operation> =
                std::sync::LazyLock::new(|| $crate::scripts::Operation::new(FILES, $op));
        )*
    };
}
pub(crate) use operations;

/// The rules every primitive's script shares (owner check, fence counters).
const HELPERS: &str = include_str!("scripts/helpers.lua");

/// A locker's heartbeat in a key's line (see [`Claim::lined`]; `LINE_BEAT_MS` in
/// `helpers.lua`): its waiters try at least every third of it, and a locker that crashed
/// or froze is passed over once it ends.
pub(crate) const LINE_HEARTBEAT: Duration = Duration::from_secs(3);

/// The line that starts an operation's section in a primitive's Lua file.
const SECTION: &str = "\n--- op: ";

/// The line that ends a section's head: code that runs before the declarations the
/// section uses are made — its common case, which may return before Lua creates any of
/// them (each function a script defines is created on every call).
const HEAD: &str = "\n--- then\n";

/// One operation of a primitive, compiled as a script of its own: the declarations of the
/// shared helpers and of the primitive file's preamble (what comes before its first
/// section) that the operation uses, then the operation's section (from its `--- op: NAME`
/// line to the next). A primitive may share another file's operations: a semaphore's
/// holders and a read-write lock's readers share those of `scripts/holders.lua`, whose
/// preamble comes after the primitive's (it calls what the primitive's defines: what
/// makes a holder live). One file per primitive keeps its rules together; one script per
/// operation, holding only what it uses, keeps each call as cheap as the operation (Lua
/// creates every function a script defines on every call: a script holding all
/// operations measured 30–80 % more server time for a release). A section may open with a
/// head, ended by a `--- then` line, that runs before those declarations: the lock's
/// release deletes an unwatched key there, at half the server time.
///
/// Each operation comes in two variants ([`Channels`]): the script as written, and, where it
/// announces anything, the same with `sharded.lua`'s `announce_on` in place of
/// `helpers.lua`'s, for a cluster.
pub(crate) struct Operation {
    source: String,
    script: Script,
    /// The sharded variant, when it differs.
    sharded: Option<(String, Script)>,
}

/// How a cluster's scripts announce: `sharded.lua`'s `announce_on`, which the sharded
/// variant of a script has in place of `helpers.lua`'s.
const SHARDED: &str = include_str!("scripts/sharded.lua");

/// The text of `source`'s `announce_on` function, from its `local function` line to its
/// closing `end` line.
fn announce_function(source: &str) -> Option<&str> {
    let start = source.find("local function announce_on(")?;
    let len = source[start..].find("\nend\n")? + "\nend".len();
    Some(&source[start..start + len])
}

/// Every script's source by its SHA-1, for [`Node`]'s `EVAL` in place of an `EVALSHA` the
/// server does not know.
static SOURCES: LazyLock<Mutex<HashMap<String, Arc<str>>>> = LazyLock::new(Default::default);

/// The script of `source`, known by its SHA-1 from now on (see [`SOURCES`]).
fn known(source: &str) -> Script {
    let script = Script::new(source);
    let mut sources = lock(&SOURCES);
    sources.insert(script.get_hash().to_owned(), Arc::from(source));
    script
}

/// What every operation of the Lua files `files` may use: the helpers, then each file's
/// preamble (what comes before its first section), in order.
fn shared(files: &[&str]) -> String {
    let mut shared = HELPERS.to_string();
    for file in files {
        shared.push('\n');
        shared.push_str(file.split(SECTION).next().unwrap_or_default());
    }
    shared
}

/// The sections of the Lua files `files`, each from the line after its `--- op:` on.
fn sections<'a>(files: &[&'a str]) -> impl Iterator<Item = &'a str> {
    (files.iter()).flat_map(|file| file.split(SECTION).skip(1))
}

impl Operation {
    /// The operation `name` of the Lua files `files`: a primitive's, then any whose
    /// operations it shares.
    ///
    /// # Panics
    /// When no file has a section `name`: a mistake in the crate, found by any test that
    /// runs the operation.
    pub(crate) fn new(files: &[&str], name: &str) -> Operation {
        let section = sections(files)
            .find(|section| section.split('\n').next() == Some(name))
            .unwrap_or_else(|| panic!("redmutex: no Lua section `{name}`"));
        let used = used_declarations(&shared(files), section);
        let source = match section.split_once(HEAD) {
            Some((head, body)) => format!("-- {head}\n{used}{body}"),
            None => format!("{used}-- {section}"),
        };
        let script = known(&source);
        let sharded = announce_function(&source).map(|plain| {
            let by_shard = announce_function(SHARDED).expect("sharded.lua's announce_on");
            let sharded = source.replacen(plain, by_shard, 1);
            let script = known(&sharded);
            (sharded, script)
        });
        Operation {
            source,
            script,
            sharded,
        }
    }

    /// The script for claims whose announcements travel as `channels` say.
    pub(crate) fn script(&self, channels: Channels) -> &Script {
        match (channels, &self.sharded) {
            (Channels::Sharded, Some((_, script))) => script,
            _ => &self.script,
        }
    }

    /// The whole source, for [`eval_whole`].
    pub(crate) fn source(&self, channels: Channels) -> &str {
        match (channels, &self.sharded) {
            (Channels::Sharded, Some((source, _))) => source,
            _ => &self.source,
        }
    }
}

/// The top-level declarations of `shared` (Lua: `local function NAME`, `local NAME = …`,
/// each with the comment above it) that `code` uses, directly or through another, in
/// their order. Anything else at the top level of `shared` is kept whatever `code` uses.
/// A name counts as used wherever it appears as a word outside a comment (in a string
/// too: at worst a declaration too many).
fn used_declarations(shared: &str, code: &str) -> String {
    let blocks = top_level_blocks(shared);
    let mut used = vec![false; blocks.len()];
    let mut words: std::collections::HashSet<&str> = lua_words(code).collect();
    loop {
        let before = used.iter().filter(|u| **u).count();
        for (block, used) in blocks.iter().zip(used.iter_mut()) {
            let wanted = block.names.is_empty()
                || block.names.iter().any(|name| words.contains(name.as_str()));
            if !*used && wanted {
                *used = true;
                words.extend(lua_words(&block.text));
            }
        }
        if used.iter().filter(|u| **u).count() == before {
            break;
        }
    }
    (blocks.iter().zip(used))
        .filter(|(_, used)| *used)
        .map(|(block, _)| block.text.as_str())
        .collect()
}

/// A top-level declaration: its text (with the comment above it) and the names it
/// declares; no names for anything else at the top level, which is always kept.
struct Block {
    text: String,
    names: Vec<String>,
}

/// Splits Lua source into its top-level blocks. A comment or a `local` at the margin
/// starts one (the declaration right under a comment joins it); every other line (indented,
/// or a closing `end`, `}` or `)`) belongs to the block above; a blank line ends a block.
fn top_level_blocks(source: &str) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    let mut open = false;
    for line in source.lines() {
        if line.trim().is_empty() {
            open = false;
            continue;
        }
        let opens = line.starts_with("--") || line.starts_with("local ");
        // Under a comment: more comment, or what it describes.
        let under_comment =
            (blocks.last()).is_some_and(|block| block.names.is_empty() && is_comment(&block.text));
        if !open || (opens && !under_comment) {
            blocks.push(Block {
                text: String::new(),
                names: Vec::new(),
            });
        }
        let block = blocks.last_mut().expect("pushed above");
        block.text.push_str(line);
        block.text.push('\n');
        if let Some(declared) = line.strip_prefix("local ") {
            let declared = declared.strip_prefix("function ").unwrap_or(declared);
            let names = declared.split(['(', '=']).next().unwrap_or_default();
            (block.names).extend(names.split(',').map(|name| name.trim().to_string()));
        }
        open = true;
    }
    // A comment with no declaration under it (a file's header) is nobody's: dropped.
    blocks.retain(|block| !block.names.is_empty() || !is_comment(&block.text));
    blocks
}

/// Whether every line of `text` is a comment.
fn is_comment(text: &str) -> bool {
    text.lines().all(|line| line.starts_with("--"))
}

/// The words of Lua source, comments left out, that could be names.
fn lua_words(source: &str) -> impl Iterator<Item = &str> {
    (source.lines())
        .map(|line| line.split("--").next().unwrap_or_default())
        .flat_map(|code| code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| !word.is_empty())
}

/// One node's connection, as a [`Claim`] sees it.
pub(crate) type Conn<'a> = &'a mut (dyn ConnectionLike + Send);

/// The reply to one request of a [`Claim`].
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

    /// Its waiters queue in Redis (a fair lock), as [`Queue`] describes, rather than only
    /// in each locker's wake-up hub: `None` for a claim whose waiters just try.
    fn queue(&self) -> Option<Queue> {
        None
    }

    /// The channel its waiters hear of releases on, when not the held key's own (a
    /// read-write lock's readers: one announcement lets all of them in).
    fn channel(&self) -> Option<Vec<u8>> {
        None
    }

    /// Its waiters' lockers line up beside each key (a lock, see `mutex.lua`): where one
    /// node decides, a waiting try given the locker's id ([`ObtainTry::locker`]) joins
    /// the line, and a release hands the key to the first locker in it, telling it alone
    /// on its turn channel ([`crate::token::turn_channel`]).
    fn lined(&self) -> bool {
        false
    }

    /// How many units of what it names the claim takes (a semaphore's permits): waiters of
    /// one locker wanting as many share the locker's place in line.
    fn units(&self) -> u32 {
        1
    }

    /// The acquire stores metadata with the token: a claim that keeps it apart from what
    /// every holder writes (a semaphore's details entry) remembers it for the release.
    fn carry_metadata(&self) {}

    /// Hands `add` the keys of a release, in order: the claim's own keys, and whatever
    /// else a release must change (a fair lock's queue, which a waiter that gives up
    /// leaves through its release).
    fn release_keys(&self, add: &mut dyn FnMut(&[u8])) {
        self.script_keys(false, add);
    }

    /// One owner at a time holds it (a lock), rather than several at once (a semaphore's
    /// permits): a release then frees it for one waiter, and a newcomer may queue behind
    /// waiters without a try of its own (see `engine/wakeup.rs`).
    fn exclusive(&self) -> bool {
        true
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
            let extended: i64 = call.invoke_async(&mut Node(conn)).await?;
            Ok(extended == 1)
        })
    }

    /// How long this owner's claim has left.
    fn ttl<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, Remaining> {
        let mut call = self.call(self.operations().ttl, false);
        call.arg(token.as_bytes());
        Box::pin(async move {
            Ok(Remaining::from_reply(
                call.invoke_async(&mut Node(conn)).await?,
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
            let fence: u64 = call.invoke_async(&mut Node(conn)).await?;
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
            let reply: Value = call.invoke_async(&mut Node(conn)).await?;
            guarded_reply(reply)
        })
    }

    /// Redlock's second step for fences: raises the counters to `fence` where lower, if
    /// this owner holds the claim on the node. Returns whether it did.
    fn raise_fence<'a>(&'a self, conn: Conn<'a>, raise: Raise<'a>) -> Call<'a, bool> {
        let mut call = self.call(self.operations().raise_fence, true);
        call.arg(raise.token.as_bytes())
            .arg(raise.fence)
            .arg(raise.retention_ms);
        Box::pin(async move {
            let raised: i64 = call.invoke_async(&mut Node(conn)).await?;
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
pub(crate) struct Change<K> {
    pub(crate) claim: K,
    pub(crate) call: ScriptInvocation<'static>,
}

impl<K: Claim> Claim for Change<K> {
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

    /// The change: `call` carries the token, and whatever TTL it sets.
    fn refresh<'a>(&'a self, conn: Conn<'a>, _token: &'a Token, _ttl_ms: u64) -> Call<'a, bool> {
        Box::pin(async move {
            let done: i64 = self.call.invoke_async(&mut Node(conn)).await?;
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
pub(crate) struct Terms {
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
    pub(crate) terms: &'a Terms,
    /// An earlier try may have set some keys without us seeing the reply: the script then
    /// treats what holds our token as ours.
    pub(crate) retrying_own: bool,
    /// The caller waits for a release (see `engine/wakeup.rs`): what it finds held is
    /// marked as awaited so that its release publishes a wake-up, and its TTL is read.
    pub(crate) waiting: bool,
    /// The caller may wait: a claim whose waiters queue in Redis ([`Claim::queue`])
    /// queues it (or renews its place) when it is not its turn.
    pub(crate) queue: bool,
    /// The locker's id, when a waiting try puts it in the line of what it finds held (and
    /// may take what a release handed to it, see `mutex.lua`): only when the hand-off's
    /// message would reach it, and not on a quorum.
    pub(crate) locker: Option<&'a Token>,
    /// Other waiters of the locker wait for the same claim, wanting as many units: a place
    /// in line served keeps the locker in line for them (a semaphore's, see
    /// `semaphore.lua`).
    pub(crate) others_waiting: bool,
    /// An earlier try of this waiter put its locker in the claim's line (and the locker
    /// has not left it since): a release may have handed it something.
    pub(crate) in_line: bool,
    /// The try follows a wake-up of the locker's own (a holder of its own released the
    /// key): it is probably free, and a plain `SET` will likely take it.
    pub(crate) probably_free: bool,
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
pub(crate) struct Raise<'a> {
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

impl Obtain {
    /// The reply `{ held, fence_or_pttl }` of the acquire scripts.
    pub(crate) fn from_reply((held, detail): (usize, i64), fenced: bool) -> Obtain {
        match held {
            0 => Obtain::Obtained {
                fence: fenced.then_some(detail as u64),
            },
            i => Obtain::Held {
                index: i - 1,
                ttl: u64::try_from(detail).ok().map(Duration::from_millis),
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

/// A [`Conn`] that redis-rs can send over (its `invoke_async` wants a sized connection),
/// and that runs our scripts where the server does not know them yet (restarted, or new):
/// an `EVALSHA` answered `NOSCRIPT` is sent again as an `EVAL` of the whole source, which
/// leaves the script cached for the next `EVALSHA`. Not `SCRIPT LOAD` and `EVALSHA` again,
/// as redis-rs's `ScriptInvocation` would: that is two round trips, and a cluster
/// connection sends `SCRIPT LOAD` to every master, so that one master that does not answer
/// would fail a request to another.
pub(crate) struct Node<'c>(pub(crate) Conn<'c>);

impl ConnectionLike for Node<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.0.req_packed_command(cmd).await;
            let unknown = match &reply {
                Err(e) => e.kind() == ErrorKind::Server(ServerErrorKind::NoScript),
                Ok(Value::ServerError(e)) => e.kind() == Some(ServerErrorKind::NoScript),
                Ok(_) => false,
            };
            match unknown.then(|| eval_instead(cmd)).flatten() {
                Some(eval) => self.0.req_packed_command(&eval).await,
                None => reply,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// Runs `cmd`, an `EVALSHA` of one of our scripts, on one node (see [`Node`] for a node
/// that does not know the script).
pub(crate) async fn evalsha<T: FromRedisValue>(conn: Conn<'_>, cmd: &Cmd) -> RedisResult<T> {
    cmd.query_async(&mut Node(conn)).await
}

/// `EVAL` of the script `evalsha` names by its SHA-1, with the same keys and arguments:
/// `None` for another command, or a script we do not know.
fn eval_instead(evalsha: &Cmd) -> Option<Cmd> {
    let mut args = evalsha.args_iter();
    let (Some(redis::Arg::Simple(name)), Some(redis::Arg::Simple(sha))) =
        (args.next(), args.next())
    else {
        return None;
    };
    if !name.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let sha = std::str::from_utf8(sha).ok()?;
    let source = lock(&SOURCES).get(sha)?.clone();
    let mut eval = redis::cmd("EVAL");
    eval.arg(&*source);
    for arg in args {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    Some(eval)
}

/// Sends a release's `notice` (see [`Claim::release_notice`]), if any, ignoring its reply.
pub(crate) async fn send_notice(conn: Conn<'_>, notice: Option<&Cmd>) {
    if let Some(notice) = notice {
        let _ = notice.query_async::<Value>(&mut Node(conn)).await;
    }
}

/// Runs an `EVAL` (the whole source, not `EVALSHA`): for a release nobody may be waiting
/// for (a cancelled acquire's cleanup, a dropped guard). The fallback on `NOSCRIPT` needs a
/// caller still waiting for the reply, and a cleanup queued behind a request to a frozen
/// server may outlive its own response timeout: the server must be able to run it
/// whenever it gets to it.
pub(crate) async fn eval_whole(conn: Conn<'_>, eval: Cmd) -> RedisResult<()> {
    eval.query_async::<Value>(&mut Node(conn)).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "-- preamble\nlocal function shared() return 1 end\n--- op: one\n-- one's header\nreturn shared()\n--- op: two\nreturn 2\n";

    #[test]
    fn a_cluster_variant_announces_on_shard_channels_and_only_where_a_script_announces() {
        let announcing =
            "-- preamble\n--- op: a\nannounce_on(KEYS[1], '', 'released')\n--- op: quiet\nreturn 1\n";
        let (a, quiet) = (
            Operation::new(&[announcing], "a"),
            Operation::new(&[announcing], "quiet"),
        );
        let (plain, sharded) = (a.source(Channels::Plain), a.source(Channels::Sharded));
        assert!(plain.contains("redis.pcall('publish', key .. suffix, message)"));
        assert!(!plain.contains("spublish"));
        assert!(sharded.contains("redis.pcall('spublish', channel, message)"));
        assert_eq!(sharded.matches("local function announce_on(").count(), 1);
        assert_eq!(
            plain.replace(announce_function(plain).unwrap(), ""),
            sharded.replace(announce_function(sharded).unwrap(), "")
        );
        assert_ne!(
            a.script(Channels::Plain).get_hash(),
            a.script(Channels::Sharded).get_hash()
        );
        // Nothing announced: one script serves both.
        assert_eq!(
            quiet.source(Channels::Sharded),
            quiet.source(Channels::Plain)
        );
        assert_eq!(
            quiet.script(Channels::Sharded).get_hash(),
            quiet.script(Channels::Plain).get_hash()
        );
    }

    #[test]
    fn an_operation_is_what_it_uses_of_the_helpers_and_preamble_then_its_section() {
        let one = Operation::new(&[FILE], "one");
        assert!(one
            .source(Channels::Plain)
            .starts_with("-- preamble\nlocal function shared() return 1 end\n-- one\n"));
        assert!(one
            .source(Channels::Plain)
            .ends_with("-- one\n-- one's header\nreturn shared()"));
        assert!(!one.source(Channels::Plain).contains("return 2"));
        let two = Operation::new(&[FILE], "two");
        assert_eq!(two.source(Channels::Plain), "-- two\nreturn 2\n");
        // A head runs before the declarations.
        let headed = "local function shared() return 1 end\n--- op: h\nif ARGV[1] then return 0 end\n--- then\nreturn shared()\n";
        assert_eq!(
            Operation::new(&[headed], "h").source(Channels::Plain),
            "-- h\nif ARGV[1] then return 0 end\nlocal function shared() return 1 end\nreturn shared()\n"
        );
        assert_ne!(
            one.script(Channels::Plain).get_hash(),
            two.script(Channels::Plain).get_hash()
        );
        // The helpers come along as used: `holds` calls `owned`.
        let three = Operation::new(&["\n--- op: three\nreturn holds(1, 1, ARGV[1])"], "three");
        let (owned, holds) = (
            three
                .source(Channels::Plain)
                .find("local function owned(")
                .expect("owned"),
            three
                .source(Channels::Plain)
                .find("local function holds(")
                .expect("holds"),
        );
        assert!(owned < holds, "in the helpers' order");
        assert!(three
            .source(Channels::Plain)
            .contains("-- Whether every key in KEYS[first..last]"));
        assert!(!three
            .source(Channels::Plain)
            .contains("local function now_ms("));
    }

    /// A file whose operations a primitive shares: its sections are the primitive's, and
    /// its preamble comes after the primitive's, whose declarations it may call.
    #[test]
    fn a_shared_file_adds_its_sections_and_preamble_after_the_primitives() {
        let primitive = "local function hook() return 1 end\n--- op: own\nreturn hook()\n";
        let common =
            "-- header\n\nlocal function both() return hook() end\n--- op: s\nreturn both()\n";
        assert_eq!(
            Operation::new(&[primitive, common], "s").source(Channels::Plain),
            "local function hook() return 1 end\nlocal function both() return hook() end\n-- s\nreturn both()\n"
        );
        assert_eq!(
            Operation::new(&[primitive, common], "own").source(Channels::Plain),
            "local function hook() return 1 end\n-- own\nreturn hook()\n"
        );
    }

    /// Declarations kept, with their comments, by name — used in code, or by another
    /// declaration kept — in their order; names in comments do not count; a header comment
    /// and anything unused go.
    #[test]
    fn only_the_declarations_used_are_kept() {
        let shared = "-- header\n\n-- a's comment\n-- on two lines\nlocal function a(x)\n  return x\nend\nlocal B, C = 1, 2\n\n-- d: calls a\nlocal function d()\n  return a(1) -- not e\nend\n\nlocal function e() return 0 end\n\nredis.setresp(2)\n";
        assert_eq!(
            used_declarations(shared, "return d() + C -- and e"),
            "-- a's comment\n-- on two lines\nlocal function a(x)\n  return x\nend\nlocal B, C = 1, 2\n-- d: calls a\nlocal function d()\n  return a(1) -- not e\nend\nredis.setresp(2)\n"
        );
        assert_eq!(used_declarations(shared, "return 1"), "redis.setresp(2)\n");
    }

    /// Every primitive's Lua files, as its `operations!` names them.
    #[cfg(feature = "memory")]
    const PRIMITIVES: [&[&str]; 6] = {
        use crate::primitives::{election, fair, mutex, rwlock, semaphore};
        [
            mutex::FILES,
            semaphore::FILES,
            rwlock::FILES,
            fair::FILES,
            election::FILES,
            crate::ops::listing::FILES,
        ]
    };

    /// Every operation of every primitive compiles, and declares every helper and
    /// preamble function it calls (Redis refuses a script's access to an undeclared
    /// global only when the call runs).
    #[cfg(feature = "memory")]
    #[test]
    fn every_operation_compiles_and_declares_what_it_uses() {
        let lua = mlua::Lua::new();
        let mut operations = 0;
        for files in PRIMITIVES {
            let shared = top_level_blocks(&shared(files));
            for section in sections(files) {
                let name = section.split('\n').next().unwrap_or_default();
                let operation = Operation::new(files, name);
                for channels in [Channels::Sharded, Channels::Plain] {
                    let source = operation.source(channels).to_string();
                    if let Err(e) = lua.load(&source).into_function() {
                        panic!("{name} ({channels:?}): {e}");
                    }
                }
                let source = operation.source(Channels::Plain).to_string();
                let declared: Vec<String> = (top_level_blocks(&source).into_iter())
                    .flat_map(|b| b.names)
                    .collect();
                for word in lua_words(&source) {
                    let shared_name = shared.iter().any(|b| b.names.iter().any(|n| n == word));
                    assert!(
                        !shared_name || declared.iter().any(|n| n == word),
                        "{name} uses {word} without declaring it"
                    );
                }
                operations += 1;
            }
        }
        assert!(operations >= 30, "{operations} operations");
    }

    /// The names Lua source calls (a word right before a `(`), comments left out.
    #[cfg(feature = "memory")]
    fn called(source: &str) -> Vec<&str> {
        let mut calls = Vec::new();
        for line in source.lines() {
            let code = line.split("--").next().unwrap_or_default();
            let mut start = None;
            for (i, c) in code.char_indices() {
                match (start, c.is_ascii_alphanumeric() || c == '_') {
                    (None, true) => start = Some(i),
                    (Some(from), false) => {
                        if c == '(' {
                            calls.push(&code[from..i]);
                        }
                        start = None;
                    }
                    _ => {}
                }
            }
        }
        calls
    }

    /// What a declaration of the helpers and preambles calls is declared above it: Lua
    /// reads a name declared only further down as a global, refused only when the call
    /// runs (`scripts/holders.lua` calls what the primitive's preamble, before it,
    /// declares). And no section is found in two files of one primitive.
    #[cfg(feature = "memory")]
    #[test]
    fn shared_declarations_come_before_their_use_and_sections_once() {
        for files in PRIMITIVES {
            let blocks = top_level_blocks(&shared(files));
            let declares = |block: &Block, name: &str| block.names.iter().any(|n| n == name);
            for (i, block) in blocks.iter().enumerate() {
                for name in called(&block.text) {
                    let above = blocks[..=i].iter().any(|b| declares(b, name));
                    let below = blocks[i + 1..].iter().any(|b| declares(b, name));
                    assert!(
                        above || !below,
                        "{name} is called above its declaration:\n{}",
                        block.text
                    );
                }
            }
            let mut names: Vec<&str> = sections(files)
                .map(|section| section.split('\n').next().unwrap_or_default())
                .collect();
            let count = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), count, "a section in two files: {names:?}");
        }
    }

    #[test]
    #[should_panic(expected = "no Lua section `three`")]
    fn a_missing_section_is_a_mistake_found_at_once() {
        Operation::new(&[FILE], "three");
    }

    #[test]
    fn the_scripts_read_stored_values_as_token_rs_writes_them() {
        let listing = include_str!("ops/listing.lua");
        let token_len = format!("local TOKEN_LEN = {}\n", crate::token::TOKEN_LEN);
        assert!(
            listing.contains(&token_len),
            "listing.lua must say {token_len:?}"
        );
        let flags = String::from_utf8(crate::token::FLAGS.to_vec()).unwrap();
        let flags = format!("local FLAGS = '{flags}'\n");
        assert!(listing.contains(&flags), "listing.lua must say {flags:?}");
        let tombstone = String::from_utf8(crate::token::TOMBSTONE.to_vec()).unwrap();
        let tombstone = format!("local TOMBSTONE = '{tombstone}'\n");
        assert!(
            listing.contains(&tombstone),
            "listing.lua must say {tombstone:?}"
        );
        let ask = String::from_utf8(crate::token::ASK_CHANNEL.to_vec()).unwrap();
        let ask = format!("local ASK_CHANNEL = '{ask}'\n");
        assert!(listing.contains(&ask), "listing.lua must say {ask:?}");
    }

    #[test]
    fn the_line_heartbeat_is_the_scripts_own() {
        let line = format!("local LINE_BEAT_MS = {}\n", LINE_HEARTBEAT.as_millis());
        assert!(HELPERS.contains(&line), "helpers.lua must say {line:?}");
    }
}
