//! `redmutex exec`: run a command under a kept-alive lock, and stop it if the lock is lost.
//!
//! The command runs in a process group of its own, so that a lost lock can stop all of
//! it, grandchildren included. When redmutex runs in the foreground of a terminal, that
//! group is made the terminal's foreground group while the command runs — otherwise an
//! interactive command would be stopped (SIGTTIN) the moment it reads the terminal — and
//! the terminal is taken back afterwards. Ctrl-C then reaches the command directly, as
//! it would without redmutex; SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redmutex itself
//! are forwarded to the command's group.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use redmutex::{Connection, Locker, LostReason};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use crate::exit::{self, Failure};
use crate::{duration, ExecArgs};

pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: ExecArgs,
    urls: &[String],
) -> Result<u8, Failure> {
    let program = args.command[0].to_string_lossy().into_owned();
    let lock = match args.lock.acquire(locker, &args.keys, &program).await {
        Ok(lock) => lock,
        Err(e) if e.is_not_obtained() => {
            return Err(Failure::new(args.conflict_exit_code, e.to_string()))
        }
        Err(e) => return Err(Failure::from_lock_error(&e, urls)),
    };
    let ttl_ms = lock.lease_ttl().as_millis().to_string();
    let token = lock.token();
    let lease = lock.keep_alive();

    // From here on, these signals are forwarded to the command instead of ending redmutex.
    let mut signals = Forwarded::new()
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot handle signals: {e}")))?;
    let take_terminal = in_terminal_foreground();

    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("REDMUTEX_KEYS", args.keys.join(","))
        .env("REDMUTEX_TOKEN", token.as_str())
        .env("REDMUTEX_TTL_MS", &ttl_ms);
    // SAFETY: the closure only makes async-signal-safe calls (setpgid, signal, tcsetpgrp,
    // getpgrp), as required between fork and exec.
    unsafe {
        command.pre_exec(move || join_own_group(take_terminal));
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = lease.release().await;
            let code = if e.kind() == io::ErrorKind::PermissionDenied {
                126
            } else {
                127
            };
            return Err(Failure::new(code, format!("cannot run {program:?}: {e}")));
        }
    };
    let pgid = child
        .id()
        .and_then(|pid| libc::pid_t::try_from(pid).ok())
        .unwrap_or(0);
    if pgid > 0 {
        // Also from the parent, so that the group exists whichever side runs first.
        // SAFETY: plain system calls on our own child.
        unsafe {
            libc::setpgid(pgid, pgid);
        }
        if take_terminal {
            give_terminal_to(pgid);
        }
    }

    let outcome = loop {
        tokio::select! {
            biased;
            status = child.wait() => break Ok(status),
            reason = lease.lost() => break Err(reason),
            sig = signals.recv() => signal_group(pgid, sig),
        }
    };
    match outcome {
        Ok(status) => {
            if take_terminal {
                take_terminal_back();
            }
            if let Err(e) = lease.release().await {
                if e.is_not_held() {
                    eprintln!(
                        "redmutex: warning: the lock was already gone when the command exited"
                    );
                }
            }
            Ok(status.map_or(1, |s| exit_code(&s)))
        }
        Err(reason) => {
            stop_after_loss(&mut child, pgid, &reason, args.grace).await;
            if take_terminal {
                take_terminal_back();
            }
            Err(Failure::new(
                exit::LOST,
                format!("command stopped: {reason}"),
            ))
        }
    }
}

/// SIGTERM to the whole group, then SIGKILL to whatever is left after `grace`.
async fn stop_after_loss(
    child: &mut tokio::process::Child,
    pgid: libc::pid_t,
    reason: &LostReason,
    grace: Duration,
) {
    eprintln!(
        "redmutex: {reason}; sending SIGTERM to the command (SIGKILL in {})",
        duration::format(grace)
    );
    signal_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    // The command may be gone while its children are still stopping.
    while Instant::now() < deadline && group_alive(pgid) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if group_alive(pgid) {
        signal_group(pgid, libc::SIGKILL);
    }
    let _ = child.wait().await;
}

/// The exit status redmutex passes on: the command's code, or 128 + N for signal N.
fn exit_code(status: &ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        _ => 1,
    }
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    if pgid > 0 {
        // SAFETY: kill(2) on the process group we created.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

fn group_alive(pgid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pgid > 0 && unsafe { libc::kill(-pgid, 0) } == 0
}

/// Runs in the child between fork and exec.
fn join_own_group(take_terminal: bool) -> io::Result<()> {
    // SAFETY: async-signal-safe calls only.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if take_terminal {
            // A background group may not set the terminal's group unless SIGTTOU is
            // ignored; restore the default before exec, since exec keeps ignored signals.
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp());
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
        }
    }
    Ok(())
}

/// Whether stdin is a terminal whose foreground group is ours.
fn in_terminal_foreground() -> bool {
    // SAFETY: queries only.
    unsafe {
        libc::isatty(libc::STDIN_FILENO) == 1
            && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp()
    }
}

fn give_terminal_to(pgid: libc::pid_t) {
    // SAFETY: as in join_own_group; the previous SIGTTOU disposition is restored.
    unsafe {
        let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(libc::STDIN_FILENO, pgid);
        libc::signal(libc::SIGTTOU, previous);
    }
}

fn take_terminal_back() {
    // SAFETY: getpgrp cannot fail.
    give_terminal_to(unsafe { libc::getpgrp() });
}

/// The signals redmutex forwards to the command.
struct Forwarded {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl Forwarded {
    fn new() -> io::Result<Forwarded> {
        Ok(Forwarded {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    /// The next signal received, as its number.
    async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            Some(()) = self.interrupt.recv() => libc::SIGINT,
            Some(()) = self.terminate.recv() => libc::SIGTERM,
            Some(()) = self.hangup.recv() => libc::SIGHUP,
            Some(()) = self.quit.recv() => libc::SIGQUIT,
            // Only if the signal driver shut down: then there is nothing to forward.
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_pass_through() {
        assert_eq!(exit_code(&ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(&ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(&ExitStatus::from_raw(libc::SIGTERM)), 128 + 15);
        assert_eq!(exit_code(&ExitStatus::from_raw(libc::SIGKILL)), 128 + 9);
    }
}
