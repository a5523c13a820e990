//! The mutex: one or more keys, all or nothing, each a string holding the owner's value
//! (token, awaited flag, metadata) with a TTL — today's [`Lock`], with its script
//! (`mutex.lua`). Everything else a lock does (the acquire loop, refresh, release on drop,
//! keep-alive, fences, wake-up) is the engine's.

use std::sync::{Arc, LazyLock};

use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, Value};

use crate::args::Keys;
use crate::connection::Connection;
use crate::engine::guard::Lock;
use crate::engine::lease::Lease;
use crate::fence::counter_key;
use crate::scripts::{
    eval_whole, lua_file, with_keys, Call, Claim, Conn, Node, Obtain, ObtainTry, Operation, Raise,
    Remaining,
};
use crate::token::{Token, TOKEN_LEN};

const FILE: &str = lua_file!("primitives/mutex.lua");

/// `mutex.lua`'s operations, each a script of its own.
macro_rules! operations {
    ($($name:ident = $op:literal),* $(,)?) => {
        $(static $name: LazyLock<Operation> = LazyLock::new(|| Operation::new(FILE, $op));)*
    };
}
operations!(
    OBTAIN = "obtain",
    OBTAIN_ONE = "obtain_one",
    RELEASE = "release",
    REFRESH = "refresh",
    RENEW = "renew",
    TTL = "ttl",
    INSPECT = "inspect",
    FENCE = "fence",
    RAISE_FENCE = "raise_fence",
);

/// The mutex's claim and its acquire and guard types.
pub(crate) fn claim(keys: Keys) -> (Arc<Keys>, Arc<dyn Claim>) {
    let keys = Arc::new(keys);
    (keys.clone(), keys)
}

/// The `inspect` call for one key (with the prefix): what it holds and its latest fence.
pub(crate) fn inspect_call(key: &[u8]) -> ScriptInvocation<'static> {
    let mut call = INSPECT.script().prepare_invoke();
    call.key(key).key(counter_key(key));
    call
}

/// A call of `operation` over the lock's keys, and (when `fenced`) their counters.
fn call(operation: &'static Operation, keys: &Keys, fenced: bool) -> ScriptInvocation<'static> {
    let mut call = with_keys(operation.script().prepare_invoke(), keys);
    if fenced {
        for key in keys.iter() {
            call.key(counter_key(key));
        }
    }
    call
}

impl Claim for Keys {
    fn keys(&self) -> &Keys {
        self
    }

    fn obtain<'a>(&'a self, conn: Conn<'a>, request: ObtainTry<'a>) -> Call<'a, Obtain> {
        Box::pin(obtain(Node(conn), self, request))
    }

    fn release<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, bool> {
        Box::pin(async move {
            let mut call = call(&RELEASE, self, false);
            call.arg(token.as_bytes());
            let missing: usize = call.invoke_async(&mut Node(conn)).await?;
            Ok(missing == 0)
        })
    }

    fn release_unattended<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, ()> {
        let args: [&[u8]; 1] = [token.as_bytes()];
        Box::pin(async move { eval_whole(conn, RELEASE.source(), self.iter(), &args).await })
    }

    fn refresh<'a>(&'a self, conn: Conn<'a>, token: &'a Token, ttl_ms: u64) -> Call<'a, bool> {
        Box::pin(async move {
            let mut call = call(&REFRESH, self, false);
            call.arg(token.as_bytes()).arg(ttl_ms);
            let extended: i64 = call.invoke_async(&mut Node(conn)).await?;
            Ok(extended == 1)
        })
    }

    fn ttl<'a>(&'a self, conn: Conn<'a>, token: &'a Token) -> Call<'a, Remaining> {
        Box::pin(async move {
            let mut call = call(&TTL, self, false);
            call.arg(token.as_bytes());
            Ok(Remaining::from_reply(
                call.invoke_async(&mut Node(conn)).await?,
            ))
        })
    }

    fn fence<'a>(
        &'a self,
        conn: Conn<'a>,
        token: &'a Token,
        retention_ms: u64,
    ) -> Call<'a, Option<u64>> {
        Box::pin(async move {
            let mut call = call(&FENCE, self, true);
            call.arg(token.as_bytes()).arg(retention_ms);
            let fence: u64 = call.invoke_async(&mut Node(conn)).await?;
            Ok((fence > 0).then_some(fence))
        })
    }

    fn raise_fence<'a>(&'a self, conn: Conn<'a>, raise: Raise<'a>) -> Call<'a, bool> {
        Box::pin(async move {
            let mut call = call(&RAISE_FENCE, self, true);
            call.arg(raise.token.as_bytes())
                .arg(raise.fence)
                .arg(raise.retention_ms);
            let raised: i64 = call.invoke_async(&mut Node(conn)).await?;
            Ok(raised == 1)
        })
    }

    fn renewal_script(&self) -> &'static Script {
        RENEW.script()
    }

    fn add_renewal(&self, call: &mut ScriptInvocation<'static>, token: &Token, ttl_ms: u64) {
        for key in self.iter() {
            call.key(key);
        }
        call.arg(self.len()).arg(token.as_bytes()).arg(ttl_ms);
    }
}

/// One try to take every key. The common case — a single key, a first try that does not
/// wait — takes the cheapest path: unfenced a plain `SET NX PX`, fenced a lean script op
/// (`SET NX PX`, then the counter). When `waiting`, marking a held key takes a second
/// request on the plain path, sent only when the `SET` found the key held (the script may
/// still obtain the key if it was released in between). Everything else goes through the
/// full `obtain`.
async fn obtain(
    mut conn: Node<'_>,
    keys: &Keys,
    request: ObtainTry<'_>,
) -> redis::RedisResult<Obtain> {
    let ObtainTry {
        value,
        ttl_ms,
        fenced,
        retention_ms,
        retrying_own,
        waiting,
        ..
    } = request;
    if keys.len() == 1 && !retrying_own {
        let key = keys.get(0).expect("one key");
        if fenced && !waiting {
            let mut call = OBTAIN_ONE.script().prepare_invoke();
            call.key(key).key(counter_key(key));
            call.arg(value).arg(ttl_ms).arg(retention_ms);
            // Held: `{ 1, -3 }`, no TTL read on this path.
            return Ok(Obtain::from_reply(
                call.invoke_async(&mut conn).await?,
                true,
            ));
        }
        if !fenced {
            if set_nx(&mut conn, key, value, ttl_ms).await? {
                return Ok(Obtain::Obtained { fence: None });
            }
            if !waiting {
                return Ok(Obtain::Held {
                    index: 0,
                    ttl: None,
                });
            }
        }
    }
    let mut call = call(&OBTAIN, keys, fenced);
    call.arg(value)
        .arg(ttl_ms)
        .arg(TOKEN_LEN)
        .arg(if waiting { "1" } else { "0" })
        .arg(keys.len())
        .arg(retention_ms);
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
    let reply: Value = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(conn)
        .await?;
    Ok(reply != Value::Nil)
}

impl<C: Connection> Lock<C, Keys> {
    /// The keys of this lock as stored in Redis (with the locker's prefix).
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.what().iter()
    }
}

impl<C: Connection> Lease<C, Keys> {
    /// The keys, as stored in Redis.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.lock().what().iter()
    }
}
