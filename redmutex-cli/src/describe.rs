//! How a lock found in Redis is shown — by `list`, `watch`, `release --force` and the
//! waiting line: its key, who holds it and since when, in words and as JSON.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redmutex::{
    connection::Connection, state::ListedHolder, state::ListedLock, state::LockKind, Locker,
};

use crate::duration;

/// When the holder took the lock, from the `since=UNIX_SECONDS` its metadata carries
/// (the CLI's default metadata does; the holder's clock, so roughly).
pub fn since(metadata: &str) -> Option<SystemTime> {
    let seconds = (metadata.split(' '))
        .find_map(|word| word.strip_prefix("since="))?
        .parse::<u64>()
        .ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// How long ago `then` was, as `3m12s` (nothing for a moment in the future).
pub fn ago(then: SystemTime) -> Option<String> {
    let elapsed = SystemTime::now().duration_since(then).ok()?;
    Some(duration::human(elapsed))
}

/// `2026-11-24T01:20:03Z`: a moment in UTC, to the second.
pub fn utc(moment: SystemTime) -> String {
    let seconds = moment.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The calendar date of a day counted from 1970-01-01 (proleptic Gregorian; H. Hinnant's
/// algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `host=b pid=9 cmd=x (for 3m12s)`, `3 readers: r=1 (for 2s), +2 more`, `nobody`: who holds
/// it, escaped for a terminal.
pub fn held_by(lock: &ListedLock) -> String {
    let first = lock.holders.first().map(holder_text);
    let more = (lock.holder_count as usize).saturating_sub(1);
    let mut text = match (lock.kind, first) {
        (LockKind::Foreign, _) => return "(not a redmutex lock)".to_owned(),
        (LockKind::Readers, Some(first)) if lock.holder_count == 1 => format!("1 reader: {first}"),
        (LockKind::Readers, Some(first)) => format!("{} readers: {first}", lock.holder_count),
        (_, Some(first)) => first,
        (_, None) => return "nobody".to_owned(),
    };
    if more > 0 {
        text.push_str(&format!(", +{more} more"));
    }
    text
}

/// `held by host=b pid=9 (for 3m12s) (lock, fence 42, ttl 12s)`: who holds it and the rest
/// of its line, as `inspect`, `watch` and `release --force` say it.
pub fn holding(lock: &ListedLock) -> String {
    format!("held by {} ({})", held_by(lock), details(lock))
}

fn holder_text(holder: &ListedHolder) -> String {
    let metadata = holder.metadata.as_deref().unwrap_or("(no metadata)");
    // The time it was taken is said as "for …" instead.
    let shown: Vec<&str> = (metadata.split(' '))
        .filter(|word| !word.starts_with("since="))
        .collect();
    let mut text = printable(&shown.join(" "));
    if let Some(permits) = holder.permits {
        let plural = if permits == 1 { "" } else { "s" };
        text.push_str(&format!(" [{permits} permit{plural}]"));
    }
    if let Some(ago) = holder.metadata.as_deref().and_then(since).and_then(ago) {
        text.push_str(&format!(" (for {ago})"));
    }
    if holder.released_by_force {
        text.push_str(" [released by force]");
    }
    text
}

/// `fence 42, ttl 12s` and the waiters: the rest of a lock's line.
fn details(lock: &ListedLock) -> String {
    let mut parts = vec![lock.kind.name().to_owned()];
    if let Some(fence) = lock.fence {
        parts.push(format!("fence {fence}"));
    }
    match lock.ttl {
        Some(ttl) => parts.push(format!("ttl {}", duration::human(ttl))),
        None => parts.push("no expiry".to_owned()),
    }
    if let Some((used, limit)) = lock.permits {
        parts.push(format!("{used}/{limit} permits"));
    }
    match lock.forced {
        0 => {}
        _ if lock.holder_count <= 1 => {
            parts.push("a tombstone: released by force, nobody gets it until its ttl ends".into())
        }
        n => parts.push(format!("{n} released by force, kept until their ttl ends")),
    }
    if let Some(waiting) = waiting(lock) {
        parts.push(format!("waiting: {waiting}"));
    }
    parts.join(", ")
}

/// How many wait (where the server keeps a line), `someone` (where waiters only asked to
/// hear of the release), or nothing.
pub fn waiting(lock: &ListedLock) -> Option<String> {
    match (lock.waiters, lock.awaited) {
        // The count is the server's: a flag left by waiters gone since says less.
        (Some(0), _) => None,
        (Some(n), _) => Some(n.to_string()),
        (None, true) => Some("someone".to_owned()),
        (None, false) => None,
    }
}

/// The lock as one JSON object (see "JSON output" in docs/CLI.md).
pub fn json(lock: &ListedLock) -> String {
    let ms = |d: Option<Duration>| d.map_or("null".to_owned(), |d| d.as_millis().to_string());
    let number = |n: Option<u64>| n.map_or("null".to_owned(), |n| n.to_string());
    let holders: Vec<String> = (lock.holders.iter())
        .map(|h| {
            format!(
                "{{\"metadata\":{},\"ttl_ms\":{},\"permits\":{},\"released_by_force\":{}}}",
                h.metadata.as_deref().map_or("null".to_owned(), json_string),
                ms(h.ttl),
                number(h.permits.map(u64::from)),
                h.released_by_force,
            )
        })
        .collect();
    let permits = lock.permits.map_or("null".to_owned(), |(used, limit)| {
        format!("{{\"used\":{used},\"limit\":{limit}}}")
    });
    format!(
        "{{\"key\":{},\"kind\":\"{}\",\"ttl_ms\":{},\"fence\":{},\"holder_count\":{},\
         \"holders\":[{}],\"waiters\":{},\"awaited\":{},\"permits\":{},\"forced\":{}}}",
        json_string(&lock.key_lossy()),
        lock.kind.name(),
        ms(lock.ttl),
        number(lock.fence),
        lock.holder_count,
        holders.join(","),
        number(lock.waiters.map(u64::from)),
        lock.awaited,
        permits,
        lock.forced,
    )
}

/// A key as stored in Redis, the locker's prefix before it: as `list` and `inspect` name
/// keys.
pub fn stored<C: Connection>(locker: &Locker<C>, key: &str) -> String {
    format!("{}{key}", String::from_utf8_lossy(locker.prefix()))
}

/// `text` safe for a terminal and for line-based readers: control characters (a newline
/// that would fake a line of its own, escape sequences) are written `\n`, `\r`, `\t` or
/// `\u{1b}`, and `\` as `\\`, so every escaped text reads back unambiguously.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// A JSON string literal.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_right_across_years_and_leap_days() {
        let at = |s: u64| utc(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_482_003), "2026-11-24T01:00:03Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn since_is_read_from_the_metadata() {
        let then = since("host=a pid=1 since=1795482003 cmd=x").unwrap();
        assert_eq!(utc(then), "2026-11-24T01:00:03Z");
        assert!(since("host=a since=soon").is_none());
        assert!(since("no time here").is_none());
    }

    #[test]
    fn text_output_escapes_control_characters() {
        assert_eq!(printable("plain key:é"), "plain key:é");
        assert_eq!(printable("a\nb: held"), "a\\nb: held");
        assert_eq!(printable("\u{1b}[2J\r\t\\"), "\\u{1b}[2J\\r\\t\\\\");
        assert_eq!(printable("\u{7f}\u{85}"), "\\u{7f}\\u{85}");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("plain"), "\"plain\"");
        assert_eq!(
            json_string("a\"b\\c\nd\u{1}é"),
            "\"a\\\"b\\\\c\\nd\\u0001é\""
        );
    }
}
