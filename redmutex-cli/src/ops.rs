//! The operator's commands: `list` (every lock under the prefix), `watch` (a key's holder
//! changing), and `release --force` (a lock taken from whoever holds it, with an audit
//! line).

use std::io::Write;
use std::time::{Duration, SystemTime};

use clap::Args;
use redmutex::{Connection, ListedLock, LockKind, Locker};
use tokio::time::Instant;

use crate::describe;
use crate::describe::printable;
use crate::exit::{self, Failure};
use crate::output::outln;
use crate::reach::Outage;

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only keys (after the prefix) matching this glob, e.g. `jobs:*` [default: *].
    #[arg(value_name = "PATTERN")]
    pattern: Option<String>,

    /// One JSON object per lock (key, kind, ttl_ms, fence, holder_count, holders, waiters,
    /// awaited, permits); the count and time on stderr.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The key to watch.
    #[arg(value_name = "KEY")]
    pub key: String,

    /// One JSON object per change: time, key, held, and the lock as `list --json` shows it.
    #[arg(long)]
    json: bool,
}

/// Prints every lock under the prefix: aligned columns (or JSON lines), then how many and
/// how long the listing took.
pub async fn list<C: Connection>(
    locker: &Locker<C>,
    args: ListArgs,
    urls: &[String],
) -> Result<u8, Failure> {
    let failed = |e: redmutex::Error| Failure::from_lock_error(&e, urls);
    let pattern = args.pattern.as_deref().unwrap_or("*");
    let started = Instant::now();
    let mut listing = locker.list(pattern).map_err(failed)?;
    let mut rows = Vec::new();
    let mut count = 0usize;
    while let Some(page) = listing.next_page().await.map_err(failed)? {
        count += page.len();
        for lock in page {
            match args.json {
                true => outln!("{}", describe::json(&lock))?,
                false => rows.push(row(&lock)),
            }
        }
    }
    let took = format!("{:.1}ms", started.elapsed().as_secs_f64() * 1000.0);
    let summary = format!(
        "{count} lock{} in {took}",
        if count == 1 { "" } else { "s" }
    );
    if args.json {
        // (stdout is for the locks alone.)
        let _ = writeln!(std::io::stderr(), "redmutex: {summary}");
        return Ok(0);
    }
    rows.sort();
    print_table(&rows)?;
    outln!("{summary}")?;
    Ok(0)
}

/// One line of `list`: key, kind, holders, TTL, fence, waiting, held by.
pub fn row(lock: &ListedLock) -> [String; 7] {
    let holders = match lock.permits {
        Some((used, limit)) => format!("{} ({used}/{limit})", lock.holder_count),
        None => lock.holder_count.to_string(),
    };
    [
        printable(&lock.key_lossy()),
        lock.kind.name().to_owned(),
        holders,
        lock.ttl.map_or("-".to_owned(), crate::duration::human),
        lock.fence.map_or("-".to_owned(), |f| f.to_string()),
        describe::waiting(lock).unwrap_or_else(|| "-".to_owned()),
        describe::held_by(lock),
    ]
}

const HEADINGS: [&str; 7] = [
    "KEY", "KIND", "HOLDERS", "TTL", "FENCE", "WAITING", "HELD BY",
];

fn print_table(rows: &[[String; 7]]) -> Result<(), Failure> {
    for line in table_lines(rows) {
        outln!("{line}")?;
    }
    Ok(())
}

/// The headings and rows of `list`, aligned; nothing for no rows.
pub fn table_lines(rows: &[[String; 7]]) -> Vec<String> {
    if rows.is_empty() {
        return Vec::new();
    }
    let mut widths = HEADINGS.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            match i {
                6 => text.push_str(cell),
                _ => text.push_str(&format!("{cell:<width$}  ", width = widths[i])),
            }
        }
        text
    };
    let mut lines = vec![line(HEADINGS)];
    lines.extend(
        rows.iter()
            .map(|row| line(row.each_ref().map(String::as_str))),
    );
    lines
}

/// Prints a line whenever the key's holder changes (taken, released, another holder, a
/// new fence), until interrupted: polled every 100 ms, and woken at once by a release.
pub async fn watch<C: Connection>(
    locker: &Locker<C>,
    args: WatchArgs,
    urls: &[String],
    wait_redis: Duration,
) -> Result<u8, Failure> {
    let failed = |e: &redmutex::Error| Failure::from_lock_error(e, urls);
    let mut last: Option<Option<Holding>> = None;
    let mut outage = Outage::new(wait_redis);
    loop {
        let now = match locker.describe(&args.key).await {
            Ok(now) => now,
            Err(e) => {
                // Nothing is printed of a state nobody can read; the watch goes on for
                // at most --wait-redis of failures.
                outage.failed(failed(&e), e.is_transient())?;
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        outage.answered();
        let holding = now.as_ref().map(Holding::of);
        if last.as_ref() != Some(&holding) {
            outln!(
                "{}",
                watch_line(&args, &stored(locker, &args.key), now.as_ref())
            )?;
            last = Some(holding);
        }
        match now {
            // A release wakes this at once; a new holder is seen within the poll.
            Some(_) => {
                let _ = locker.wait_released(&args.key, POLL).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            None => tokio::time::sleep(POLL).await,
        }
    }
}

/// How often `watch` looks.
const POLL: Duration = Duration::from_millis(100);

/// What tells one holding from the next (not the TTL, which runs down).
#[derive(Debug, PartialEq)]
struct Holding {
    kind: LockKind,
    /// Holders turned tombstones by a forced release.
    forced: u32,
    holders: Vec<Option<String>>,
    holder_count: u32,
    fence: Option<u64>,
}

impl Holding {
    fn of(lock: &ListedLock) -> Holding {
        // Holders come soonest-to-expire first: a renewal reorders them, and is no change.
        let mut holders: Vec<Option<String>> =
            lock.holders.iter().map(|h| h.metadata.clone()).collect();
        holders.sort();
        Holding {
            kind: lock.kind,
            forced: lock.forced,
            holders,
            holder_count: lock.holder_count,
            fence: lock.fence,
        }
    }
}

/// A key as stored in Redis, the locker's prefix before it: as `list` and `inspect` name
/// keys.
fn stored<C: Connection>(locker: &Locker<C>, key: &str) -> String {
    format!("{}{key}", String::from_utf8_lossy(locker.prefix()))
}

fn watch_line(args: &WatchArgs, stored_key: &str, lock: Option<&ListedLock>) -> String {
    let time = describe::utc(SystemTime::now());
    let key = printable(stored_key);
    match (args.json, lock) {
        (true, Some(lock)) => format!(
            "{{\"time\":\"{time}\",\"key\":{},\"held\":true,\"lock\":{}}}",
            crate::describe::json_string(stored_key),
            describe::json(lock)
        ),
        (true, None) => format!(
            "{{\"time\":\"{time}\",\"key\":{},\"held\":false,\"lock\":null}}",
            crate::describe::json_string(stored_key)
        ),
        (false, Some(lock)) => format!("{time} {key} {}", describe::holding(lock)),
        (false, None) => format!("{time} {key} free"),
    }
}

/// `release --force`: takes each lock from whoever holds it, says what it took on stdout,
/// and leaves an audit line on stderr. Exit 1 when a key held nothing (or held data
/// redmutex did not write, which it leaves alone).
pub async fn force_release<C: Connection>(
    locker: &Locker<C>,
    keys: &[String],
    now: bool,
    urls: &[String],
) -> Result<u8, Failure> {
    let mut missed = Vec::new();
    for key in keys {
        let was = match now {
            true => locker.force_release_now(key).await,
            false => locker.force_release(key).await,
        };
        let was = was.map_err(|e| Failure::from_lock_error(&e, urls))?;
        let shown = printable(&stored(locker, key));
        match was {
            Some(lock) if lock.kind != LockKind::Foreign && lock.forced > 0 && !now => {
                outln!(
                    "{shown} was released by force already: {}.",
                    describe::holding(&lock)
                )?;
            }
            Some(lock) if lock.kind != LockKind::Foreign => {
                let after = match now {
                    true => {
                        "The holder is not told: it finds out at its next renewal or \
                             refresh, and may work on until then while another holds it."
                    }
                    false => {
                        "Nobody else gets it until its ttl ends; the holder finds out \
                              at its next renewal or refresh."
                    }
                };
                let nodes = urls.len();
                let minority = match nodes > 1 && lock.nodes <= nodes / 2 {
                    true => format!(
                        " It was on {} of {nodes} nodes only: a minority, which no holder can \
                         count as a lock (a failed try's leftover, or a holder that lost it).",
                        lock.nodes
                    ),
                    false => String::new(),
                };
                outln!(
                    "released {shown}: {}. {after}{minority}",
                    describe::holding(&lock)
                )
                .map_err(|failure| {
                    Failure::new(
                        failure.code,
                        format!("released {shown} by force, but {}", failure.message),
                    )
                })?;
                let _ = writeln!(
                    std::io::stderr(),
                    "{}",
                    audit(&stored(locker, key), &lock, now)
                );
            }
            Some(_) => missed.push(format!(
                "{shown} holds data redmutex did not write; left alone"
            )),
            None => missed.push(format!("{shown} was not held")),
        }
    }
    match missed.is_empty() {
        true => Ok(0),
        false => Err(Failure::new(exit::NOT_HELD, missed.join("; "))),
    }
}

/// `release --ask`: asks each key's holders to let it go; says who was asked. Exit 1 (as
/// for a release of a lock not held) when some key had nobody to ask.
pub async fn ask_release<C: Connection>(
    locker: &Locker<C>,
    keys: &[String],
    urls: &[String],
) -> Result<u8, Failure> {
    let mut missed = Vec::new();
    for key in keys {
        let held =
            (locker.request_release(key).await).map_err(|e| Failure::from_lock_error(&e, urls))?;
        let shown = printable(&stored(locker, key));
        match held {
            Some(lock) if lock.kind == LockKind::Foreign => missed.push(format!(
                "{shown} holds data redmutex did not write; nobody to ask"
            )),
            Some(lock) if lock.forced > 0 => missed.push(format!(
                "{shown} was released by force already; nobody to ask"
            )),
            Some(lock) => outln!("{}", asked_line(&shown, &lock)).map_err(|failure| {
                Failure::new(
                    failure.code,
                    format!("asked to let {shown} go, but {}", failure.message),
                )
            })?,
            None => missed.push(format!("{shown} was not held")),
        }
    }
    match missed.is_empty() {
        true => Ok(0),
        false => Err(Failure::new(exit::NOT_HELD, missed.join("; "))),
    }
}

/// What `release --ask` says it did: whom it asked (one holder, or every holder of a
/// semaphore or a read-write lock's readers) and what they do with the request.
fn asked_line(shown: &str, lock: &ListedLock) -> String {
    let holding = describe::holding(lock);
    match lock.holder_count {
        0 | 1 => format!(
            "asked to let {shown} go: {holding}. Its holder hears the request at once, or at its \
             next renewal, and keeps the lock until it releases it."
        ),
        n => format!(
            "asked all {n} holders to let {shown} go: {holding}. Each hears the request at once, or \
             at its next renewal, and keeps its share until it releases it."
        ),
    }
}

/// The audit line of a forced release: what was taken from whom, by whom, when.
fn audit(key: &str, lock: &ListedLock, now: bool) -> String {
    let holders: Vec<String> = (lock.holders.iter())
        .map(|h| crate::describe::json_string(h.metadata.as_deref().unwrap_or("")))
        .collect();
    let user = std::env::var("USER").unwrap_or_else(|_| "?".to_owned());
    let host = crate::hostname();
    format!(
        "redmutex: audit: {} forced release{} of {} ({}, fence {}, holders [{}]) by user={} host={} pid={}",
        describe::utc(SystemTime::now()),
        if now { " at once" } else { "" },
        crate::describe::json_string(key),
        lock.kind.name(),
        lock.fence.map_or("none".to_owned(), |f| f.to_string()),
        holders.join(", "),
        printable(&user),
        printable(&host),
        std::process::id(),
    )
}
