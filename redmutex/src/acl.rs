//! The Redis ACL rule that lets a user do everything redmutex does, and nothing else.

use crate::fence::Companion;

/// The commands redmutex sends, or that its scripts run: `EVALSHA` (every script call),
/// `EVAL` and `SCRIPT LOAD` (a script's first use, and clean-up that cannot wait for a
/// reply), `SET` (a plain acquire) and the commands inside the scripts (`TIME` starts a
/// fence counter from the server's clock; the sorted-set and hash commands keep a
/// semaphore's holders, a fair lock's queue, a read-write lock's readers and the requests to
/// let a key go), `SUBSCRIBE`, `UNSUBSCRIBE` and `PING` for
/// the wake-up subscriber.
const COMMANDS: &str = "+evalsha +eval +script|load +set +get +del +pexpire +pexpireat +pttl \
                        +type +setrange +time +publish +subscribe +unsubscribe +ping +zadd \
                        +zrem +zscore +zrank +zcard +zcount +zrange +zrevrange +zrangebyscore \
                        +zremrangebyscore +zrangebylex +hget +hmget +hset +hdel +hexists +hincrby \
                        +exists +wait";

/// The ACL rule for a user that locks keys under `prefix`: the commands redmutex needs,
/// the lock keys (`~PREFIX*`), the keys beside them — fence counters (`~{PREFIX*}:fence`,
/// and `~{*}:fence:PREFIX*` for keys with a hash tag or a `}`), and the same for a
/// semaphore's details (`:permits`), a fair lock's queue (`:queue`) and a
/// read-write lock's readers and waiting writers (`:readers`, `:intents`), a lock's line of
/// waiting lockers (`:line`), the holders asked to let a key go (`:ask`) — and the
/// wake-up channels (`&PREFIX*`, and `&{PREFIX*` for a cluster's shard channels); nothing
/// else. Glob characters in the prefix are escaped. Append it to
/// `ACL SETUSER NAME on >PASSWORD` (or an ACL file's `user NAME on >PASSWORD` line).
///
/// On a Redis 7+ or Valkey cluster with wake-up, add `+spublish +ssubscribe +sunsubscribe`
/// (shard channels, see [`Locker::cluster`](crate::Locker::cluster)): Redis 6.2 knows no
/// such commands and would refuse a rule that names them. Without them, wake-up on such a
/// cluster [fails](crate::WakeUpState::Failing) with a permission error and waiters poll.
///
/// A user without it gets errors for which
/// [`Error::is_permission_denied`](crate::Error::is_permission_denied) is true.
///
/// ```
/// assert_eq!(
///     redmutex::check::acl_rule("app:"),
///     "resetkeys ~app:* ~{app:*}:fence ~{*}:fence:app:* ~{app:*}:permits \
///      ~{*}:permits:app:* ~{app:*}:queue ~{*}:queue:app:* ~{app:*}:readers \
///      ~{*}:readers:app:* ~{app:*}:intents \
///      ~{*}:intents:app:* ~{app:*}:line ~{*}:line:app:* ~{app:*}:ask ~{*}:ask:app:* \
///      resetchannels &app:* &{app:* -@all +evalsha +eval +script|load +set \
///      +get +del +pexpire +pexpireat +pttl +type +setrange +time +publish +subscribe \
///      +unsubscribe +ping +zadd +zrem +zscore +zrank +zcard +zcount +zrange +zrevrange \
///      +zrangebyscore +zremrangebyscore +zrangebylex +hget +hmget +hset +hdel +hexists +hincrby \
///      +exists +wait"
/// );
/// ```
pub fn acl_rule(prefix: &str) -> String {
    let prefix = escape_glob(prefix);
    let beside: String = (Companion::ALL.iter())
        .map(|kind| String::from_utf8_lossy(kind.suffix()).into_owned())
        .map(|suffix| format!(" ~{{{prefix}*}}{suffix} ~{{*}}{suffix}:{prefix}*"))
        .collect();
    format!("resetkeys ~{prefix}*{beside} resetchannels &{prefix}* &{{{prefix}* -@all {COMMANDS}")
}

/// `prefix` as a literal inside a Redis glob pattern.
pub(crate) fn escape_glob(prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_in_the_prefix_are_escaped() {
        assert_eq!(escape_glob("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:");
        assert!(acl_rule("x*:").starts_with("resetkeys ~x\\*:* "));
    }
}
