//! Standard output that can fail without a panic: a closed or broken stdout is exit 74
//! (EX_IOERR) with a message, never a panic, and `acquire` can tell that its token could
//! not be handed over.

use std::fmt;
use std::io::Write;

use crate::exit::{self, Failure};

/// Writes one line to stdout (like `println!`), or fails with exit 74.
macro_rules! outln {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

pub fn line(text: fmt::Arguments<'_>) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(text)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(exit::IO_ERROR, format!("cannot write to stdout: {e}")))
}

/// Whether redmutex was started with stdout closed (`>&-`). Rust's runtime reopens a
/// closed standard descriptor on `/dev/null` before `main` — so that no socket can take
/// its number — after which writes vanish without an error. So the descriptor is looked at
/// earlier still, by a function the loader runs before the runtime's set-up (an ELF
/// `.init_array` entry, Linux). A stdout on `/dev/null` that the caller opened (`>/dev/null`,
/// Python's `DEVNULL`, systemd's `StandardOutput=null`) is a choice to discard the output,
/// and is honoured. Elsewhere than Linux, a closed stdout is not told apart.
/// A command whose output is its answer refuses a closed stdout (`>&-`) with 74 before
/// doing anything: writes to it would be lost without an error (Rust's standard output
/// ignores a closed descriptor). `lost` says what would be lost (`acquire`: the token,
/// the only way to release the lock, so no lock is taken).
pub fn check_stdout_open(lost: &str) -> Result<(), Failure> {
    match stdout_was_closed() {
        true => Err(Failure::new(
            exit::IO_ERROR,
            format!("stdout is closed: {lost}"),
        )),
        false => Ok(()),
    }
}

/// What a closed stdout loses for a command that prints its answer.
pub const ANSWER_LOST: &str = "nowhere to print the answer";

pub fn stdout_was_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs before Rust's runtime starts (see [`stdout_was_closed`]).
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static LOOK_AT_STDOUT: extern "C" fn() = look_at_stdout;

#[cfg(target_os = "linux")]
extern "C" fn look_at_stdout() {
    // SAFETY: fcntl(F_GETFD) only asks whether descriptor 1 is open.
    let closed = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1;
    STDOUT_CLOSED.store(closed, std::sync::atomic::Ordering::Relaxed);
}

/// A line on stderr that can never fail redmutex (a closed or broken stderr is ignored).
pub fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "redmutex: {message}");
}
