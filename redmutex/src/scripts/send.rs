//! How a script reaches a node: by SHA-1 (`EVALSHA`), sent again whole (`EVAL`) to a node
//! that does not know it yet; and a release nobody waits for, sent whole at once.

use redis::aio::ConnectionLike;
use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use super::lua::source_by_sha;

/// One node's connection, as a [`super::Claim`] sees it.
pub(crate) type Conn<'a> = &'a mut (dyn ConnectionLike + Send);

/// A [`Conn`] that redis-rs can send over (its `invoke_async` wants a sized connection),
/// and that runs our scripts where the server does not know them yet (restarted, or new):
/// an `EVALSHA` answered `NOSCRIPT` is sent again as an `EVAL` of the whole source, which
/// leaves the script cached for the next `EVALSHA`. Not `SCRIPT LOAD` and `EVALSHA` again,
/// as redis-rs's `ScriptInvocation` would: that is two round trips, and a cluster
/// connection sends `SCRIPT LOAD` to every master, so that one master that does not answer
/// would fail a request to another.
pub(crate) struct ScriptConn<'c>(pub(crate) Conn<'c>);

impl ConnectionLike for ScriptConn<'_> {
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

/// Runs `cmd`, an `EVALSHA` of one of our scripts, on one node (see [`ScriptConn`] for a
/// node that does not know the script).
pub(crate) async fn evalsha<T: FromRedisValue>(conn: Conn<'_>, cmd: &Cmd) -> RedisResult<T> {
    cmd.query_async(&mut ScriptConn(conn)).await
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
    let source = source_by_sha(sha)?;
    let mut eval = redis::cmd("EVAL");
    eval.arg(&*source);
    for arg in args {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    Some(eval)
}

/// Sends a release's `notice` (see [`super::Claim::release_notice`]), if any, ignoring its reply.
pub(crate) async fn send_notice(conn: Conn<'_>, notice: Option<&Cmd>) {
    if let Some(notice) = notice {
        let _ = notice.query_async::<Value>(&mut ScriptConn(conn)).await;
    }
}

/// Runs an `EVAL` (the whole source, not `EVALSHA`): for a release nobody may be waiting
/// for (a cancelled acquire's cleanup, a dropped guard). The fallback on `NOSCRIPT` needs a
/// caller still waiting for the reply, and a cleanup queued behind a request to a frozen
/// server may outlive its own response timeout: the server must be able to run it
/// whenever it gets to it.
pub(crate) async fn eval_whole(conn: Conn<'_>, eval: Cmd) -> RedisResult<()> {
    eval.query_async::<Value>(&mut ScriptConn(conn))
        .await
        .map(|_| ())
}
