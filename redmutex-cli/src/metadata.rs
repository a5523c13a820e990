//! Who holds a lock, in the text stored with it: this host, this process, since when.

/// `host=web-3 pid=4121 since=1795482003 cmd=backup.sh`: who holds the lock, and since
/// when (Unix seconds, this host's clock), for `inspect`, `list` and the waiting line.
pub fn default_metadata(what: &str) -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (host, pid) = (hostname(), std::process::id());
    let mut text = format!("host={host} pid={pid} since={since} cmd={what}");
    // Keep it short: it is stored with every lock.
    if text.len() > 200 {
        let mut cut = 200;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// This host's name (`unknown` when it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}
