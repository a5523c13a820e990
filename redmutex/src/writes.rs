//! Guarded writes: commands a holder runs in Redis only while it holds its claim, the check
//! and the commands in one script call (see [`Lock::write_if_held`](crate::Lock::write_if_held)).

use crate::args::MAX_KEY_LEN;
use crate::error::{Argument, Error};

/// Commands to run in Redis only while a lock is held: the holder's ownership is checked
/// and the commands run in one script call, atomically, so that nothing is written once the
/// lock is gone — expired while its holder was paused, or taken over by another owner.
///
/// Each command names the keys it touches, as a script must declare them (a cluster routes
/// the call by them, and a server may refuse undeclared keys); they are the keys as they
/// are in Redis (the locker's prefix is not added). Built with redis-rs's own
/// [`redis::cmd`]; see [`Lock::write_if_held`](crate::Lock::write_if_held) for what
/// comes back.
///
/// ```
/// let mut writes = redmutex::Writes::new();
/// writes
///     .add(redis::cmd("HSET").arg("job:7").arg("state").arg("done"), ["job:7"])
///     .add(redis::cmd("INCR").arg("jobs:done"), ["jobs:done"]);
/// assert_eq!(writes.len(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Writes {
    /// The keys the commands touch, each once, in the order first named.
    keys: Vec<Vec<u8>>,
    /// The script's arguments for the commands: per command, its number of words, then
    /// the words.
    args: Vec<Vec<u8>>,
    commands: usize,
    /// What made a command unusable, reported before any request.
    invalid: Option<String>,
}

impl Writes {
    /// No commands yet.
    ///
    /// ```
    /// assert!(redmutex::Writes::new().is_empty());
    /// ```
    pub fn new() -> Writes {
        Writes::default()
    }

    /// Adds `command` (its name and arguments), which touches `keys`. Commands run in the
    /// order added. A command built with a cursor argument, or without a name, and a key
    /// that is empty, longer than [`MAX_KEY_LEN`] or named like the state a lock keeps
    /// beside its key (`{…}:fence`, `{…}:line`, `{…}:permits`, …), make the call refuse
    /// the writes ([`Error::InvalidArgument`]) before anything is sent; so does, when
    /// they are run, a key of the lock itself.
    ///
    /// ```
    /// let mut writes = redmutex::Writes::new();
    /// // Moves a job from one set to another: both keys declared.
    /// writes.add(
    ///     redis::cmd("SMOVE").arg("jobs:queued").arg("jobs:running").arg("job-7"),
    ///     ["jobs:queued", "jobs:running"],
    /// );
    /// assert_eq!(writes.len(), 1);
    /// ```
    pub fn add<K: AsRef<[u8]>>(
        &mut self,
        command: &redis::Cmd,
        keys: impl IntoIterator<Item = K>,
    ) -> &mut Writes {
        let mut words = Vec::new();
        for arg in command.args_iter() {
            match arg {
                redis::Arg::Simple(word) => words.push(word.to_vec()),
                _ => self.refuse("a cursor argument is not a write's"),
            }
        }
        if words.is_empty() {
            self.refuse("a command without a name");
        }
        for key in keys {
            let key = key.as_ref();
            if key.is_empty() || key.len() > MAX_KEY_LEN {
                self.refuse(&format!("a key of {} bytes (1..={MAX_KEY_LEN})", key.len()));
            } else if let Some(kind) = crate::fence::reserved_as(key) {
                let key = String::from_utf8_lossy(key);
                self.refuse(&format!(
                    "{key:?} is named like a lock's {kind:?} key, which only redmutex writes"
                ));
            } else if !self.keys.iter().any(|known| known == key) {
                self.keys.push(key.to_vec());
            }
        }
        self.args.push(words.len().to_string().into_bytes());
        self.args.extend(words);
        self.commands += 1;
        self
    }

    /// How many commands there are.
    ///
    /// ```
    /// let mut writes = redmutex::Writes::new();
    /// writes.add(redis::cmd("DEL").arg("a").arg("b"), ["a", "b"]);
    /// assert_eq!(writes.len(), 1); // one command, two keys
    /// ```
    pub fn len(&self) -> usize {
        self.commands
    }

    /// Whether there are none (such writes are refused before anything is sent).
    ///
    /// ```
    /// let mut writes = redmutex::Writes::new();
    /// assert!(writes.is_empty());
    /// writes.add(redis::cmd("INCR").arg("runs"), ["runs"]);
    /// assert!(!writes.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.commands == 0
    }

    /// The keys the commands touch, each once, in the order first named.
    ///
    /// ```
    /// let mut writes = redmutex::Writes::new();
    /// writes
    ///     .add(redis::cmd("SET").arg("a").arg(1), ["a"])
    ///     .add(redis::cmd("RENAME").arg("a").arg("b"), ["a", "b"]);
    /// assert_eq!(writes.keys().collect::<Vec<_>>(), [&b"a"[..], b"b"]);
    /// ```
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.keys.iter().map(|key| &key[..])
    }

    /// The script's arguments for the commands (see `run_guarded` in `helpers.lua`).
    pub(crate) fn args(&self) -> &[Vec<u8>] {
        &self.args
    }

    /// Refuses writes that cannot be sent: none at all, or a command [`add`](Writes::add)
    /// could not take.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if let Some(reason) = &self.invalid {
            return Err(Error::invalid(Argument::Writes, reason.clone()));
        }
        if self.is_empty() {
            return Err(Error::invalid(Argument::Writes, "no command to run"));
        }
        Ok(())
    }

    fn refuse(&mut self, reason: &str) {
        self.invalid.get_or_insert_with(|| reason.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_become_counted_words_and_keys_are_named_once() {
        let mut writes = Writes::new();
        writes
            .add(redis::cmd("SET").arg("a").arg(7), ["a"])
            .add(redis::cmd("RENAME").arg("a").arg("b"), ["a", "b"]);
        assert!(writes.check().is_ok());
        assert_eq!(writes.len(), 2);
        let keys: Vec<&[u8]> = writes.keys().collect();
        assert_eq!(keys, [&b"a"[..], b"b"]);
        let args: Vec<&[u8]> = writes.args().iter().map(|a| &a[..]).collect();
        assert_eq!(
            args,
            [&b"3"[..], b"SET", b"a", b"7", b"3", b"RENAME", b"a", b"b"]
        );
    }

    #[test]
    fn what_cannot_be_sent_is_refused_before_anything_is() {
        let refused = |writes: &Writes| {
            let error = writes.check().unwrap_err();
            assert!(error.is_invalid_argument(), "{error}");
            error.to_string()
        };
        assert!(refused(&Writes::new()).contains("no command"));
        let mut cursor = Writes::new();
        cursor.add(redis::cmd("SCAN").cursor_arg(0), ["k"]);
        assert!(refused(&cursor).contains("cursor"));
        let mut unnamed = Writes::new();
        unnamed.add(&redis::Cmd::new(), ["k"]);
        assert!(refused(&unnamed).contains("without a name"));
        let mut empty_key = Writes::new();
        empty_key.add(redis::cmd("SET").arg("").arg(1), [""]);
        assert!(refused(&empty_key).contains("0 bytes"));
        for companion in ["{job}:fence", "{job}:line", "{job}:permits", "{job}:line:x"] {
            let mut state = Writes::new();
            state.add(redis::cmd("DEL").arg(companion), [companion]);
            assert!(
                refused(&state).contains("only redmutex writes"),
                "{companion}"
            );
        }
        // A key that shares the lock key's hash tag is the caller's own.
        let mut beside = Writes::new();
        beside.add(redis::cmd("SET").arg("{job}:state").arg(1), ["{job}:state"]);
        assert!(beside.check().is_ok());
    }
}
