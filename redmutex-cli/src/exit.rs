//! Exit codes (sysexits.h) and the mapping from library errors to them.

use std::io::Write;
use std::process::ExitCode;

/// The command-line usage or an argument was wrong (EX_USAGE).
pub const USAGE: u8 = 64;
/// Redis could not be reached, or refused us (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran (EX_SOFTWARE).
pub const LOST: u8 = 70;
/// Output could not be written: `acquire` could not hand over the token (the lock was
/// released), or stdout is closed or broken (EX_IOERR).
pub const IO_ERROR: u8 = 74;
/// The lock was not obtained (EX_TEMPFAIL); `exec -E` chooses another code.
pub const NOT_OBTAINED: u8 = 75;
/// `release` / `refresh`: the lock is not held by that token.
pub const NOT_HELD: u8 = 1;

/// A reason to stop, with the exit code and a one-line message for stderr.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    /// Sorts a library error: not obtained, not held, bad argument, Redis trouble.
    pub fn from_lock_error(e: &redmutex::Error, urls: &[String]) -> Failure {
        let message = crate::redact::name_nodes(&e.to_string(), urls);
        match e {
            redmutex::Error::NotObtained(_) => Failure::new(NOT_OBTAINED, message),
            redmutex::Error::NotHeld => Failure::new(NOT_HELD, message),
            redmutex::Error::InvalidArgument(_) => Failure::usage(message),
            redmutex::Error::Redis(r) if r.kind() == redis::ErrorKind::InvalidClientConfig => {
                Failure::usage(message)
            }
            _ => Failure::new(UNAVAILABLE, message),
        }
    }

    pub fn report(&self) -> ExitCode {
        if !self.message.is_empty() {
            // A closed or broken stderr must not turn into a panic.
            let _ = writeln!(std::io::stderr(), "redmutex: {}", self.message);
        }
        ExitCode::from(self.code)
    }
}
