//! The guard of `redmutex exec`: a small process that outlives redmutex, to stop the
//! command's process group if redmutex dies first (SIGKILL, the OOM killer) — otherwise the
//! command would run on without a lock that nobody renews any more, and a second `exec`
//! would start a second copy once the lock expired.
//!
//! redmutex starts the guard (itself, run again as `redmutex __guard KILL_AFTER_MS`) before
//! the command, in a session of its own so that a signal to redmutex's process group does
//! not reach it, with the reading end of a pipe as its stdin; redmutex alone holds the
//! writing end. Over it the guard learns the command's process group (`PGID\n`), and at the
//! end that all is well (`done\n`). End of file without `done` means redmutex is gone: the
//! guard sends the group SIGTERM at once, and SIGKILL after `KILL_AFTER_MS` — the lesser of
//! `--grace` and a third of the TTL, so that the command is gone before the lock, no longer
//! renewed, can expire.
//!
//! The direct child also gets SIGTERM from the kernel when redmutex dies (Linux's
//! parent-death signal), which covers the moment before the guard knows the group.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The hidden subcommand that runs the guard.
pub const SUBCOMMAND: &str = "__guard";

/// redmutex's side: the writing end of the guard's pipe, and the guard process.
pub struct Guard {
    pipe: std::fs::File,
    process: Child,
}

impl Guard {
    /// Starts the guard; it does nothing until it knows the command's group.
    pub fn start(kill_after: Duration) -> io::Result<Guard> {
        let (reader, writer) = pipe()?;
        let process = Command::new(own_binary())
            .arg(SUBCOMMAND)
            .arg(kill_after.as_millis().to_string())
            .stdin(Stdio::from(reader))
            .stdout(Stdio::null())
            .spawn()?;
        Ok(Guard {
            pipe: std::fs::File::from(writer),
            process,
        })
    }

    /// Tells the guard which process group to stop should redmutex die.
    pub fn watch(&mut self, pgid: libc::pid_t) -> io::Result<()> {
        writeln!(self.pipe, "{pgid}")
    }

    /// The command's group is gone (or stopped by redmutex itself): the guard exits
    /// without signalling anyone.
    pub fn done(mut self) {
        let _ = writeln!(self.pipe, "done");
        drop(self.pipe);
        // It exits at once; reaped here so that it leaves no zombie behind.
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            if !matches!(self.process.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The binary to run again: this very file even if it was replaced since (Linux), else
/// the path it was started from.
fn own_binary() -> OsString {
    if std::path::Path::new("/proc/self/exe").exists() {
        return "/proc/self/exe".into();
    }
    std::env::current_exe()
        .map(OsString::from)
        .unwrap_or_else(|_| "redmutex".into())
}

/// A pipe whose ends are closed on exec (the command must not inherit the writing end,
/// or the guard would never see redmutex's end); the reading end becomes the guard's stdin.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills in two new descriptors, owned from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The guard process: `redmutex __guard KILL_AFTER_MS`, its stdin the pipe.
pub fn run(args: &[OsString]) -> ExitCode {
    let kill_after = args
        .first()
        .and_then(|a| a.to_str()?.parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(5));
    // SAFETY: leaves redmutex's session and process group, and ignores the signals a
    // terminal or a group kill would send: the guard must live to do its one job.
    unsafe {
        libc::setsid();
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let mut pgid: Option<libc::pid_t> = None;
    let mut lines = BufReader::new(io::stdin().lock()).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line == "done" => return ExitCode::SUCCESS,
            Some(Ok(line)) => pgid = line.trim().parse().ok().filter(|p| *p > 0),
            // End of file (or an error reading): redmutex is gone.
            _ => break,
        }
    }
    if let Some(pgid) = pgid {
        stop_group(pgid, kill_after);
    }
    ExitCode::SUCCESS
}

/// SIGTERM to the group (SIGCONT too, should it be stopped), SIGKILL to what is left
/// after `kill_after`.
fn stop_group(pgid: libc::pid_t, kill_after: Duration) {
    let alive = || group_exists(pgid);
    if !alive() {
        return;
    }
    let _ = writeln!(
        io::stderr(),
        "redmutex: the exec supervisor died while its command ran without it; stopping the \
         command's process group {pgid} (SIGTERM, SIGKILL in {kill_after:?})"
    );
    // SAFETY: kill(2) on the process group the supervisor created for the command.
    unsafe {
        libc::kill(-pgid, libc::SIGTERM);
        libc::kill(-pgid, libc::SIGCONT);
    }
    let until = Instant::now() + kill_after;
    while alive() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive() {
        // SAFETY: as above.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

/// Whether any process is in group `pgid`: one that redmutex may not signal (another
/// user's, after `sudo`) still counts — only "no such process" means gone.
pub fn group_exists(pgid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence.
    let signalled = unsafe { libc::kill(-pgid, 0) } == 0;
    signalled || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
