//! How a Redis error is classified: whether retrying may help, whether it is a refusal of
//! the ACL user. Below the error type and the quorum tally, which both sort by it.

/// `NOPERM`, sent directly or by a command inside a script.
pub(crate) fn is_no_permission(e: &redis::RedisError) -> bool {
    if matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
    ) || e.code() == Some("NOPERM")
    {
        return true;
    }
    // Inside a script the refusal is a plain ERR, worded by each server: Redis 6.2/7
    // ("The user executing the script can't run this command…", "…can't access at least
    // one of the keys…"), Valkey ("ACL failure in script: …").
    let text = e.to_string();
    [
        "NOPERM",
        "The user executing the script can't",
        "ACL failure in script",
    ]
    .iter()
    .any(|pattern| text.contains(pattern))
}

/// A TLS handshake that failed on the certificate: retrying cannot help.
fn is_certificate_error(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Io && e.to_string().contains("certificate")
}

/// A Redis error after which the same request may succeed: network trouble, timeouts,
/// a server loading its data set, cluster redirections and failovers.
pub(crate) fn is_transient_redis(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind as S};
    if is_no_permission(e) || is_certificate_error(e) {
        return false;
    }
    match e.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => true,
        ErrorKind::MasterNameNotFoundBySentinel | ErrorKind::NoValidReplicasFoundBySentinel => true,
        ErrorKind::Server(kind) => matches!(
            kind,
            S::BusyLoading
                | S::TryAgain
                | S::ClusterDown
                | S::MasterDown
                | S::ReadOnly
                | S::Moved
                | S::Ask
        ),
        _ => false,
    }
}
