//! The independent checker: reads the critical sections every worker recorded and finds
//! what went wrong. It trusts nothing the library says about other holders — only each
//! section's own times, fence and validity, and the guarded resource's answers.
//!
//! The claims a simulated run checks too — exclusion and minimum holds, the semaphore's
//! limit, fence order, "free" answers, requests to let go — are judged by the simulator's
//! own rules (`redmutex_sim::checker::holders`), over this run's sections written in the
//! simulator's form ([`history()`]): one checker for both. What only a run on real servers
//! has — the guarded resource's replay, overrunning holders caught by fences, guarded
//! writes on a real server — is checked here.

use std::collections::BTreeMap;
use std::time::Duration;

use redmutex_sim::checker::{holders, Violation};
use redmutex_sim::history::{self, History};
use redmutex_sim::plan::{Primitive, Style};

use crate::record::{Answer, Ask, Guarded, Holder, Outcome, Release, Section, Write, PERMITS};

/// What the checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Critical sections recorded.
    pub sections: usize,
    /// Sections by holder kind, in the order of [`Holder::ALL`].
    pub by_holder: [usize; 10],
    /// Leases told "lost" (or found past their validity) before their holder acted.
    pub lost: usize,
    /// Careful holders that found their validity over before acting.
    pub expired: usize,
    /// Releases that found the lock already gone (`NotHeld`).
    pub releases_not_held: usize,
    /// Releases that failed otherwise (a faulted node; the lock expires by its TTL).
    pub releases_failed: usize,
    /// Holders that acted (and released) after their validity had ended: paused naive
    /// holders, or any holder paused between its check and its release.
    pub overran: usize,
    /// Pairs where a holder acquired while another's lock was still vouched for (within
    /// its validity, not told lost). Mutual exclusion is broken if this is not zero.
    pub unsafe_overlaps: usize,
    /// Pairs where a holder acquired after another's validity had ended but while that
    /// (paused) holder still believed it held the lock: what fences are for.
    pub overrun_overlaps: usize,
    /// Of those, the pairs whose fences were in order (earlier holder, lower fence).
    pub overrun_fenced: usize,
    /// Of those, the pairs whose overrunning holder's write the resource refused.
    pub overrun_refused: usize,
    /// Moments when more permit holders of one semaphore were vouched for (within their
    /// validity, not told lost) than its limit. Must be zero.
    pub permit_overflows: usize,
    /// Acquisitions of a key after a periodic holder released it and before its validity
    /// ended — within its minimum hold. Must be zero.
    pub min_hold_violations: usize,
    /// Waits for a key to be free that answered "free" while held sections of the key
    /// covered the whole wait. Must be zero.
    pub watch_violations: usize,
    /// Two sections of one key with the same fence, or a section that began acquiring
    /// after another had its lock, yet got a lower fence.
    pub fence_violations: usize,
    /// Writes the resource accepted while a higher fence had been accepted before (or
    /// refused without one): the resource's own fence check misbehaved.
    pub store_violations: usize,
    /// Writes the resource refused because a higher fence had written first.
    pub stale_writes_refused: usize,
    /// Writes accepted.
    pub writes_accepted: usize,
    /// Guarded writes (`write_if_held`, to a list beside the lock) the lock's server
    /// accepted, and refused (`NotHeld`).
    pub guarded_accepted: usize,
    pub guarded_refused: usize,
    /// Of the refused, those of holders whose fenced write the resource had just refused
    /// (a later holder had written first): a late write a plain write would have landed.
    pub guarded_stale_refused: usize,
    /// Guarded writes accepted although the same holder's fenced write, answered before
    /// they were sent, had been refused — a later holder had acquired and written, so
    /// this holder no longer held the lock. Must be zero.
    pub guarded_violations: usize,
    /// Guarded writes accepted although another holder of the key had acquired it after
    /// this one had it, and before the write was sent: the server ran the write while
    /// another owner held the lock. Must be zero (but for a failover that lost writes:
    /// the write then went to the old master, which the failover wiped).
    pub guarded_after_rival: usize,
    /// Requests that a key's holder let go: answered "asked", "nobody", or an error.
    pub asks: [usize; 3],
    /// Kept-alive holders that heard a request to let go (and let go).
    pub heard: usize,
    /// Holders that heard a request nobody made while they held: no request for their key
    /// sent before they heard it whose answer came after they began acquiring (or that
    /// failed, and may have been stored whenever). Must be zero.
    pub ask_violations: usize,
    /// A few of the violations, described.
    pub examples: Vec<String>,
}

impl Verdict {
    /// Whether the run upheld the guarantee: no overlap among holders that were not told
    /// "lost" and acted within their validity, every overlap an overrunning holder caused
    /// caught by fence order, fences unique and ordered, and the resource consistent.
    pub fn upheld(&self) -> bool {
        self.unsafe_overlaps == 0
            && self.guarded_after_rival == 0
            && self.permit_overflows == 0
            && self.min_hold_violations == 0
            && self.watch_violations == 0
            && self.overrun_fenced == self.overrun_overlaps
            && self.fence_violations == 0
            && self.store_violations == 0
            && self.guarded_violations == 0
            && self.ask_violations == 0
    }

    /// What must hold even when a failover lost writes the lockers were told had
    /// succeeded (rivals then get in, and are counted, not failed): fences unique and in
    /// order — none is below the server's clock — every overlap with an overrunning
    /// holder caught by fence order, and the resource consistent.
    pub fn upheld_apart_from_lost_writes(&self) -> bool {
        self.overrun_fenced == self.overrun_overlaps
            && self.fence_violations == 0
            && self.store_violations == 0
            && self.guarded_violations == 0
            && self.ask_violations == 0
    }

    /// Locks, permits, minimum holds and "free" answers that rivals broke: what a failover
    /// that lost writes costs (zero everywhere else, or the run fails).
    pub fn broken_by_rivals(&self) -> usize {
        self.unsafe_overlaps
            + self.guarded_after_rival
            + self.permit_overflows
            + self.min_hold_violations
            + self.watch_violations
    }

    fn example(&mut self, text: String) {
        if self.examples.len() < 8 {
            self.examples.push(text);
        }
    }
}

/// Checks `sections` (any order, any keys) and the requests to let go, `asks`.
pub fn check(sections: &[Section], asks: &[Ask]) -> Verdict {
    let mut verdict = Verdict {
        sections: sections.len(),
        ..Verdict::default()
    };
    let mut by_key: BTreeMap<u32, Vec<&Section>> = BTreeMap::new();
    for s in sections {
        verdict.by_holder[s.holder.index()] += 1;
        match s.outcome {
            Outcome::Lost => verdict.lost += 1,
            Outcome::Expired => verdict.expired += 1,
            Outcome::Kept => {}
        }
        match s.release {
            Release::NotHeld => verdict.releases_not_held += 1,
            Release::Failed => verdict.releases_failed += 1,
            Release::Released => {}
        }
        if s.outcome == Outcome::Kept && s.end > s.valid {
            verdict.overran += 1;
        }
        verdict.heard += usize::from(s.heard.is_some());
        guarded(s, &mut verdict);
        if !matches!(s.holder, Holder::Permit | Holder::Watcher) {
            by_key.entry(s.key).or_default().push(s);
        }
    }
    for ask in asks {
        verdict.asks[ask.answer as usize] += 1;
    }
    for (key, sections) in &by_key {
        let (key, sections) = (*key, sections.as_slice());
        overruns(key, sections, &mut verdict);
        guarded_after_rival(key, sections, &mut verdict);
        // A reader's fence is the latest writer's, not its own, and it writes nothing.
        let fenced: Vec<&Section> = (sections.iter().copied())
            .filter(|s| s.holder != Holder::Reader)
            .collect();
        resource(key, &fenced, &mut verdict);
    }
    for violation in holders(&history(sections, asks), &[]) {
        judged(violation, &mut verdict);
    }
    verdict
}

/// Counts what the simulator's rules found, by rule.
fn judged(violation: Violation, verdict: &mut Verdict) {
    let count = match violation.rule {
        "exclusion" => &mut verdict.unsafe_overlaps,
        "min-hold" => &mut verdict.min_hold_violations,
        "limit" => &mut verdict.permit_overflows,
        "fence" => &mut verdict.fence_violations,
        "watch" => &mut verdict.watch_violations,
        "ask" => &mut verdict.ask_violations,
        // (`renewal` needs a known breach, which a run on real servers does not record.)
        _ => &mut verdict.unsafe_overlaps,
    };
    *count += 1;
    verdict.example(violation.to_string());
}

/// The run in the simulator's form: a section per holder (a permit's name is its
/// semaphore's, `s<key>`; everyone else's `k<key>`), a wait per watcher, a request per
/// ask that may have been stored. Times are the shared clock's, as they are. A holder
/// believes it holds from its start until its `end` — when it acted, or found it had lost
/// (told, for a lease) — and a periodic holder's minimum hold keeps the key until its
/// validity, when its release found it still its own.
pub fn history(sections: &[Section], asks: &[Ask]) -> History {
    let mut names = Names::default();
    let at = Duration::from_nanos;
    let mut run = History::default();
    for s in sections {
        let task = (s.worker as usize) * 1_000 + s.task as usize;
        if s.holder == Holder::Watcher {
            run.watches.push(history::Watch {
                task,
                name: names.of(false, s.key),
                asked: at(s.asked),
                answered: at(s.end),
                free: s.outcome == Outcome::Kept,
            });
            continue;
        }
        let (primitive, style) = kind(s.holder);
        let lost = s.outcome == Outcome::Lost;
        run.sections.push(history::Section {
            task,
            process: s.worker as usize,
            primitive,
            style,
            name: names.of(s.holder == Holder::Permit, s.key),
            fence: Some(s.fence),
            asked: at(s.asked),
            start: at(s.start),
            valid: at(s.valid),
            keep_until: (s.holder == Holder::Periodic).then(|| at(s.valid)),
            last_act: (s.outcome == Outcome::Kept).then(|| at(s.end)),
            overran: s.outcome == Outcome::Kept && s.end > s.valid,
            released: (!lost).then(|| at(s.end)),
            release_held: Some(s.release == Release::Released),
            told_lost: lost.then(|| at(s.end)),
            heard_ask: s.heard.map(at),
            shortened: false,
            renewed_with: None,
        });
    }
    for ask in asks {
        let until = match ask.answer {
            Answer::Asked => at(ask.answered),
            // It may have been stored whenever after it was sent (a frozen server runs it
            // when it wakes).
            Answer::Failed => Duration::MAX,
            Answer::Nobody => continue,
        };
        run.asks.push(history::Ask {
            task: (ask.worker as usize) * 1_000 + ask.task as usize,
            name: names.of(false, ask.key),
            sent: at(ask.sent),
            until,
        });
    }
    run
}

/// What each kind of holder is in the simulator's terms.
fn kind(holder: Holder) -> (Primitive, Style) {
    match holder {
        Holder::Careful | Holder::Watcher => (Primitive::Lock, Style::Careful),
        Holder::Lease => (Primitive::Lock, Style::Lease),
        Holder::Naive => (Primitive::Lock, Style::Naive),
        Holder::Fair => (Primitive::Fair, Style::Careful),
        Holder::Permit => (Primitive::Permit(PERMITS), Style::Careful),
        Holder::Periodic => (Primitive::Lock, Style::Periodic),
        Holder::Reader => (Primitive::Read, Style::Careful),
        Holder::Writer => (Primitive::Write, Style::Careful),
        Holder::Leader => (Primitive::Leader, Style::Lease),
    }
}

/// The names of the run's keys, made once each (the simulator's names live as long as
/// the program; a run has a few).
#[derive(Default)]
struct Names(BTreeMap<(bool, u32), &'static str>);

impl Names {
    fn of(&mut self, semaphore: bool, key: u32) -> &'static str {
        self.0.entry((semaphore, key)).or_insert_with(|| {
            let name = format!("{}{key}", if semaphore { 's' } else { 'k' });
            Box::leak(name.into_boxed_str())
        })
    }
}

fn describe(s: &Section) -> String {
    format!(
        "{:?} w{}t{} fence {} [{:.3}s, {:.3}s] valid to {:.3}s {:?}",
        s.holder,
        s.worker,
        s.task,
        s.fence,
        secs(s.start),
        secs(s.end),
        secs(s.valid),
        s.outcome
    )
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Every pair of sections of one key where the later began after the earlier's validity
/// but while its (overrunning) holder still believed it held the lock: what fences are for.
/// (Those that began within the earlier one's validity the exclusion rule judges.)
fn overruns(key: u32, sections: &[&Section], verdict: &mut Verdict) {
    let mut by_start = sections.to_vec();
    by_start.sort_by_key(|s| (s.start, s.fence));
    // Sections whose belief has not ended by the current start; overlaps are rare, so
    // this stays short.
    let mut open: Vec<&Section> = Vec::new();
    for later in by_start {
        open.retain(|earlier| earlier.end > later.start);
        // Readers share the key, and a reader after a late holder writes nothing: fences
        // are for writes.
        for earlier in open.iter().filter(|_| later.holder != Holder::Reader) {
            // Start times are read after the acquire returns. A holder frozen in between
            // records its start late — after its own validity — and can look like the
            // second of two holders when it acquired first; its lower fence tells.
            let swapped = later.fence < earlier.fence && later.start >= later.valid;
            let (first, second) = if swapped {
                (later, *earlier)
            } else {
                (*earlier, later)
            };
            let overrun = first.outcome == Outcome::Kept
                && second.start >= first.vouched_end()
                && second.start < first.end
                && second.holder != Holder::Reader;
            if !overrun {
                continue;
            }
            verdict.overrun_overlaps += 1;
            if first.fence < second.fence {
                verdict.overrun_fenced += 1;
            } else {
                let text = format!(
                    "key {key}: overrunning {} has a fence not below {}",
                    describe(first),
                    describe(second)
                );
                verdict.example(text);
            }
            if matches!(first.write, Write::Refused(_)) {
                verdict.overrun_refused += 1;
            }
        }
        open.push(later);
    }
}

/// A guarded write lands only while its holder holds the lock: never after the fenced
/// resource refused the same holder's write (see [`Verdict::guarded_violations`]). This
/// holds with lost writes too: a later holder that got in because a failover lost this
/// holder's lock took it on a server where this holder's claim is not.
fn guarded(s: &Section, verdict: &mut Verdict) {
    let stale = matches!(s.write, Write::Refused(_));
    match s.guarded {
        Guarded::Accepted(_) if stale => {
            verdict.guarded_violations += 1;
            let text = format!(
                "key {}: {} wrote under its lock after the resource refused its fence {}",
                s.key,
                describe(s),
                s.fence
            );
            verdict.example(text);
        }
        Guarded::Accepted(_) => verdict.guarded_accepted += 1,
        Guarded::Refused(_) => {
            verdict.guarded_refused += 1;
            verdict.guarded_stale_refused += usize::from(stale);
        }
        Guarded::Skipped | Guarded::Failed(_) => {}
    }
}

/// A guarded write accepted at `sent` by a holder whose lock a later holder had taken by
/// then (one that began acquiring after this holder had the lock, and had it before the
/// write was sent): on the lock's server that later claim came first, and this holder's
/// token cannot come back, so the write must have been refused. Readers do not exclude
/// each other.
fn guarded_after_rival(key: u32, sections: &[&Section], verdict: &mut Verdict) {
    for writer in sections {
        let Guarded::Accepted(sent) = writer.guarded else {
            continue;
        };
        let readers = writer.holder == Holder::Reader;
        let rival = sections.iter().find(|other| {
            let shares =
                std::ptr::eq(**other, *writer) || readers && other.holder == Holder::Reader;
            !shares && other.asked > writer.start && other.start < sent
        });
        if let Some(rival) = rival {
            verdict.guarded_after_rival += 1;
            let text = format!(
                "key {key}: {} wrote under its lock at {:.3}s, after {} had taken it",
                describe(writer),
                secs(sent),
                describe(rival)
            );
            verdict.example(text);
        }
    }
}

/// Replays the resource's writes of one key in the order it saw them: a write is accepted
/// exactly when its fence is at least the highest accepted before it.
fn resource(key: u32, sections: &[&Section], verdict: &mut Verdict) {
    let mut writes: Vec<(u64, bool, &Section)> = sections
        .iter()
        .filter_map(|s| match s.write {
            Write::Accepted(seq) => Some((seq, true, *s)),
            Write::Refused(seq) => Some((seq, false, *s)),
            Write::Skipped | Write::Failed => None,
        })
        .collect();
    writes.sort_by_key(|w| w.0);
    let mut highest = 0;
    for (_, accepted, s) in writes {
        let expected = s.fence >= highest;
        if accepted != expected {
            verdict.store_violations += 1;
            let text = format!(
                "key {key}: the resource {} fence {} with {highest} accepted before",
                if accepted { "accepted" } else { "refused" },
                s.fence
            );
            verdict.example(text);
        }
        if accepted {
            verdict.writes_accepted += 1;
            highest = highest.max(s.fence);
        } else {
            verdict.stale_writes_refused += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sections alone, without requests to let go.
    fn check(sections: &[Section]) -> Verdict {
        super::check(sections, &[])
    }

    /// A kept section of key 0 from `start` to `end` (ms), valid to `valid`, with `fence`,
    /// asked 1 ms before it started; its write accepted as number `fence`.
    fn section(holder: Holder, fence: u64, start: u64, end: u64, valid: u64) -> Section {
        let ms = 1_000_000;
        Section {
            worker: fence as u32,
            task: 0,
            holder,
            key: 0,
            fence,
            asked: start * ms - ms,
            start: start * ms,
            end: end * ms,
            valid: valid * ms,
            outcome: Outcome::Kept,
            write: Write::Accepted(fence),
            guarded: Guarded::Skipped,
            release: Release::Released,
            heard: None,
        }
    }

    #[test]
    fn a_holder_hears_only_a_request_made_while_it_held() {
        let ms = 1_000_000;
        // Began acquiring at 9 ms, held from 10 ms, heard a request at 20 ms.
        let mut lease = section(Holder::Lease, 1, 10, 30, 40);
        lease.heard = Some(20 * ms);
        let ask = |sent: u64, answered: u64, answer: Answer| Ask {
            worker: 9,
            task: 0,
            key: 0,
            sent: sent * ms,
            answered: answered * ms,
            answer,
        };
        let violations = |asks: &[Ask]| {
            let verdict = super::check(&[lease.clone()], asks);
            assert_eq!(verdict.heard, 1);
            verdict.ask_violations
        };
        assert_eq!(violations(&[]), 1, "nobody asked");
        assert_eq!(violations(&[ask(15, 16, Answer::Asked)]), 0);
        assert_eq!(
            violations(&[ask(5, 9, Answer::Asked)]),
            0,
            "answered as it began"
        );
        assert_eq!(
            violations(&[ask(5, 8, Answer::Asked)]),
            1,
            "answered before it asked"
        );
        assert_eq!(
            violations(&[ask(21, 22, Answer::Asked)]),
            1,
            "sent after it heard"
        );
        assert_eq!(
            violations(&[ask(15, 16, Answer::Nobody)]),
            1,
            "stored nothing"
        );
        assert_eq!(
            violations(&[ask(1, 2, Answer::Failed)]),
            0,
            "may have been stored late"
        );
        let mut other = ask(15, 16, Answer::Asked);
        other.key = 1;
        assert_eq!(violations(&[other]), 1, "another key's");
        let verdict = super::check(&[lease.clone()], &[]);
        assert!(!verdict.upheld() && !verdict.upheld_apart_from_lost_writes());
    }

    #[test]
    fn a_wait_answered_free_needs_a_gap_in_the_holders() {
        let watch = |start, end| {
            let mut s = section(Holder::Watcher, 0, start, end, end);
            s.asked = s.start;
            s.write = Write::Skipped;
            s
        };
        // Held 10–50 by readers and 40–90 by more: "free" during 20–80 is a violation.
        let reader = |fence, start, end, valid| {
            let mut s = section(Holder::Reader, fence, start, end, valid);
            s.write = Write::Skipped;
            s
        };
        let held = [reader(1, 10, 50, 60), reader(1, 40, 90, 100)];
        let mut sections = held.to_vec();
        sections.push(watch(20, 80));
        let v = check(&sections);
        assert_eq!((v.watch_violations, v.unsafe_overlaps), (1, 0), "{v:?}");
        // Back to back (one ends at 50 as the next begins): the key may have been free
        // between the release and the next grant.
        let back_to_back = [
            section(Holder::Careful, 1, 10, 50, 60),
            section(Holder::Writer, 2, 50, 90, 100),
            watch(20, 80),
        ];
        assert_eq!(check(&back_to_back).watch_violations, 0);
        // A gap (50–55) in between: fine; so is a wait that ends after the holders.
        let gap = [
            section(Holder::Careful, 1, 10, 50, 60),
            section(Holder::Writer, 2, 55, 90, 100),
            watch(20, 80),
            watch(60, 120),
        ];
        let v = check(&gap);
        assert!(v.upheld() && v.watch_violations == 0, "{v:?}");
        // A wait that timed out says nothing.
        let mut timed_out = watch(20, 80);
        timed_out.outcome = Outcome::Expired;
        let mut sections = held.to_vec();
        sections.push(timed_out);
        assert_eq!(check(&sections).watch_violations, 0);
    }

    #[test]
    fn readers_may_overlap_each_other_but_nobody_else() {
        let reader = |fence, start, end, valid| {
            let mut s = section(Holder::Reader, fence, start, end, valid);
            s.write = Write::Skipped;
            s
        };
        // Readers together, all seeing fence 1 (the writer's before them): clean, and
        // their shared fence is no fence violation.
        let shared = [
            section(Holder::Writer, 1, 10, 20, 30),
            reader(1, 30, 80, 90),
            reader(1, 40, 70, 90),
            reader(1, 50, 60, 90),
            section(Holder::Writer, 2, 90, 100, 110),
        ];
        let v = check(&shared);
        assert!(v.upheld(), "{v:?}");
        assert_eq!(v.by_holder, [0, 0, 0, 0, 0, 0, 3, 2, 0, 0]);
        // A writer, or any other holder, in among readers: an overlap, either way round.
        for holder in [Holder::Writer, Holder::Careful, Holder::Fair] {
            let among = [reader(1, 30, 80, 90), section(holder, 2, 50, 60, 70)];
            assert_eq!(check(&among).unsafe_overlaps, 1, "{holder:?}");
            let before = [section(holder, 2, 30, 80, 90), reader(2, 50, 60, 70)];
            assert_eq!(check(&before).unsafe_overlaps, 1, "{holder:?}");
        }
        // A reader after a late (overrunning) holder reads; it is no fence matter.
        let late = [section(Holder::Naive, 1, 10, 50, 30), reader(1, 40, 45, 90)];
        let v = check(&late);
        assert!(v.upheld() && v.overrun_overlaps == 0, "{v:?}");
    }

    #[test]
    fn back_to_back_sections_are_clean() {
        let sections = [
            section(Holder::Careful, 1, 10, 50, 60),
            section(Holder::Lease, 2, 60, 300, 310),
            section(Holder::Naive, 3, 300, 320, 400),
        ];
        let v = check(&sections);
        assert!(v.upheld(), "{v:?}");
        assert_eq!(v.sections, 3);
        assert_eq!(v.by_holder, [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            (v.unsafe_overlaps, v.overrun_overlaps, v.overran),
            (0, 0, 0)
        );
        assert_eq!((v.writes_accepted, v.stale_writes_refused), (3, 0));
    }

    #[test]
    fn an_acquisition_within_anothers_validity_is_unsafe() {
        // Fence 2 starts at 40 while fence 1 holds until 50 (valid to 60).
        let sections = [
            section(Holder::Careful, 1, 10, 50, 60),
            section(Holder::Careful, 2, 40, 70, 100),
        ];
        let v = check(&sections);
        assert_eq!(v.unsafe_overlaps, 1);
        assert!(!v.upheld());
        assert!(v.examples[0].contains("exclusion"), "{:?}", v.examples);
        // Same on another key: no overlap.
        let mut other = sections.clone();
        other[1].key = 1;
        assert!(check(&other).upheld());
    }

    #[test]
    fn a_lease_told_lost_late_is_unsafe_and_one_told_in_time_is_not() {
        let mut lost = section(Holder::Lease, 1, 10, 80, 90);
        lost.outcome = Outcome::Lost;
        lost.write = Write::Skipped;
        // The rival acquired at 50: the lease was told only at 80.
        let rival = section(Holder::Careful, 2, 50, 70, 100);
        assert_eq!(check(&[lost.clone(), rival.clone()]).unsafe_overlaps, 1);
        // Told at 45, before the rival acquired: no overlap.
        lost.end = 45_000_000;
        let v = check(&[lost, rival]);
        assert!(v.upheld(), "{v:?}");
        assert_eq!((v.lost, v.expired), (1, 0));
    }

    #[test]
    fn an_overrun_caught_by_fences_upholds_the_guarantee() {
        // A naive holder valid to 60 acts at 200; fence 2 acquired at 100 and wrote first,
        // so the stale write (sequence 5) is refused.
        let mut naive = section(Holder::Naive, 1, 10, 200, 60);
        naive.write = Write::Refused(5);
        let next = section(Holder::Careful, 2, 100, 150, 160);
        let v = check(&[naive, next]);
        assert!(v.upheld(), "{v:?}");
        assert_eq!(v.overran, 1);
        assert_eq!((v.unsafe_overlaps, v.overrun_overlaps), (0, 1));
        assert_eq!((v.overrun_fenced, v.overrun_refused), (1, 1));
        assert_eq!((v.writes_accepted, v.stale_writes_refused), (1, 1));
    }

    #[test]
    fn an_overrun_with_fences_out_of_order_is_a_violation() {
        let naive = section(Holder::Naive, 5, 10, 200, 60);
        let mut next = section(Holder::Careful, 4, 100, 150, 160);
        next.write = Write::Accepted(1);
        let v = check(&[naive, next]);
        assert_eq!(v.overrun_overlaps, 1);
        assert_eq!(v.overrun_fenced, 0);
        assert!(v.fence_violations >= 1, "{v:?}");
        assert!(!v.upheld());
    }

    #[test]
    fn a_periodic_holder_keeps_its_key_until_its_validity_after_an_early_release() {
        // Released at 30, valid to 100: the next holder may start at 100, not before.
        let periodic = section(Holder::Periodic, 1, 10, 30, 100);
        let after = section(Holder::Careful, 2, 100, 120, 200);
        assert!(check(&[periodic.clone(), after]).upheld());
        let early = section(Holder::Careful, 2, 60, 80, 160);
        let v = check(&[periodic.clone(), early.clone()]);
        assert_eq!(v.min_hold_violations, 1, "{v:?}");
        assert!(!v.upheld());
        // One whose validity had ended when it started (a frozen process records its
        // start late) held nothing within the hold.
        let mut stale = section(Holder::Writer, 0, 60, 80, 50);
        stale.outcome = Outcome::Expired;
        assert_eq!(check(&[periodic.clone(), stale]).min_hold_violations, 0);
        // A holder whose lock was gone by its release keeps nothing.
        let mut lost = periodic;
        lost.release = Release::NotHeld;
        assert_eq!(check(&[lost, early]).min_hold_violations, 0);
    }

    #[test]
    fn permits_up_to_the_limit_are_clean_and_one_more_is_an_overflow() {
        let permit = |fence, start, end, valid| {
            let mut s = section(Holder::Permit, fence, start, end, valid);
            s.write = Write::Skipped;
            s
        };
        // Two at once (the limit), a third as the first ends: clean.
        let clean = check(&[
            permit(1, 10, 50, 60),
            permit(2, 20, 80, 90),
            permit(3, 50, 70, 100),
        ]);
        assert!(clean.upheld(), "{clean:?}");
        assert_eq!(clean.unsafe_overlaps, 0, "permits may overlap each other");
        // A third while two are vouched for: an overflow.
        let mut third = permit(3, 40, 70, 100);
        third.asked = 39;
        let over = check(&[permit(1, 10, 50, 60), permit(2, 20, 80, 90), third]);
        assert_eq!(over.permit_overflows, 1, "{over:?}");
        assert!(!over.upheld());
        // One told "lost" before the third came is not vouched for.
        let mut lost = permit(1, 10, 30, 60);
        lost.outcome = Outcome::Lost;
        let fine = check(&[lost, permit(2, 20, 80, 90), permit(3, 40, 70, 100)]);
        assert_eq!(fine.permit_overflows, 0, "{fine:?}");
    }

    #[test]
    fn a_holder_frozen_before_recording_its_start_is_not_taken_for_the_second() {
        // Fence 1 got its lock at about 10 ms (valid to 60) but was frozen before reading
        // the clock: it records 100. Fence 2 acquired at 70, after fence 1's validity.
        let mut frozen = section(Holder::Careful, 1, 100, 110, 60);
        frozen.asked = 9_000_000;
        frozen.outcome = Outcome::Expired;
        frozen.write = Write::Skipped;
        let next = section(Holder::Careful, 2, 70, 120, 170);
        let v = check(&[frozen.clone(), next.clone()]);
        assert_eq!(v.unsafe_overlaps, 0, "{v:?}");
        // Had fence 2 acquired at 50, within fence 1's validity, it is a violation still.
        let mut early = next;
        early.asked = 49_000_000;
        early.start = 50_000_000;
        assert_eq!(check(&[frozen, early]).unsafe_overlaps, 1);
    }

    #[test]
    fn duplicate_and_backward_fences_are_violations() {
        let dup = [
            section(Holder::Careful, 3, 10, 20, 30),
            section(Holder::Careful, 3, 40, 50, 60),
        ];
        let v = check(&dup);
        assert_eq!(v.fence_violations, 1);
        assert!(v.examples[0].contains("fence 3 of"), "{:?}", v.examples);
        // Fence 7 was in hand at 10; fence 6 began acquiring at 39.
        let backward = [
            section(Holder::Careful, 7, 10, 20, 30),
            section(Holder::Careful, 6, 40, 50, 60),
        ];
        let v = check(&backward);
        assert_eq!(v.fence_violations, 1, "{v:?}");
        assert!(v.examples[0].contains("fence 7 of"), "{:?}", v.examples);
        // Concurrent askers may get fences in either order: fence 9 asked at 9 ms and
        // started at 30; fence 8 asked at 19 and started at 20 — no proof of order.
        let mut a = section(Holder::Careful, 9, 30, 40, 50);
        a.asked = 9_000_000;
        let b = section(Holder::Careful, 8, 20, 25, 50);
        let v = check(&[a, b]);
        assert_eq!(v.fence_violations, 0, "{v:?}");
    }

    #[test]
    fn the_resource_replay_catches_a_store_that_ignores_fences() {
        let mut first = section(Holder::Careful, 2, 10, 20, 30);
        first.write = Write::Accepted(1);
        let mut stale = section(Holder::Naive, 1, 1, 40, 5);
        stale.asked = 0;
        stale.write = Write::Accepted(2);
        let v = check(&[first.clone(), stale.clone()]);
        assert_eq!(v.store_violations, 1, "{v:?}");
        stale.write = Write::Refused(2);
        stale.guarded = Guarded::Refused(41 * 1_000_000);
        assert_eq!(check(&[first, stale]).store_violations, 0);
    }

    #[test]
    fn a_guarded_write_after_a_refused_fence_is_a_violation() {
        let mut first = section(Holder::Careful, 2, 10, 20, 30);
        first.guarded = Guarded::Accepted(19 * 1_000_000);
        let mut stale = section(Holder::Naive, 1, 1, 40, 5);
        stale.asked = 0;
        stale.write = Write::Refused(2);
        stale.guarded = Guarded::Refused(41 * 1_000_000);
        let v = check(&[first.clone(), stale.clone()]);
        assert_eq!(
            (
                v.guarded_accepted,
                v.guarded_refused,
                v.guarded_stale_refused
            ),
            (1, 1, 1)
        );
        assert!(v.upheld(), "{v:?}");
        stale.guarded = Guarded::Accepted(41 * 1_000_000);
        let v = check(&[first, stale]);
        assert_eq!(v.guarded_violations, 1, "{v:?}");
        assert!(!v.upheld() && !v.upheld_apart_from_lost_writes());
    }

    #[test]
    fn a_guarded_write_sent_after_a_later_holder_took_the_lock_is_a_violation() {
        let ms = 1_000_000;
        // A frozen holder (lock at 10, valid to 30) sends its write at 50; the next holder
        // began acquiring at 35 and had the lock at 36.
        let mut late = section(Holder::Naive, 1, 10, 60, 30);
        let next = section(Holder::Careful, 2, 36, 45, 80);
        late.guarded = Guarded::Refused(50 * ms);
        assert!(check(&[late.clone(), next.clone()]).upheld());
        late.guarded = Guarded::Accepted(50 * ms);
        let v = check(&[late.clone(), next.clone()]);
        assert_eq!(v.guarded_after_rival, 1, "{v:?}");
        assert!(!v.upheld() && v.upheld_apart_from_lost_writes());
        // Sent before the next holder had the lock: fine.
        late.guarded = Guarded::Accepted(20 * ms);
        assert_eq!(check(&[late.clone(), next.clone()]).guarded_after_rival, 0);
        // Two readers share the lock.
        let (mut a, mut b) = (late, next);
        a.holder = Holder::Reader;
        b.holder = Holder::Reader;
        a.guarded = Guarded::Accepted(50 * ms);
        assert_eq!(check(&[a, b]).guarded_after_rival, 0);
    }
}
