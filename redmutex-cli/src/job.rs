//! A command run under a lease, for `exec` (a lock's) and `elect` (a leadership's): it runs
//! while the lease is held, and is stopped if the lease is lost.
//!
//! The command runs in a process group of its own, so that a lost lock can stop all of
//! it, grandchildren included. When redmutex runs in the foreground of a terminal, that
//! group is made the terminal's foreground group while the command runs — otherwise an
//! interactive command would be stopped (SIGTTIN) the moment it reads the terminal — and
//! the terminal is taken back afterwards. Ctrl-C then reaches the command directly, as
//! it would without redmutex; SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redmutex itself
//! are forwarded to the command's group.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use redmutex::{claim::Held, connection::Connection, Lease, LostReason};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use crate::duration;
use crate::exit::{self, Failure};
use crate::guard::{group_exists, Guard};
use crate::output::say;

/// What to run under a lease: the command, the keys it is told of, and its grace between
/// SIGTERM and SIGKILL after a loss.
pub struct Job<'a> {
    pub keys: &'a [String],
    pub command: &'a [OsString],
    pub grace: Duration,
    /// A semaphore's limit and the permits taken of it (`--limit`, `--permits`).
    pub permits: Option<(u32, u32)>,
    /// The Redis URLs, to name Redlock nodes by address in messages.
    pub urls: &'a [String],
    /// What the command is sent when another process asks the holder to let go.
    pub on_revoke: OnRevoke,
}

/// The signals `--on-revoke` knows by name (without `SIG`).
const SIGNALS: [(&str, libc::c_int); 9] = [
    ("TERM", libc::SIGTERM),
    ("INT", libc::SIGINT),
    ("HUP", libc::SIGHUP),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("KILL", libc::SIGKILL),
    ("ALRM", libc::SIGALRM),
    ("WINCH", libc::SIGWINCH),
];

/// `SIGTERM`, or `signal 42` for one without a name here.
fn signal_name(number: libc::c_int) -> String {
    match SIGNALS.iter().find(|(_, n)| *n == number) {
        Some((name, _)) => format!("SIG{name}"),
        None => format!("signal {number}"),
    }
}

/// The signal `--on-revoke` names; `None` ignores requests to let go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnRevoke(pub Option<libc::c_int>);

/// Reads `--on-revoke`: `none`, a signal's name with or without `SIG` (any case), or its
/// number.
pub fn parse_on_revoke(text: &str) -> Result<OnRevoke, String> {
    let upper = text.trim().to_ascii_uppercase();
    if upper == "NONE" {
        return Ok(OnRevoke(None));
    }
    let number = match upper.parse::<libc::c_int>() {
        Ok(number) if (1..=64).contains(&number) => number,
        Ok(number) => return Err(format!("no signal numbered {number} (1 to 64)")),
        Err(_) => {
            let name = upper.strip_prefix("SIG").unwrap_or(&upper);
            let known = SIGNALS.iter().find(|(known, _)| *known == name);
            let Some((_, number)) = known else {
                return Err(format!(
                    "unknown signal {text:?}: a name (TERM, INT, HUP, QUIT, USR1, USR2, KILL, \
                     ALRM, WINCH), a number, or none"
                ));
            };
            *number
        }
    };
    // The lock is released when the command ends: a signal that stops it (or continues
    // it) would keep the lock held by a command that does nothing.
    let stops = [
        libc::SIGSTOP,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGCONT,
    ];
    if stops.contains(&number) {
        return Err(format!(
            "signal {number} stops or continues the command rather than asking it to end; \
             choose one it ends on (TERM, INT, HUP, USR1, …) or none"
        ));
    }
    // Signals that tell of something else (a child ended, urgent socket data), ignored
    // unless caught: a command would take the request for that, or not hear it at all.
    if [libc::SIGCHLD, libc::SIGURG].contains(&number) {
        return Err(format!(
            "signal {number} tells a program of something else and is ignored by default; \
             choose one the command ends on (TERM, INT, HUP, USR1, …) or none"
        ));
    }
    // The C library keeps the signals between the classic ones and SIGRTMIN for its threads.
    if number > 31 && number < libc::SIGRTMIN() {
        return Err(format!(
            "signal {number} is the C library's own (threads); real-time signals for \
             programs are {} to {}",
            libc::SIGRTMIN(),
            libc::SIGRTMAX()
        ));
    }
    Ok(OnRevoke(Some(number)))
}

/// Runs the command while `lease` is held; stops it if the lease is lost (exit
/// [`exit::LOST`]).
pub async fn hold<C: Connection, P: Held>(
    lease: Lease<C, P>,
    args: &Job<'_>,
    program: &str,
) -> Result<u8, Failure> {
    // From here on, these signals are forwarded to the command instead of ending redmutex.
    let mut signals = Forwarded::new()
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot handle signals: {e}")))?;
    let terminal = Terminal::foreground();
    // Should redmutex die, the guard stops the command's group before the lock, no longer
    // renewed, can expire: at most a third of the TTL after its last renewal.
    let kill_after = args.grace.min(lease.lease_ttl() / 3);
    let mut guard = Guard::start(kill_after)
        .map_err(|e| say(&format!("warning: no guard for the command: {e}")))
        .ok();
    become_subreaper();

    let mut child = match spawn_command(args, &lease, terminal.as_ref()) {
        Ok(child) => child,
        Err(e) => {
            // The child may have taken the terminal before exec failed.
            if let Some(terminal) = &terminal {
                terminal.take_back();
            }
            let _ = lease.release().await;
            if let Some(guard) = guard {
                guard.done();
            }
            // 126: found but not runnable, 127: not found (as shells say).
            let code = 126 + u8::from(e.kind() != io::ErrorKind::PermissionDenied);
            return Err(Failure::new(code, format!("cannot run {program:?}: {e}")));
        }
    };
    let pgid = own_group(&child, terminal.as_ref(), guard.as_mut());

    let result = match supervise(&mut child, pgid, &lease, &mut signals, args).await {
        Ok(status) => {
            // The group is gone: nothing for the guard to stop (its number may be reused).
            if let Some(guard) = guard.take() {
                guard.done();
            }
            release_at_end(lease, args.urls).await;
            Ok(status.map_or(1, |s| exit_code(&s)))
        }
        Err(reason) => {
            let reason = crate::redact::name_nodes(&reason.to_string(), args.urls);
            stop_after_loss(&mut child, pgid, &reason, args.grace, &mut signals).await;
            let message = format!("command stopped: {reason}");
            Err(Failure::new(exit::LOST, message))
        }
    };
    if let Some(terminal) = &terminal {
        terminal.take_back();
    }
    if let Some(guard) = guard {
        guard.done();
    }
    result
}

/// The command's process group (its pid; 0 if it has none), set up from this side too:
/// the group exists whichever side runs first, has the terminal if redmutex had it, and is
/// watched by the guard.
fn own_group(
    child: &tokio::process::Child,
    terminal: Option<&Terminal>,
    guard: Option<&mut Guard>,
) -> libc::pid_t {
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
        if let Some(terminal) = terminal {
            terminal.give_to(pgid);
        }
        if let Some(Err(e)) = guard.map(|g| g.watch(pgid)) {
            say(&format!(
                "warning: the guard is not watching the command: {e}"
            ));
        }
    }
    pgid
}

/// Releases the lease once the command's group has exited: a release that fails is said
/// on stderr (the lock stays taken until its TTL ends), and does not change the exit status.
async fn release_at_end<C: Connection, P: Held>(lease: Lease<C, P>, urls: &[String]) {
    let ttl = lease.lease_ttl();
    match lease.release().await {
        Ok(()) => {}
        Err(e) if e.is_not_held() => {
            say("warning: the lock was already gone when the command's group exited")
        }
        Err(e) => {
            let e = crate::redact::name_nodes(&e.to_string(), urls);
            say(&format!(
                "warning: the lock could not be released ({e}): nobody else gets it \
                 until its ttl ends, within {}",
                duration::human(ttl)
            ));
        }
    }
}

/// Starts the command in a process group of its own (the terminal's foreground group if
/// redmutex has the terminal), with the lock's details in its environment.
fn spawn_command<C: Connection, P: Held>(
    args: &Job<'_>,
    lease: &Lease<C, P>,
    terminal: Option<&Terminal>,
) -> io::Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("REDMUTEX_KEYS", encode_keys(args.keys))
        .env("REDMUTEX_TOKEN", lease.token().as_str())
        .env("REDMUTEX_TTL_MS", lease.lease_ttl().as_millis().to_string());
    if let Some((limit, permits)) = args.permits {
        command
            .env("REDMUTEX_LIMIT", limit.to_string())
            .env("REDMUTEX_PERMITS", permits.to_string());
    }
    // The fence to pass on with every write the command makes to fenced storage.
    if let Some(fence) = lease.fence_if_taken() {
        command.env("REDMUTEX_FENCE", fence.to_string());
    }
    let tty_fd = terminal.map(Terminal::fd);
    // SAFETY: getpid only reads.
    let supervisor = unsafe { libc::getpid() };
    // SAFETY: the closure only makes async-signal-safe calls (setpgid, signal, tcsetpgrp,
    // getpgrp, prctl, getppid), as required between fork and exec.
    unsafe {
        command.pre_exec(move || join_own_group(tty_fd, supervisor));
    }
    command.spawn()
}

/// Waits for the command to exit, then for the rest of its process group: processes it
/// left running (`sh -c 'job & exit'`) still count as the command, as with `flock(1)`, so
/// the lock is held and renewed until the group is empty. Returns the command's own exit
/// status, or why the lease was lost first.
async fn supervise<C: Connection, P: Held>(
    child: &mut tokio::process::Child,
    pgid: libc::pid_t,
    lease: &Lease<C, P>,
    signals: &mut Forwarded,
    job: &Job<'_>,
) -> Result<Option<ExitStatus>, LostReason> {
    let mut asked = false;
    let status = loop {
        tokio::select! {
            biased;
            status = child.wait() => break status.ok(),
            reason = lease.lost() => return Err(reason),
            sig = signals.recv() => signal_group(pgid, sig),
            () = lease.release_requested(), if !asked => {
                asked = true;
                revoked(pgid, job);
            }
        }
    };
    while group_alive(pgid) {
        tokio::select! {
            biased;
            reason = lease.lost() => return Err(reason),
            sig = signals.recv() => signal_group(pgid, sig),
            () = tokio::time::sleep(GROUP_POLL) => {}
        }
    }
    Ok(status)
}

/// Another process asked the holder to let go: the command is sent `--on-revoke`'s signal
/// (and told on stderr), and the lock goes when it ends; or the request is only noted.
fn revoked(pgid: libc::pid_t, job: &Job<'_>) {
    let keys = job.keys.join(", ");
    match job.on_revoke.0 {
        Some(sig) => {
            signal_group(pgid, sig);
            // A stopped group (Ctrl-Z) would not see it until continued.
            signal_group(pgid, libc::SIGCONT);
            say(&format!(
                "asked to let {keys} go: sent {} to the command; the lock is released when \
                 it ends",
                signal_name(sig)
            ));
        }
        None => say(&format!(
            "asked to let {keys} go; ignored (--on-revoke none): the lock is kept"
        )),
    }
}

/// How often the rest of the command's group is looked for once the command has exited.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// Makes redmutex the reaper of the command's orphaned descendants (Linux), so that a
/// group member that exits is reaped here ([`group_alive`]) even where the system's own
/// reaper (PID 1 in a container) does not reap.
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: sets a flag on this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// `REDMUTEX_KEYS`: the keys joined with `,`, each with `%` written `%25` and `,` written
/// `%2C`, so that splitting on `,` and decoding gives back exactly the keys (`a,b` + `c` and
/// `a` + `b` + `c` read differently), and keys without either read as they are.
pub fn encode_keys(keys: &[String]) -> String {
    let encoded: Vec<String> = keys
        .iter()
        .map(|key| key.replace('%', "%25").replace(',', "%2C"))
        .collect();
    encoded.join(",")
}

/// SIGTERM to the whole group, then SIGKILL to whatever is left after `grace`. Signals
/// sent to redmutex meanwhile are still forwarded.
async fn stop_after_loss(
    child: &mut tokio::process::Child,
    pgid: libc::pid_t,
    reason: &str,
    grace: Duration,
    signals: &mut Forwarded,
) {
    // Signal first, talk after: nothing may delay stopping a command that lost its lock.
    signal_group(pgid, libc::SIGTERM);
    // A stopped group (Ctrl-Z) would not see the SIGTERM until continued.
    signal_group(pgid, libc::SIGCONT);
    say(&format!(
        "{reason}; sent SIGTERM to the command (SIGKILL in {})",
        duration::format(grace)
    ));
    let far = Instant::now() + Duration::from_secs(86_400 * 365);
    let deadline = Instant::now().checked_add(grace).unwrap_or(far).min(far);
    let mut reaped = false;
    // The command may be gone while its children are still stopping: wait for the group.
    while Instant::now() < deadline && (!reaped || group_alive(pgid)) {
        tokio::select! {
            status = child.wait(), if !reaped => reaped = status.is_ok(),
            sig = signals.recv() => signal_group(pgid, sig),
            () = tokio::time::sleep(Duration::from_millis(20)), if reaped => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
    if !reaped || group_alive(pgid) {
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

/// Whether any process of the group is left, after reaping those of its members that are
/// redmutex's children and have exited (a zombie still counts as a member).
fn group_alive(pgid: libc::pid_t) -> bool {
    if pgid <= 0 {
        return false;
    }
    // SAFETY: waitpid on members of the command's group only (the command itself has been
    // reaped by then, or is reaped here once it has exited: both are fine for callers that
    // check the group after the command), then signal 0, which only checks for existence.
    unsafe { while libc::waitpid(-pgid, std::ptr::null_mut(), libc::WNOHANG) > 0 {} }
    group_exists(pgid)
}

/// Runs in the child between fork and exec: its own process group, the terminal's
/// foreground if redmutex had it, and (Linux) SIGTERM should `supervisor` die.
fn join_own_group(tty: Option<RawFd>, supervisor: libc::pid_t) -> io::Result<()> {
    // SAFETY: async-signal-safe calls only.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        #[cfg(target_os = "linux")]
        {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
            // Gone before the request took effect: nobody would renew the lock. (No
            // allocation between fork and exec: a bare OS error.)
            if libc::getppid() != supervisor {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        if let Some(fd) = tty {
            // SIGTTOU is ignored (inherited from redmutex), which a background group
            // needs in order to set the terminal's foreground group.
            libc::tcsetpgrp(fd, libc::getpgrp());
        }
        // exec keeps ignored signals ignored: give the command the default back.
        libc::signal(libc::SIGTTOU, libc::SIG_DFL);
    }
    Ok(())
}

/// The controlling terminal, when redmutex runs in its foreground. Found through
/// `/dev/tty` rather than stdin, so that `producer | redmutex exec k -- less` still hands
/// the terminal to `less`.
struct Terminal(File);

impl Terminal {
    /// The terminal, when redmutex runs in its foreground. From then on, SIGTTOU is
    /// ignored: once the command has the terminal, redmutex is a background process there,
    /// and with `stty tostop` its own messages would stop it; ignoring SIGTTOU lets them
    /// through (and lets it take the terminal back). The child restores the default.
    fn foreground() -> Option<Terminal> {
        // SAFETY: changes one signal disposition.
        unsafe {
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        }
        let tty = File::options()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        // SAFETY: queries only.
        let ours = unsafe { libc::tcgetpgrp(tty.as_raw_fd()) == libc::getpgrp() };
        ours.then_some(Terminal(tty))
    }

    fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    fn give_to(&self, pgid: libc::pid_t) {
        // SAFETY: SIGTTOU is ignored, so this works from a background group too.
        unsafe {
            libc::tcsetpgrp(self.fd(), pgid);
        }
    }

    fn take_back(&self) {
        // SAFETY: getpgrp cannot fail.
        self.give_to(unsafe { libc::getpgrp() });
    }
}

/// The signals redmutex forwards to the command. A signal that redmutex inherited as
/// ignored (`nohup`, background jobs of non-interactive shells) is left ignored — the
/// command inherits that too — instead of being caught and forwarded.
struct Forwarded {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    hangup: Option<Signal>,
    quit: Option<Signal>,
}

impl Forwarded {
    fn new() -> io::Result<Forwarded> {
        let watch = |kind: SignalKind| -> io::Result<Option<Signal>> {
            if is_ignored(kind.as_raw_value()) {
                Ok(None)
            } else {
                signal(kind).map(Some)
            }
        };
        Ok(Forwarded {
            interrupt: watch(SignalKind::interrupt())?,
            terminate: watch(SignalKind::terminate())?,
            hangup: watch(SignalKind::hangup())?,
            quit: watch(SignalKind::quit())?,
        })
    }

    /// The next signal received, as its number.
    async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            Some(()) = next(&mut self.interrupt) => libc::SIGINT,
            Some(()) = next(&mut self.terminate) => libc::SIGTERM,
            Some(()) = next(&mut self.hangup) => libc::SIGHUP,
            Some(()) = next(&mut self.quit) => libc::SIGQUIT,
            // Only if the signal driver shut down: then there is nothing to forward.
            else => std::future::pending().await,
        }
    }
}

async fn next(signal: &mut Option<Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

/// Whether `sig` is currently ignored by this process.
fn is_ignored(sig: libc::c_int) -> bool {
    // SAFETY: a query of the current disposition; no new action is installed.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_revoke_reads_names_numbers_and_none() {
        let read = |text: &str| parse_on_revoke(text).map(|on| on.0);
        assert_eq!(read("TERM"), Ok(Some(libc::SIGTERM)));
        assert_eq!(read("sigusr1"), Ok(Some(libc::SIGUSR1)));
        assert_eq!(read("SIGHUP"), Ok(Some(libc::SIGHUP)));
        assert_eq!(read("2"), Ok(Some(libc::SIGINT)));
        assert_eq!(read("none"), Ok(None));
        assert_eq!(read("WINCH"), Ok(Some(libc::SIGWINCH))); // httpd's graceful stop
        assert_eq!(read("34"), Ok(Some(libc::SIGRTMIN())));
        for bad in [
            "",
            "0",
            "65",
            "-1",
            "TERMINATE",
            "SIG",
            "1.5",
            "19",
            "STOP",
            "CONT",
            "20",
            "17",
            "CHLD",
            "23",
            "32",
            "33",
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
        assert_eq!(signal_name(libc::SIGUSR2), "SIGUSR2");
        assert_eq!(signal_name(40), "signal 40");
    }

    #[test]
    fn keys_are_joined_unambiguously() {
        let keys = |list: &[&str]| list.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert_eq!(encode_keys(&keys(&["a", "b"])), "a,b");
        assert_eq!(encode_keys(&keys(&["a,b", "c"])), "a%2Cb,c");
        assert_eq!(encode_keys(&keys(&["a", "b", "c"])), "a,b,c");
        assert_eq!(encode_keys(&keys(&["100%", "x%2Cy"])), "100%25,x%252Cy");
        // Decoding (split on ',', then %2C → ',' and %25 → '%') gives the keys back.
        for list in [
            &["a,b", "c"][..],
            &["a", "b", "c"],
            &["%2C", ",", "%"],
            &["é,ü"],
        ] {
            let decoded: Vec<String> = encode_keys(&keys(list))
                .split(',')
                .map(|k| k.replace("%2C", ",").replace("%25", "%"))
                .collect();
            assert_eq!(decoded, keys(list));
        }
    }

    #[test]
    fn exit_codes_pass_through() {
        assert_eq!(exit_code(&ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(&ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(&ExitStatus::from_raw(libc::SIGTERM)), 128 + 15);
        assert_eq!(exit_code(&ExitStatus::from_raw(libc::SIGKILL)), 128 + 9);
    }
}
