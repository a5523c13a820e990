//! Standard output that can fail without a panic: a closed or broken stdout is exit 74
//! (EX_IOERR) with a message, never a panic, and `acquire` can tell that its token could
//! not be handed over.

use std::fmt;
use std::io::Write;
use std::os::fd::AsRawFd;

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
/// closed standard descriptor on `/dev/null`, read-write, before `main` — so that no
/// socket can take its number — after which writes vanish without an error. A stdout that
/// is `/dev/null` opened read-write is that: a shell's `>/dev/null` opens it write-only,
/// and is a choice to discard the output that is honoured.
pub fn stdout_was_closed() -> bool {
    let fd = std::io::stdout().as_raw_fd();
    // SAFETY: fstat and fcntl only read the descriptor's state into local storage.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut stat) != 0 {
            return true;
        }
        let dev_null = (stat.st_mode & libc::S_IFMT) == libc::S_IFCHR
            && libc::major(stat.st_rdev) == 1
            && libc::minor(stat.st_rdev) == 3;
        let flags = libc::fcntl(fd, libc::F_GETFL);
        dev_null && flags >= 0 && (flags & libc::O_ACCMODE) == libc::O_RDWR
    }
}
