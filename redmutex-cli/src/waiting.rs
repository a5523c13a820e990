//! The waiting line: while `exec` or `acquire` waits for a lock and stderr is a terminal,
//! one line that keeps saying what it waits for — who holds the key and for how long,
//! the TTL left, how long we have waited, our place in a fair lock's line — cleared once
//! the lock is taken (or the wait ends). Nothing of it without a terminal, or with
//! `--quiet`.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redmutex::{connection::Connection, FailedTry, Locker, TryFailure};
use tokio::time::Instant;

use crate::{describe, duration};

/// What the failed tries told: which key was held, and our place in line.
#[derive(Clone, Default, Debug)]
pub struct Progress(Arc<Mutex<Seen>>);

#[derive(Default, Debug)]
struct Seen {
    /// The key found held (with the prefix).
    held: Option<Vec<u8>>,
    /// A fair lock: how many wait ahead of us.
    ahead: Option<u32>,
}

impl Progress {
    /// A progress to show, when stderr is a terminal and the caller may wait.
    pub fn for_terminal(quiet: bool, nonblock: bool) -> Option<Progress> {
        let shown = !quiet && !nonblock && std::io::stderr().is_terminal();
        shown.then(Progress::default)
    }

    /// Takes in a failed try of the acquire (its failed-try callback calls it).
    pub fn record(&self, failed: &FailedTry<'_>) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let TryFailure::Held { key } = failed.reason {
            seen.held = Some(key.to_vec());
        }
        seen.ahead = failed.ahead;
    }
}

/// Awaits `wait` — an acquire — showing the waiting line meanwhile when `progress` is
/// given; the line is cleared before this returns (and if it is dropped).
pub async fn show<C: Connection, T>(
    locker: &Locker<C>,
    progress: Option<&Progress>,
    first_key: &str,
    wait: impl Future<Output = T>,
) -> T {
    let Some(progress) = progress else {
        return wait.await;
    };
    tokio::pin!(wait);
    let started = Instant::now();
    let mut line = Line::default();
    // Not for a lock taken at once: the first look after a moment.
    let mut tick = tokio::time::interval_at(started + FIRST_LOOK, EVERY);
    loop {
        tokio::select! {
            out = &mut wait => return out,
            _ = tick.tick() => {
                let text = line_text(locker, progress, first_key, started).await;
                line.draw(&text);
            }
        }
    }
}

const FIRST_LOOK: Duration = Duration::from_millis(300);
const EVERY: Duration = Duration::from_millis(250);

/// What the line says now.
pub async fn line_text<C: Connection>(
    locker: &Locker<C>,
    progress: &Progress,
    first_key: &str,
    started: Instant,
) -> String {
    let (held, ahead) = {
        let seen = progress.0.lock().unwrap_or_else(|p| p.into_inner());
        (seen.held.clone(), seen.ahead)
    };
    // The key the tries found held, as the locker names it (without its prefix).
    let key = (held.as_deref())
        .and_then(|key| key.strip_prefix(locker.prefix()))
        .map_or(first_key.to_owned(), |k| {
            String::from_utf8_lossy(k).into_owned()
        });
    let mut text = format!(
        "waiting for {} ({})",
        crate::describe::printable(&key),
        duration::human(started.elapsed())
    );
    if let Some(ahead) = ahead {
        text.push_str(&format!(", {} in line", ordinal(ahead + 1)));
    }
    match locker.describe(&key).await {
        Ok(Some(lock)) => {
            text.push_str(&format!(": held by {}", describe::held_by(&lock)));
            if let Some((used, limit)) = lock.permits {
                let free = limit.saturating_sub(used);
                text.push_str(&format!(", {free} of {limit} permits free"));
            }
            if let Some(ttl) = lock.ttl {
                text.push_str(&format!(", {} left", duration::human(ttl)));
            }
        }
        Ok(None) => text.push_str(": free, trying"),
        Err(e) => text.push_str(&format!(": ({e})")),
    }
    text
}

/// `1st`, `2nd`, `3rd`, `4th`, … `11th`, `21st`.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The line on the terminal: redrawn in place, cleared when done.
#[derive(Default)]
struct Line {
    drawn: bool,
}

impl Line {
    fn draw(&mut self, text: &str) {
        let width = terminal_width().saturating_sub(1).max(20);
        let text: String = text.chars().take(width).collect();
        // Carriage return, the text, then erase what an older, longer line left.
        let _ = write!(std::io::stderr(), "\r{text}\x1b[K");
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            let _ = std::io::stderr().flush();
        }
    }
}

/// The terminal's width in columns (80 when it cannot be asked).
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills the winsize it is given, and nothing else.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let asked = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) };
    match (asked, size.ws_col) {
        (0, cols) if cols > 0 => usize::from(cols),
        _ => 80,
    }
}

#[cfg(test)]
mod tests {
    use super::ordinal;

    #[test]
    fn places_read_as_english_ordinals() {
        let names: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .map(ordinal)
            .into();
        assert_eq!(
            names,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }
}
