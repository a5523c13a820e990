//! `redmutex list`: every lock under the prefix, in aligned columns or as JSON lines.

use std::io::Write;

use clap::Args;
use redmutex::{connection::Connection, state::ListedLock, Locker};
use tokio::time::Instant;

use crate::connect::{Checks, Connects, Session};
use crate::describe::{self, printable};
use crate::duration;
use crate::exit::Failure;
use crate::output::{self, outln};
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

impl Connects for ListArgs {
    fn check(&self, _checks: &Checks<'_>) -> Result<(), Failure> {
        output::check_stdout_open(output::ANSWER_LOST)
    }
}

/// Prints every lock under the prefix: aligned columns (or JSON lines), then how many and
/// how long the listing took.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: ListArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let pattern = args.pattern.as_deref().unwrap_or("*");
    let started = Instant::now();
    let mut listing =
        (locker.list(pattern)).map_err(|e| Failure::from_lock_error(&e, session.urls))?;
    let mut rows = Vec::new();
    let mut count = 0usize;
    // A page Redis cannot tell is asked again (the listing reads it again), as `inspect`,
    // `wait` and `watch` do, until `--wait-redis` has passed.
    let mut outage = Outage::new(session.wait_redis);
    loop {
        let page = match listing.next_page().await {
            Ok(Some(page)) => page,
            Ok(None) => break,
            Err(e) => {
                outage.ask_again(&e, session.urls).await?;
                continue;
            }
        };
        outage.answered();
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
        lock.ttl.map_or("-".to_owned(), duration::human),
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
