//! What a worker reports about each critical section, as one line of text on its stdout,
//! and the parsing of those lines in the coordinator.

use std::fmt;
use std::str::FromStr;

/// How a holder behaves, which decides what it may believe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A plain lock; before acting, checks `Lock::valid_until` and acts only within it.
    Careful,
    /// A kept-alive lease; before acting, checks it was not told "lost" and is within
    /// `Lock::valid_until`, read through the lease.
    Lease,
    /// A plain lock; acts after its work without looking at the clock, as much code in the
    /// wild does. Only fences protect the resource from it once it overruns its validity.
    Naive,
    /// A fair lock on the same keys (waits in line; not on Redlock, which refuses it), as
    /// careful as [`Holder::Careful`]: fair and plain holders must exclude each other.
    Fair,
    /// One permit of a semaphore of [`PERMITS`] per key (semaphores live beside the
    /// locks, `s0`, `s1`, …; not on Redlock), as careful as [`Holder::Careful`]: at most
    /// [`PERMITS`] such holders at once per semaphore. Its sections write nothing (the
    /// resource takes one writer at a time).
    Permit,
    /// A plain lock acquired with a minimum hold of one TTL (`min_hold`), as careful as
    /// [`Holder::Careful`], that releases early: the key must stay taken until its
    /// validity ends however soon it was released.
    Periodic,
    /// A reader of the read-write lock of the same keys, as careful as
    /// [`Holder::Careful`]: readers may overlap each other, nobody else. Its sections write
    /// nothing (the resource takes one writer at a time), and its fence is the current one
    /// (not its own), so it is left out of the fence rules.
    Reader,
    /// The writer of the read-write lock of the same keys, as careful as
    /// [`Holder::Careful`]: it excludes every other holder of the key.
    Writer,
    /// The leader of the election of the same keys: it campaigns (for at most a TTL), then
    /// holds its leadership's lease as [`Holder::Lease`] does, and writes with its term.
    Leader,
    /// Not a holder: waits for the key to be free without taking it
    /// (`Locker::wait_released`). Its section runs from the call to the answer; "kept"
    /// when the answer was "free" — then the key must have been free at some moment in
    /// between: no held section covers all of it.
    Watcher,
}

impl Holder {
    /// Every kind, in the order of the checker's counts and the report.
    pub const ALL: [Holder; 10] = [
        Holder::Careful,
        Holder::Lease,
        Holder::Naive,
        Holder::Fair,
        Holder::Permit,
        Holder::Periodic,
        Holder::Reader,
        Holder::Writer,
        Holder::Leader,
        Holder::Watcher,
    ];

    /// Its name in section lines and reports.
    pub fn name(self) -> &'static str {
        match self {
            Holder::Careful => "careful",
            Holder::Lease => "lease",
            Holder::Naive => "naive",
            Holder::Fair => "fair",
            Holder::Permit => "permit",
            Holder::Periodic => "periodic",
            Holder::Reader => "reader",
            Holder::Writer => "writer",
            Holder::Leader => "leader",
            Holder::Watcher => "watcher",
        }
    }

    /// Its place in [`Holder::ALL`].
    pub fn index(self) -> usize {
        Holder::ALL.iter().position(|h| *h == self).unwrap_or(0)
    }
}

/// The limit of each semaphore of the run.
pub const PERMITS: u32 = 2;

/// How the holder's section ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The holder still believed it held the lock when it acted.
    Kept,
    /// A careful holder found its validity over (it had been paused or slowed) and did
    /// not act.
    Expired,
    /// A lease holder was told "lost" (or found its validity over) and did not act.
    Lost,
}

/// The holder's fenced write to the guarded resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Accepted; the resource's write sequence number.
    Accepted(u64),
    /// Refused by the fence check; the resource's write sequence number.
    Refused(u64),
    /// Not attempted (the holder knew it had lost the lock).
    Skipped,
    /// The resource could not be reached.
    Failed,
}

/// The holder's guarded write (`write_if_held`): an entry pushed onto a list beside its
/// lock, in the same script call as the check that this holder still holds the lock; with
/// when it was sent ([`crate::clock::now_ns`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarded {
    /// Written: the server found the lock still this holder's.
    Accepted(u64),
    /// `NotHeld`: nothing written.
    Refused(u64),
    /// Not attempted (a shared holder, Redlock, or a lease already dropped).
    Skipped,
    /// Any other error (connection cut, timeout): it may or may not have been written.
    Failed(u64),
}

impl fmt::Display for Guarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Guarded::Accepted(at) => write!(f, "accepted:{at}"),
            Guarded::Refused(at) => write!(f, "refused:{at}"),
            Guarded::Skipped => write!(f, "skipped"),
            Guarded::Failed(at) => write!(f, "failed:{at}"),
        }
    }
}

impl FromStr for Guarded {
    type Err = ();

    fn from_str(text: &str) -> Result<Guarded, ()> {
        let at = |at: &str| at.parse::<u64>().map_err(|_| ());
        match text.split_once(':') {
            Some(("accepted", sent)) => Ok(Guarded::Accepted(at(sent)?)),
            Some(("refused", sent)) => Ok(Guarded::Refused(at(sent)?)),
            Some(("failed", sent)) => Ok(Guarded::Failed(at(sent)?)),
            None if text == "skipped" => Ok(Guarded::Skipped),
            _ => Err(()),
        }
    }
}

/// What the release call answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Released.
    Released,
    /// `NotHeld`: the lock had expired or been taken.
    NotHeld,
    /// Any other error (connection cut, timeout, no quorum).
    Failed,
}

/// One critical section: from the moment the acquire returned a lock to the last moment
/// its holder believed it held the lock. Times are [`crate::clock::now_ns`] values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Worker process index.
    pub worker: u32,
    /// Task index within the worker.
    pub task: u32,
    /// The holder's behaviour.
    pub holder: Holder,
    /// Key index.
    pub key: u32,
    /// The fence the acquisition got.
    pub fence: u64,
    /// When the holder began the acquire call (before any request was sent).
    pub asked: u64,
    /// When the acquire returned the lock.
    pub start: u64,
    /// The last moment the holder believed it held the lock: when it acted (or gave up).
    pub end: u64,
    /// The lock's validity end as the library computed it (latest, for a lease).
    pub valid: u64,
    /// How the section ended.
    pub outcome: Outcome,
    /// The fenced write.
    pub write: Write,
    /// The guarded write, sent once the fenced write was answered.
    pub guarded: Guarded,
    /// The release.
    pub release: Release,
    /// When a kept-alive holder heard that another process asked it to let go (it then
    /// acted and let go at once); `None` when it heard nothing.
    pub heard: Option<u64>,
}

impl Section {
    /// The end of the part of the section the library vouches for: up to its validity,
    /// and no longer than the holder believed.
    pub fn vouched_end(&self) -> u64 {
        self.end.min(self.valid)
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holder = self.holder.name();
        let outcome = match self.outcome {
            Outcome::Kept => "kept",
            Outcome::Expired => "expired",
            Outcome::Lost => "lost",
        };
        let write = match self.write {
            Write::Accepted(seq) => format!("accepted:{seq}"),
            Write::Refused(seq) => format!("refused:{seq}"),
            Write::Skipped => "skipped".into(),
            Write::Failed => "failed".into(),
        };
        let release = match self.release {
            Release::Released => "released",
            Release::NotHeld => "notheld",
            Release::Failed => "failed",
        };
        let heard = self.heard.map_or("-".to_owned(), |at| at.to_string());
        write!(
            f,
            "section {} {} {holder} {} {} {} {} {} {} {outcome} {write} {} {release} {heard}",
            self.worker,
            self.task,
            self.key,
            self.fence,
            self.asked,
            self.start,
            self.end,
            self.valid,
            self.guarded
        )
    }
}

impl FromStr for Section {
    type Err = String;

    fn from_str(line: &str) -> Result<Section, String> {
        let bad = || format!("not a section line: {line:?}");
        let fields: Vec<&str> = line.split(' ').collect();
        let [tag, worker, task, holder, key, fence, asked, start, end, valid, outcome, write, guarded, release, heard] =
            fields[..]
        else {
            return Err(bad());
        };
        if tag != "section" {
            return Err(bad());
        }
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let write = match write.split_once(':') {
            Some(("accepted", seq)) => Write::Accepted(num(seq)?),
            Some(("refused", seq)) => Write::Refused(num(seq)?),
            None if write == "skipped" => Write::Skipped,
            None if write == "failed" => Write::Failed,
            _ => return Err(bad()),
        };
        Ok(Section {
            worker: worker.parse().map_err(|_| bad())?,
            task: task.parse().map_err(|_| bad())?,
            holder: *Holder::ALL
                .iter()
                .find(|h| h.name() == holder)
                .ok_or_else(bad)?,
            key: key.parse().map_err(|_| bad())?,
            fence: num(fence)?,
            asked: num(asked)?,
            start: num(start)?,
            end: num(end)?,
            valid: num(valid)?,
            outcome: match outcome {
                "kept" => Outcome::Kept,
                "expired" => Outcome::Expired,
                "lost" => Outcome::Lost,
                _ => return Err(bad()),
            },
            write,
            guarded: guarded.parse().map_err(|()| bad())?,
            release: match release {
                "released" => Release::Released,
                "notheld" => Release::NotHeld,
                "failed" => Release::Failed,
                _ => return Err(bad()),
            },
            heard: match heard {
                "-" => None,
                at => Some(num(at)?),
            },
        })
    }
}

/// What an operator's request that a key's holder let go (`Locker::request_release`)
/// answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Someone held the key, and was asked.
    Asked = 0,
    /// Nobody (of redmutex's) held it: nobody was asked.
    Nobody,
    /// An error: the request may or may not have been stored, even after the answer (a
    /// frozen server runs it when it wakes).
    Failed,
}

/// One request that whoever holds a key let it go, made by a watcher task before it waits
/// for the key to be free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub worker: u32,
    pub task: u32,
    /// Key index.
    pub key: u32,
    /// When the request was sent, and when its answer came ([`crate::clock::now_ns`]).
    pub sent: u64,
    pub answered: u64,
    pub answer: Answer,
}

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let answer = match self.answer {
            Answer::Asked => "asked",
            Answer::Nobody => "nobody",
            Answer::Failed => "failed",
        };
        write!(
            f,
            "ask {} {} {} {} {} {answer}",
            self.worker, self.task, self.key, self.sent, self.answered
        )
    }
}

impl FromStr for Ask {
    type Err = String;

    fn from_str(line: &str) -> Result<Ask, String> {
        let bad = || format!("not an ask line: {line:?}");
        let fields: Vec<&str> = line.split(' ').collect();
        let ["ask", worker, task, key, sent, answered, answer] = fields[..] else {
            return Err(bad());
        };
        Ok(Ask {
            worker: worker.parse().map_err(|_| bad())?,
            task: task.parse().map_err(|_| bad())?,
            key: key.parse().map_err(|_| bad())?,
            sent: sent.parse().map_err(|_| bad())?,
            answered: answered.parse().map_err(|_| bad())?,
            answer: match answer {
                "asked" => Answer::Asked,
                "nobody" => Answer::Nobody,
                "failed" => Answer::Failed,
                _ => return Err(bad()),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_round_trip_through_their_line() {
        let mut section = Section {
            worker: 2,
            task: 7,
            holder: Holder::Lease,
            key: 3,
            fence: 41,
            asked: 1,
            start: 2,
            end: 30,
            valid: 25,
            outcome: Outcome::Lost,
            write: Write::Skipped,
            guarded: Guarded::Skipped,
            release: Release::NotHeld,
            heard: None,
        };
        for write in [
            Write::Accepted(9),
            Write::Refused(10),
            Write::Skipped,
            Write::Failed,
        ] {
            section.write = write;
            let line = section.to_string();
            assert_eq!(line.parse::<Section>().unwrap(), section, "{line}");
        }
        for guarded in [
            Guarded::Accepted(31),
            Guarded::Refused(32),
            Guarded::Failed(33),
        ] {
            section.guarded = guarded;
            let line = section.to_string();
            assert_eq!(line.parse::<Section>().unwrap(), section, "{line}");
        }
        section.heard = Some(12);
        let line = section.to_string();
        assert_eq!(line.parse::<Section>().unwrap(), section, "{line}");
        assert_eq!(section.vouched_end(), 25);
        for bad in [
            "",
            "section 1 2",
            "stats x",
            &section.to_string().replace("lease", "x"),
            &section.to_string().replace(" failed:33 ", " failed "),
        ] {
            assert!(bad.parse::<Section>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn asks_round_trip_through_their_line() {
        for answer in [Answer::Asked, Answer::Nobody, Answer::Failed] {
            let ask = Ask {
                worker: 1,
                task: 4,
                key: 2,
                sent: 100,
                answered: 130,
                answer,
            };
            let line = ask.to_string();
            assert_eq!(line.parse::<Ask>().unwrap(), ask, "{line}");
        }
        for bad in [
            "",
            "ask 1 4 2 100 130",
            "ask 1 4 2 100 130 maybe",
            "section 1",
        ] {
            assert!(bad.parse::<Ask>().is_err(), "{bad:?}");
        }
    }
}
