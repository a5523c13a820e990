//! The checker: every claim of docs/SAFETY.md that a run can test, as a rule over the
//! recorded history alone — a simulated run's, and (the rules over holders' own times,
//! [`holders`]) the torture run's on real servers. It trusts nothing the library says about other holders —
//! only each holder's own times, validity and fence, the watchers' answers, and the
//! samples of what the servers held.
//!
//! | rule | claim (docs/SAFETY.md) |
//! |---|---|
//! | `exclusion` | 1, 8, 10, 11: no two holders of a name within their validity (readers share), plain, fair, read-write and leaders mixed |
//! | `min-hold` | 7: a minimum hold keeps the key however early it was released (part of `exclusion`: a kept section ends no sooner) |
//! | `limit` | 6: a semaphore's holders within their validity never exceed its limit |
//! | `fence` | 4, 6, 11: fences (terms) of holders that asked after another held are greater; no two alike |
//! | `watch` | `wait_released` never answers "free" while holders (one, or several overlapping) held the key throughout the wait |
//! | `observe` | 11: an election's observer sees a leader vouched for throughout its read with that leader's own term, leaders' terms never going back, and never "nobody leads" while one leader was vouched for from its asking to the answer |
//! | `fair-order` | 8: a fair lock's waiter in line is not passed by one that asked after it was in line, unless it left the line first |
//! | `lost-late` | 3: a kept-alive lease is told "lost" before its validity ends |
//! | `ttl`, `left-behind` | 5: every key has a TTL; nothing but fence counters outlives its holders |
//! | `quorum` | Networks: on Redlock, a try fails for want of a node only if something hindered that node (frozen, down, restarting, its link slowed or cut, the process paused): a quorum of healthy nodes is enough |
//! | `guarded` | 12: a holder's guarded write that ran finds its own mark once it wrote one (no other holder's write landed between two of its own), and a late holder's lands only while it still holds |
//! | `ask` | 14: a holder hears a request to let go only if one was made for its name while it held (a request names the holders of its moment, never a later one) |
//! | `renewal` | 1, 2, 13: a kept-alive holder's renewal sent after a forced release took its claim, or after a breach while a rival held, gives it no validity (it finds itself gone) |
//! | `forced-told` | 13: once faults stop, a kept-alive holder with wake-up whose claim a forced release took is told "lost" within [`SERVED_WITHIN`] of the release's answer |
//! | `hand-off` | 9: once faults stop, a release that finds a waiter with wake-up in line is followed within [`HANDED_WITHIN`] by a holder of the name |
//! | `liveness` | 8, 9, principle 12: once faults stop, a waiter with wake-up is served within [`SERVED_WITHIN`] of its name being free |
//!
//! A holder is vouched for only while the conditions hold: a breach (a server restarted
//! empty, a key evicted, a failover to a replica that may have missed writes nobody
//! waited for it to confirm — data lost — or a forced release) between its acquire and a
//! rival's exempts the pair. [`lost_to_failover`] counts what the failovers cost.

use std::fmt;
use std::time::Duration;

use crate::history::{Attempt, GuardedWrite, History, Observation, Section};
use crate::plan::{Fault, Plan, Primitive, Strike, Style, Topology};

/// How soon a waiter with wake-up must get a name that became free, once the run is
/// quiet: a hand-off (50 ms), a few round trips, and room to spare.
pub const SERVED_WITHIN: Duration = Duration::from_millis(300);

/// How far apart what freed a name and the first sample that saw it free may be: two of
/// the monitor's samples (20 ms apart), and the millisecond a key lives on by.
const SAMPLE_WINDOW: Duration = Duration::from_millis(45);

/// How long the samples must see a hand-off for it to have lapsed: it lasts 50 ms, the
/// samples are 20 ms apart, and a locker told of it takes it within a round trip.
const HANDOFF_LAPSED: Duration = Duration::from_millis(40);

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule broken (see the module docs' table).
    pub rule: &'static str,
    /// When, since the run began.
    pub at: Duration,
    /// What happened, with the sections or waits involved.
    pub text: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>11.6}] {}: {}",
            self.at.as_secs_f64(),
            self.rule,
            self.text
        )
    }
}

/// What the failovers of a run without replica confirmation cost: the violations of the
/// safety rules (a lock, a permit or a minimum hold lost to a rival, a fence out of
/// order, "free" answered while held) that the check excuses only because a master failed
/// over to a replica that had not received the last writes.
pub fn lost_to_failover(plan: &Plan, history: &History) -> Vec<Violation> {
    if !history.breaches.iter().any(|b| b.failover) {
        return Vec::new();
    }
    let excused = check(plan, history);
    let mut without = history.clone();
    without.breaches.retain(|b| !b.failover);
    let safety = ["exclusion", "min-hold", "limit", "fence", "watch"];
    (check(plan, &without).into_iter())
        .filter(|v| safety.contains(&v.rule) && !excused.contains(v))
        .collect()
}

/// Every rule over `history`.
pub fn check(plan: &Plan, history: &History) -> Vec<Violation> {
    let mut found: Vec<Violation> = (history.found.iter())
        // A key evicted beside a lock (its details, its line) leaves data the scripts
        // rightly refuse as another kind's: a breach of the conditions, not a bug.
        .filter(|(at, rule, _)| {
            *rule != "invalid-argument" || !history.breaches.iter().any(|b| b.at <= *at)
        })
        .map(|(at, rule, text)| Violation {
            rule,
            at: *at,
            text: text.clone(),
        })
        .collect();
    found.extend(holders(history, &plan.faults));
    forced_renewals(plan, history, &mut found);
    forced_told(plan, history, &mut found);
    fair_order(plan, history, &mut found);
    observations(history, &mut found);
    healthy_nodes_answer(plan, history, &mut found);
    guarded(history, &mut found);
    liveness(plan, history, &mut found);
    hand_offs(plan, history, &mut found);
    hand_offs_taken(plan, history, &mut found);
    found.sort_by_key(|v| v.at);
    // A run whose clients spun without time passing was stopped there: what came after
    // (every request refused) says nothing more.
    if let Some(stopped) = found.iter().find(|v| v.rule == "livelock").map(|v| v.at) {
        found.retain(|v| v.at <= stopped);
    }
    found
}

/// The rules that judge holders by their own times alone — `exclusion` and `min-hold`,
/// `limit`, `fence`, `watch`, `ask` (and `renewal` where a breach exempts a pair) — which
/// a run on real servers records too: the torture run's history is judged by these, the
/// same functions as a simulated run's. `faults`: the run's, for what a failover may have
/// brought back (none on real servers, whose breaches are not known).
pub fn holders(history: &History, faults: &[Strike]) -> Vec<Violation> {
    let mut found = Vec::new();
    exclusion(faults, history, &mut found);
    limit(history, &mut found);
    fences(history, &mut found);
    watches(history, &mut found);
    asks(history, &mut found);
    found
}

fn describe(s: &Section) -> String {
    format!(
        "t{} (p{}) {} {} {:?}: asked {:?}, held from {:?}, valid to {:?}, released {:?}{}",
        s.task,
        s.process,
        s.primitive.name(),
        s.style.name(),
        s.name,
        s.asked,
        s.start,
        s.valid,
        s.released,
        match s.keep_until {
            Some(keep) => format!(", kept to {keep:?}"),
            None => String::new(),
        }
    )
}

/// Guarded writes (claim 12): once a holder's guarded write ran, every later one of the
/// same section that ran must find the holder's own mark — another holder's write landed
/// between them otherwise, through a lock that was not its own any more — unless data was
/// lost meanwhile (a breach: a restart, an eviction, a failover). A forced release is no
/// excuse: the check is the server's, at the moment of the write.
fn guarded(history: &History, found: &mut Vec<Violation>) {
    let mut first_landed: Vec<Option<&GuardedWrite>> = vec![None; history.sections.len()];
    let mut writes: Vec<&GuardedWrite> = history.guarded.iter().filter(|w| w.landed).collect();
    writes.sort_by_key(|w| w.sent);
    for write in writes {
        let Some(first) = first_landed[write.section] else {
            first_landed[write.section] = Some(write);
            continue;
        };
        let lost_data = || {
            (history.breaches.iter()).any(|b| {
                !b.what.contains("forcing a release")
                    && b.until >= first.sent
                    && b.at <= write.answered
                    && b.name.as_deref().is_none_or(|n| n.contains(write.name))
            })
        };
        if write.found != Some(write.section) && !lost_data() {
            found.push(Violation {
                rule: "guarded",
                at: write.answered,
                text: format!(
                    "a guarded write of {} found {:?} where its own mark s{} was: another \
                     holder wrote between two of its writes ({})",
                    write.name,
                    write.found.map(|s| describe(&history.sections[s])),
                    write.section,
                    describe(&history.sections[write.section]),
                ),
            });
        }
    }
}

/// Requests to let go (claim 14): a holder that heard one must have been asked — a request
/// for its name, stored (between its sending and its answer) no earlier than the holder's
/// acquire was called, and sent no later than the holder heard it. A request made for an
/// earlier holder never reaches a later one. (A lock of two names hears a request for
/// either: its sections, one per name, share their task and start.)
fn asks(history: &History, found: &mut Vec<Violation>) {
    for section in &history.sections {
        let Some(heard) = section.heard_ask else {
            continue;
        };
        let held = |name: &str| {
            (history.sections.iter())
                .any(|s| s.task == section.task && s.start == section.start && s.name == name)
        };
        let asked = (history.asks.iter())
            .any(|ask| held(ask.name) && ask.sent <= heard && ask.until >= section.asked);
        if !asked {
            found.push(Violation {
                rule: "ask",
                at: heard,
                text: format!(
                    "heard a request to let go that nobody made while it held: {}",
                    describe(section)
                ),
            });
        }
    }
}

/// Whether a breach of the conditions touched `name` between `from` and `to`.
fn breached(history: &History, name: &str, from: Duration, to: Duration) -> bool {
    (history.breaches.iter()).any(|b| {
        b.until >= from && b.at <= to && b.name.as_deref().is_none_or(|n| n.contains(name))
    })
}

/// Whether two holders of one name may not hold at once.
fn conflict(a: Primitive, b: Primitive) -> bool {
    !matches!(
        (a, b),
        (Primitive::Read, Primitive::Read) | (Primitive::Permit(_), Primitive::Permit(_))
    )
}

fn exclusion(faults: &[Strike], history: &History, found: &mut Vec<Violation>) {
    let sections = &history.sections;
    for (i, a) in sections.iter().enumerate() {
        for b in sections.iter().skip(i + 1) {
            if a.name != b.name || !conflict(a.primitive, b.primitive) {
                continue;
            }
            let (first, second) = in_order(a, b);
            if second.start >= first.protected_end() {
                continue;
            }
            // Each was granted somewhere between its asking and its return (a reply may be
            // slow): a breach anywhere from the first asking to the last return may have
            // come between the two grants — unless the first was vouched for again after
            // it, by a renewal sent while the second held.
            if breached(
                history,
                first.name,
                first.asked.min(second.asked),
                second.start,
            ) {
                renewed_over(faults, first, second, found);
                continue;
            }
            let rule = match first.keep_until.is_some()
                && first.released.is_some_and(|r| r <= second.start)
            {
                true => "min-hold",
                false => "exclusion",
            };
            found.push(Violation {
                rule,
                at: second.start,
                text: format!(
                    "{} got in {:?} before the end of {}",
                    describe(second),
                    first.protected_end() - second.start,
                    describe(first)
                ),
            });
        }
    }
}

/// Two holders of one name, the one granted first first: by when each recorded its
/// start — unless the later one recorded it only after its own validity (its process
/// froze between the grant and the clock read) and its lower fence says it was granted
/// first.
fn in_order<'s>(a: &'s Section, b: &'s Section) -> (&'s Section, &'s Section) {
    let (first, second) = if a.start <= b.start { (a, b) } else { (b, a) };
    let recorded_late = second.start >= second.valid;
    match (first.fence, second.fence) {
        (Some(earlier), Some(later)) if recorded_late && later < earlier => (second, first),
        _ => (first, second),
    }
}

/// The least a renewal of a claim of `ttl` takes off its validity for clock drift (one
/// node's allowance, 1 %; Redlock's is more): a renewal sent at `s` gives a validity of at
/// most `s + ttl - least_drift(ttl)`, so one that gives more was sent after `s`.
fn least_drift(ttl: Duration) -> Duration {
    ttl / 100
}

/// When a kept-alive holder's latest validity was asked for at the earliest: the renewal
/// (or acquire) that gave it was sent no sooner.
fn renewal_sent(s: &Section) -> Option<Duration> {
    let ttl = s.renewed_with?;
    Some(s.valid.saturating_sub(ttl - least_drift(ttl)))
}

/// Renewals (claims 1, 2): a kept-alive `first` whose pair with `second` a breach exempts
/// lost its claim to the breach (its key lost with a node's data, evicted, forced free):
/// that is how `second` got the name. Nothing brings a lost claim back but a failover (to
/// a replica that still had it), so no renewal of `first` sent after `second` took the
/// name may succeed: one that gave it validity renewed a claim that was not its own.
fn renewed_over(faults: &[Strike], first: &Section, second: &Section, found: &mut Vec<Violation>) {
    let Some(sent) = renewal_sent(first) else {
        return;
    };
    let failover = failover_since(faults, second.asked);
    // (Granted before `second` even asked: `second` came in after the breach took it.)
    if sent <= second.start || second.asked <= first.start || failover {
        return;
    }
    found.push(Violation {
        rule: "renewal",
        at: sent,
        text: format!(
            "{} was renewed (sent at {sent:?} or later) after {} took the name from it",
            describe(first),
            describe(second)
        ),
    });
}

/// Whether a master failed over to its replica after `at`: whatever was written since —
/// confirmed by the replica or not (a forced release waits for no replica) — may be lost.
fn failover_since(faults: &[Strike], at: Duration) -> bool {
    (faults.iter()).any(|strike| match strike.fault {
        Fault::Failover { down } => strike.at.saturating_add(down) + STRIKE_LATE >= at,
        _ => false,
    })
}

/// Forced releases (claims 2, 13): a kept-alive holder that held the name when a forced
/// release (which found it held) was called holds it no more — its next renewal finds
/// itself gone and it is told "lost". No renewal sent after the release answered gives it
/// validity. (Unless a failover since may have brought its claim back: a replica that had
/// not received the release.)
fn forced_renewals(plan: &Plan, history: &History, found: &mut Vec<Violation>) {
    for forced in &history.forced {
        if failover_since(&plan.faults, forced.called) {
            continue;
        }
        for s in &history.sections {
            let Some(sent) = renewal_sent(s) else {
                continue;
            };
            if took(forced, s) && sent > forced.answered {
                found.push(Violation {
                    rule: "renewal",
                    at: sent,
                    text: format!(
                        "t{}'s forced release of {:?} (called {:?}, answered {:?}) found it \
                         held, yet {} was renewed after it (sent at {sent:?} or later)",
                        forced.task,
                        forced.name,
                        forced.called,
                        forced.answered,
                        describe(s)
                    ),
                });
            }
        }
    }
}

/// Forced releases (claim 13), once faults stop: a kept-alive holder with wake-up whose
/// claim a forced release took hears it at once — the release announces itself on the
/// holder's ask channel, and the lease renews then and finds itself gone — and is told
/// "lost" (or has let go) within [`SERVED_WITHIN`] of the release's answer, not at its
/// next renewal. (A lease that started within that span of the release may not have
/// been subscribed yet: its next renewal tells it. One whose validity had ended — its
/// process crashed or froze — is not held to it.)
fn forced_told(plan: &Plan, history: &History, found: &mut Vec<Violation>) {
    let settled = plan.settled();
    for forced in history.forced.iter().filter(|f| f.called >= settled) {
        let by = forced.answered + SERVED_WITHIN;
        for s in &history.sections {
            let heard = took(forced, s)
                && plan.processes[s.process].wake_up
                && s.style == Style::Lease
                && s.start + SERVED_WITHIN < forced.called
                && s.valid > forced.called;
            let stopped = |t: Option<Duration>| t.is_some_and(|t| t <= by);
            if heard && by < plan.end() && !stopped(s.told_lost) && !stopped(s.released) {
                found.push(Violation {
                    rule: "forced-told",
                    at: by,
                    text: format!(
                        "t{}'s forced release of {:?} (called {:?}, answered {:?}) took the \
                         claim of {}, which was not told it was lost by {by:?}",
                        forced.task,
                        forced.name,
                        forced.called,
                        forced.answered,
                        describe(s)
                    ),
                });
            }
        }
    }
}

/// Whether `forced` took `s`'s claim: `s` held the name when the forced release was
/// called, and had neither let go nor been told "lost" by then.
fn took(forced: &crate::history::Forced, s: &Section) -> bool {
    s.name == forced.name
        && s.start < forced.called
        && s.released.is_none_or(|r| r > forced.called)
        && s.told_lost.is_none_or(|t| t > forced.called)
}

fn limit(history: &History, found: &mut Vec<Violation>) {
    let permits: Vec<&Section> = (history.sections.iter())
        .filter(|s| matches!(s.primitive, Primitive::Permit(_)))
        .collect();
    for s in &permits {
        let Primitive::Permit(limit) = s.primitive else {
            continue;
        };
        let at = s.start;
        let holding: Vec<&&Section> = (permits.iter())
            .filter(|o| o.name == s.name && o.start <= at && at < o.protected_end())
            .filter(|o| !breached(history, o.name, o.asked, at))
            .collect();
        if holding.len() > limit as usize {
            found.push(Violation {
                rule: "limit",
                at,
                text: format!(
                    "{} holders of a semaphore of {limit} at once: {}",
                    holding.len(),
                    (holding.iter().map(|h| describe(h)))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            });
        }
    }
}

fn fences(history: &History, found: &mut Vec<Violation>) {
    let fenced: Vec<&Section> = (history.sections.iter())
        .filter(|s| s.fence.is_some() && s.primitive != Primitive::Read)
        .collect();
    for (i, a) in fenced.iter().enumerate() {
        for b in fenced.iter().skip(i + 1) {
            if a.name != b.name {
                continue;
            }
            let (fa, fb) = (a.fence.unwrap_or(0), b.fence.unwrap_or(0));
            let wrong = match () {
                _ if fa == fb => true,
                // (Strictly after: within one instant the order is not known.)
                _ if b.asked > a.start => fb < fa,
                _ if a.asked > b.start => fa < fb,
                _ => false,
            };
            if wrong {
                found.push(Violation {
                    rule: "fence",
                    at: a.start.max(b.start),
                    text: format!(
                        "fence {fa} of {} against fence {fb} of {}",
                        describe(a),
                        describe(b)
                    ),
                });
            }
        }
    }
}

/// What an election's observer sees: a leader vouched for throughout the read is
/// reported with its own term, terms of leaders never go back, and "nobody leads" is never
/// said while one leader was vouched for from before it asked until the answer came.
/// (Only terms a leader was given are compared: a candidate that holds the key on a quorum
/// while its campaign has yet to store its term there is seen with the term it asks for,
/// which may change or come to nothing.)
fn observations(history: &History, found: &mut Vec<Violation>) {
    let leaders: Vec<&Section> = (history.sections.iter())
        .filter(|s| s.primitive == Primitive::Leader)
        .collect();
    let given = |term: u64| leaders.iter().any(|s| s.fence == Some(term));
    let leader_term = |o: &Observation| match &o.leader {
        Some((_, Some(term))) if given(*term) => Some(*term),
        _ => None,
    };
    // Vouched for from before the observer asked until the answer: what the read saw.
    let throughout = |s: &&&Section, o: &Observation| {
        s.name == o.name
            && s.start < o.since
            && o.at < s.protected_end()
            && !breached(history, s.name, s.asked, o.at)
    };
    let seen = &history.observations;
    let mut report = |at: Duration, text: String| {
        found.push(Violation {
            rule: "observe",
            at,
            text,
        })
    };
    for (i, item) in seen.iter().enumerate() {
        match &item.leader {
            None => {
                if let Some(leader) = leaders.iter().find(|s| throughout(s, item)) {
                    report(
                        item.at,
                        format!(
                            "t{} was told nobody leads {:?} (asked {:?}, told {:?}) while {}",
                            item.task,
                            item.name,
                            item.since,
                            item.at,
                            describe(leader)
                        ),
                    );
                }
            }
            Some((value, term)) => {
                let own = |s: &&&Section| {
                    let tag = format!("t{}", s.task);
                    value == &tag || value.starts_with(&format!("{tag}-"))
                };
                let leader = leaders.iter().find(|s| own(s) && throughout(s, item));
                if let Some(leader) = leader.filter(|s| s.fence != *term) {
                    report(
                        item.at,
                        format!(
                            "t{} saw {value} lead in term {term:?} at {:?}, its term being {:?}",
                            item.task, item.at, leader.fence
                        ),
                    );
                }
            }
        }
        let earlier = seen[..i]
            .iter()
            .rev()
            .find(|o| o.task == item.task && leader_term(o).is_some());
        if let (Some(before), Some(term)) = (earlier, leader_term(item)) {
            let was = leader_term(before).unwrap_or(0);
            if term < was && !breached(history, item.name, before.at, item.at) {
                report(
                    item.at,
                    format!(
                        "t{} saw term {term} at {:?} after term {was} at {:?}",
                        item.task, item.at, before.at
                    ),
                );
            }
        }
    }
}

/// `wait_released` never answers "free" while the name was held throughout the wait: the
/// holders vouched for (readers too: their set is at the key) left no moment between its
/// asking and its answer uncovered — one holder, or several whose holds overlapped (where
/// one ended as the next began, the name may have been free that moment).
fn watches(history: &History, found: &mut Vec<Violation>) {
    for watch in history.watches.iter().filter(|w| w.free) {
        let mut holds: Vec<&Section> = (history.sections.iter())
            .filter(|s| {
                s.name == watch.name
                    && !matches!(s.primitive, Primitive::Permit(_))
                    && s.start < s.protected_end()
                    && !breached(history, s.name, s.asked, watch.answered)
            })
            .collect();
        holds.sort_by_key(|s| s.start);
        let (mut reached, mut chain) = (watch.asked, Vec::new());
        for s in holds {
            if s.start >= reached || reached > watch.answered {
                break;
            }
            reached = reached.max(s.protected_end());
            chain.push(describe(s));
        }
        if reached > watch.answered {
            found.push(Violation {
                rule: "watch",
                at: watch.answered,
                text: format!(
                    "t{} was told {:?} was free (waited {:?} to {:?}) while {}",
                    watch.task,
                    watch.name,
                    watch.asked,
                    watch.answered,
                    chain.join("; then ")
                ),
            });
        }
    }
}

/// A fair lock's waiters get the key in the order their first try reached the server
/// (docs/SAFETY.md, 8): of two waiters of one name, one whose try found the name held
/// — it was in line then — before the other was even called is not passed by it, while it
/// is still waiting (it left when it gave up: from its deadline on, its withdrawal may
/// have reached the server first). Unless a fault may have cost it its place: its process paused,
/// slowed, cut off or dead (its heartbeat may have run out: it drops out, and comes back
/// at the end of the line), or a server fault (the line lost, or nobody's heartbeat
/// renewed).
fn fair_order(plan: &Plan, history: &History, found: &mut Vec<Violation>) {
    let fair = |a: &&Attempt| a.primitive == Primitive::Fair;
    for first in history.attempts.iter().filter(fair) {
        let Some(in_line) = (first.failures.iter()).find(|f| f.held).map(|f| f.at) else {
            continue;
        };
        for second in history.attempts.iter().filter(fair) {
            let Some(got) = second.ended.filter(|_| second.obtained) else {
                continue;
            };
            // One that gave up left the line when its withdrawal reached the server: at
            // its deadline or later, before it returned (seed 33422).
            let gave_up = (!first.obtained).then(|| first.asked + first.deadline);
            let left = first
                .ended
                .map(|ended| gave_up.map_or(ended, |at| at.min(ended)));
            let still_waiting = left.is_none_or(|left| left > got);
            if second.name != first.name
                || second.asked <= in_line
                || !still_waiting
                || may_lose_place(plan, first.process, in_line, got)
            {
                continue;
            }
            found.push(Violation {
                rule: "fair-order",
                at: got,
                text: format!(
                    "t{} (p{}) got fair lock {:?} at {got:?} (asked {:?}) ahead of t{} (p{}), in line since {in_line:?} and still waiting (ended {:?}, obtained {})",
                    second.task,
                    second.process,
                    second.name,
                    second.asked,
                    first.task,
                    first.process,
                    first.ended,
                    first.obtained
                ),
            });
        }
    }
}

/// How long a Redlock node may take to answer, by default: a twentieth of the TTL, between
/// 10 ms and 500 ms (as `QuorumSettings::node_timeout` documents it).
fn default_node_timeout(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

/// On Redlock, a node that nothing hindered answers a try in time (docs/SAFETY.md,
/// Networks): a
/// try may fail for want of a node — it timed out or answered an error — only if, during
/// the try, that node was frozen, down or restarting, the process's link to it was slowed
/// or cut, or the process itself paused or died. Whatever the other nodes do, a quorum of
/// healthy ones is enough to be asked. (A try is taken to run from the previous one's
/// failure, or the acquire's call; a try that ends at the acquire's deadline is left out:
/// the deadline cuts its rounds short; and so is a try whose node timeout is not ample
/// for three requests in a row, as a try that finds its script unloaded sends, each
/// behind others on the connection: five round trips at the network's slowest.)
fn healthy_nodes_answer(plan: &Plan, history: &History, found: &mut Vec<Violation>) {
    if !matches!(plan.topology, Topology::Redlock(_)) {
        return;
    }
    for attempt in &history.attempts {
        let ttl = plan.tasks[attempt.task].ttl;
        if default_node_timeout(ttl) <= plan.latency * 10 {
            continue;
        }
        let mut from = attempt.asked;
        for failed in &attempt.failures {
            let during = (from, failed.at);
            from = failed.at;
            if failed.at + Duration::from_millis(1) >= attempt.asked + attempt.deadline {
                continue;
            }
            let unhindered: Vec<usize> = (failed.unreachable.iter().copied())
                .filter(|node| !hindered(plan, history, attempt.process, *node, during))
                .collect();
            if unhindered.is_empty() {
                continue;
            }
            found.push(Violation {
                rule: "quorum",
                at: failed.at,
                text: format!(
                    "t{} (p{}) {} {:?}: a try failed at {:?} for want of node(s) {unhindered:?}, which nothing hindered since {:?}",
                    attempt.task,
                    attempt.process,
                    attempt.primitive.name(),
                    attempt.name,
                    failed.at,
                    during.0
                ),
            });
        }
    }
}

/// Whether something may have kept `process` from asking `node` between `from` and `to`:
/// a fault of the node's, of the link between them or of the process's, or a cut request.
fn hindered(
    plan: &Plan,
    history: &History,
    process: usize,
    node: usize,
    (from, to): (Duration, Duration),
) -> bool {
    let cut = (history.cuts.iter())
        .any(|&(at, p, n)| p == process && n == node && from <= at && at <= to);
    // A request slowed by every slow fault of the link at once arrives that much later, and
    // the link's later requests queue behind it.
    let slowed_by: Duration = (plan.faults.iter())
        .filter_map(|strike| match strike.fault {
            Fault::Slow {
                process: p,
                node: n,
                extra,
                ..
            } if p == process && n == node => Some(extra),
            _ => None,
        })
        .sum();
    cut || (plan.faults.iter()).any(|strike| {
        let lasting = match strike.fault {
            Fault::Slow {
                process: p,
                node: n,
                lasting,
                ..
            } if p == process && n == node => lasting + slowed_by,
            Fault::Pause {
                process: p,
                lasting,
            } if p == process => lasting,
            Fault::Crash { process: p } if p == process => Duration::MAX,
            Fault::Down { node: n, lasting } if n == node && lasting.is_zero() => Duration::MAX,
            Fault::Restart {
                node: n,
                down: lasting,
            }
            | Fault::Down { node: n, lasting }
            | Fault::Freeze { node: n, lasting }
                if n == node =>
            {
                lasting
            }
            Fault::Failover { down } if node == 0 => down,
            _ => return false,
        };
        // A fault strikes at the first timer tick at or after its moment — or later, when
        // another task moved the clock on past it: within 2 ms.
        strike.at <= to
            && from
                <= strike
                    .at
                    .saturating_add(lasting)
                    .saturating_add(STRIKE_LATE)
    })
}

/// How late a fault may strike after its planned moment, and end after its planned end: a
/// timer fires on the first whole millisecond at or after its deadline, and a task that
/// moves the paused clock on by a fraction of a millisecond may carry it past.
const STRIKE_LATE: Duration = Duration::from_millis(2);

/// Whether a fault between `from` and `to` may have cost a waiter of `process` its place in
/// a fair line: one of its own process's, or any server's.
fn may_lose_place(plan: &Plan, process: usize, from: Duration, to: Duration) -> bool {
    (plan.faults.iter()).any(|strike| {
        let lasting = match strike.fault {
            Fault::Slow {
                process: p,
                extra,
                lasting,
                ..
            } if p == process => lasting + extra,
            // A cut request's retry pause (at most a third of a heartbeat).
            Fault::Cut { process: p, .. } if p == process => Duration::from_secs(1),
            Fault::Pause {
                process: p,
                lasting,
            } if p == process => lasting,
            Fault::Crash { process: p } if p == process => Duration::MAX,
            Fault::Down { lasting, .. } if lasting.is_zero() => Duration::MAX,
            Fault::Restart { down: lasting, .. }
            | Fault::Down { lasting, .. }
            | Fault::Freeze { lasting, .. }
            | Fault::Failover { down: lasting }
            | Fault::ReplicaBehind { lasting } => lasting,
            Fault::Evict { .. } => Duration::ZERO,
            _ => return false,
        };
        strike.at <= to && strike.at.saturating_add(lasting) >= from
    })
}

/// How soon, once the run is quiet, a release that found waiters in line must have served
/// one of them: the release reaching the server, one message to the locker first in line,
/// its try there and back — a few one-way delays (2 ms at most each); or, when that locker
/// lets the key pass (its waiter gave up as it was told), the 50 ms the key waits for it
/// and the next try — and room to spare. Less than most waiters' pause between tries
/// (20 ms to 3 s): a waiter left to its own next try is seen waiting.
pub const HANDED_WITHIN: Duration = Duration::from_millis(100);

/// Whether a release of `released` reaches a waiter of `waiter` at once (claims 9, 10):
/// plain locks and writers share the key's line, which a writer's or a plain lock's
/// release hands the key to, and the last reader's release too; a writer's release tells
/// readers on their channel when no writer waits; a fair lock's release tells its queue,
/// a semaphore's hands permits to its own line, and a leader's resignation is announced to
/// the candidates. (Across other kinds on one name — a fair lock's waiters beside a plain
/// lock's in one process, candidates beside a line — no order is promised: claim 8.)
fn hands_to(released: Primitive, waiter: Primitive) -> bool {
    use Primitive::{Fair, Leader, Lock, Permit, Read, Write};
    matches!(
        (released, waiter),
        (Permit(_), Permit(_))
            | (Fair, Fair)
            | (Leader, Leader)
            | (Lock | Write | Read, Lock | Write)
            | (Write, Read)
    )
}

/// Whether no fault — nor what it leaves behind — may touch the run between `from` and
/// `to`: not only once the run is settled, but between faults too. A node's fault (and a
/// cut or slowed request) may lose or delay a line, whose waiters then find the key at
/// their next try (at least once per third of a heartbeat: 1 s), or a release; a failover
/// may lose the master's lines too; a paused process's lockers keep their places while it
/// is paused, and a crashed one's until their heartbeat ends (a key handed to them waits
/// for them in vain). Each is given that long, and a second or two more.
fn undisturbed(plan: &Plan, from: Duration, to: Duration) -> bool {
    let second = Duration::from_secs(1);
    let heartbeat = Duration::from_secs(3);
    (plan.faults.iter()).all(|strike| {
        let lasting = match strike.fault {
            Fault::Slow { extra, lasting, .. } => lasting + extra + 2 * second,
            Fault::Cut { .. } | Fault::Evict { .. } => 3 * second,
            Fault::Down { lasting, .. } if lasting.is_zero() => Duration::MAX,
            Fault::Restart { down: lasting, .. }
            | Fault::Down { lasting, .. }
            | Fault::Freeze { lasting, .. }
            | Fault::ReplicaBehind { lasting } => lasting + 2 * second,
            Fault::Pause { lasting, .. } => lasting + heartbeat + second,
            Fault::Crash { .. } => heartbeat + second,
            // (A subscriber connection may take a while to find the promoted replica.)
            Fault::Failover { .. } => crate::plan::SETTLE,
        };
        to < strike.at || strike.at.saturating_add(lasting) < from
    })
}

/// A release wakes a waiting process (claim 9): away from faults, a holder's release
/// that found its claim held — not kept for a minimum hold — while a waiter with wake-up
/// was in line for the name (a try of its had found the name held; it waits on past the
/// hand-off) is followed within [`HANDED_WITHIN`] by a holder of the name: the waiter, or
/// another that was handed it. (Waiters of two names at once are left to the liveness
/// rule.)
fn hand_offs(plan: &Plan, history: &History, found: &mut Vec<Violation>) {
    // Lines are kept where one node decides; on Redlock a release is announced to every
    // waiter, whose tries may split the nodes and pause.
    if let Topology::Redlock(_) = plan.topology {
        return;
    }
    for s in &history.sections {
        let Some(released) = s.released else {
            continue;
        };
        let by = released + HANDED_WITHIN;
        // (A minimum hold may keep the key past the release: the workload's `keep_until`
        // is only a lower bound of the library's.)
        if !undisturbed(plan, released, by)
            || s.keep_until.is_some()
            || s.release_held != Some(true)
        {
            continue;
        }
        let in_line = |w: &&Attempt| {
            w.name == s.name
                && w.also.is_none()
                && w.wake_up
                && hands_to(s.primitive, w.primitive)
                && w.asked < released
                && w.ended.is_none_or(|ended| ended > by)
                && w.asked + w.deadline > by
                && (w.failures.iter())
                    .rfind(|f| f.at < released)
                    .is_some_and(|f| f.held)
        };
        let alive = |w: &&Attempt| {
            !(plan.faults.iter()).any(|f| f.fault == Fault::Crash { process: w.process })
        };
        let Some(waiter) = history.attempts.iter().filter(alive).find(in_line) else {
            continue;
        };
        // A locker handed the key whose waiter wants another name too, held, passes the key
        // on to the next locker in line, and leaves its own other waiters to their next
        // try (see the module docs: found, and left to the liveness rule).
        // (Such a waiter of the waiter's own process, since it waits, may have taken their
        // locker out of the line; one of another process, handed the key while it waits on
        // its other name, may let the hand-off pass.)
        let multi_key = (history.attempts.iter()).any(|m| {
            let since = match m.process == waiter.process {
                true => waiter.asked,
                false => released,
            };
            m.also.is_some()
                && (m.name == s.name || m.also == Some(s.name))
                && m.asked < by
                && m.ended.is_none_or(|ended| ended > since)
        });
        // Waiters of one process for one name but of another kind (a fair lock's beside a
        // plain lock's) share its wake-up there, and their turns are not promised (claim 8).
        let mixed = other_kind_in_process(history, waiter, released, by);
        // A reader that a writer of the waiter's own process became by downgrading: the
        // writer's locker left the line when it was handed the key, and the waiter queued
        // behind that writer in its process; the reader's release reaches no line (seed
        // 6566, noted).
        let downgraded = s.primitive == Primitive::Read
            && s.process == waiter.process
            && (history.sections.iter()).any(|w| {
                w.task == s.task && w.primitive == Primitive::Write && w.released == Some(s.asked)
            });
        // The holder took the name just after a holder elsewhere had shortened its lease
        // and let it run out: the waiters in line, told the longer TTL, were not trying,
        // and a taker that does not line up marks nothing, so its release hands nothing
        // on (claim 9: the waiters find out by the TTL they saw or at their next try).
        let past_a_shortened_lease =
            shortened_elsewhere(history, waiter, s.name, s.start, SAMPLE_WINDOW);
        if downgraded || past_a_shortened_lease {
            continue;
        }
        if multi_key || mixed {
            continue;
        }
        let served = (history.sections.iter())
            .any(|t| t.name == s.name && t.start >= released && t.start <= by);
        // What the servers held says the release left room for the waiter, and nobody was
        // handed it (a key handed on, or permits reserved, count as held).
        let left_free = (history.samples.iter()).any(|(at, name, free)| {
            *name == s.name && *at > released && *at <= by && free.for_primitive(waiter.primitive)
        });
        if left_free && !served && !fair_line_may_block(history, waiter, released, by) {
            found.push(Violation {
                rule: "hand-off",
                at: by,
                text: format!(
                    "{} released while t{} (p{}) was in line for {} {:?} (asked {:?}), and \
                     nobody held it {HANDED_WITHIN:?} later",
                    describe(s),
                    waiter.task,
                    waiter.process,
                    waiter.primitive.name(),
                    waiter.name,
                    waiter.asked
                ),
            });
        }
    }
}

/// A key handed to a locker in line is taken by it (claim 9): away from faults, once the
/// run is settled, a hand-off the samples saw for [`HANDOFF_LAPSED`] or more that left
/// the key free — nobody of that locker took it — was handed to a locker that did not
/// listen for it, or whose waiters could not use it (a place left in a line, a key kept
/// for a waiter that wanted another held too). Each lapse costs every other waiter the
/// hand-off's 50 ms, and a waiter of another process its next try. Counted where a waiter
/// for the name alone waited through it.
fn hand_offs_taken(plan: &Plan, history: &History, found: &mut Vec<Violation>) {
    if let Topology::Redlock(_) = plan.topology {
        return;
    }
    let settled = plan.settled();
    let mut names: Vec<&'static str> = history.samples.iter().map(|(_, n, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let samples = (history.samples.iter()).filter(|(at, n, _)| *n == name && *at >= settled);
        let mut handed_since: Option<Duration> = None;
        let mut last_handed = Duration::ZERO;
        for (at, _, free) in samples {
            if free.handed {
                handed_since.get_or_insert(*at);
                last_handed = *at;
                continue;
            }
            let Some(since) = handed_since.take() else {
                continue;
            };
            let lapsed = last_handed - since >= HANDOFF_LAPSED && free.exclusive;
            // Someone could have used it: a waiter with wake-up for this name alone, there
            // before the hand-off and still waiting after it. (Waiters for several names
            // each may find another held: a key none of them can use may lapse.)
            let wanted = (history.attempts.iter()).any(|w| {
                w.name == name
                    && w.also.is_none()
                    && w.wake_up
                    && matches!(w.primitive, Primitive::Lock | Primitive::Write)
                    && w.asked < since
                    && w.ended.is_none_or(|ended| ended > *at)
                    && w.asked + w.deadline > *at
            });
            if lapsed && wanted && undisturbed(plan, since, *at) {
                found.push(Violation {
                    rule: "hand-off-taken",
                    at: *at,
                    text: format!(
                        "{name:?} was handed to a locker from {since:?} to {last_handed:?} \
                         (sampled), and then free: nobody of that locker took it"
                    ),
                });
            }
        }
    }
}

/// Once the run is quiet and settled, a waiter with wake-up gets its name within
/// [`SERVED_WITHIN`] of its being free. (A fair lock serves its line's first: while a
/// waiter without wake-up, which may be first, waits too, it is not counted.)
fn liveness(plan: &Plan, history: &History, found: &mut Vec<Violation>) {
    let settled = plan.settled();
    for w in history.attempts.iter() {
        if !w.wake_up || w.cancelled || w.asked < settled {
            continue;
        }
        let until = (w.ended.unwrap_or(plan.end())).min(w.asked + w.deadline);
        if let Some((from, to)) = idle_while_free(plan, history, w, until) {
            found.push(Violation {
                rule: "liveness",
                at: to,
                text: format!(
                    "t{} (p{}) waited for {} {:?} (asked {:?}, ended {:?}) while it was free from {from:?} to {to:?}, {}",
                    w.task,
                    w.process,
                    w.primitive.name(),
                    w.name,
                    w.asked,
                    w.ended,
                    freed_by(history, w.name, from)
                ),
            });
        }
    }
}

/// A stretch of [`SERVED_WITHIN`] or more, between `w`'s asking and `until`, in which every
/// sample found its name free for it.
fn idle_while_free(
    plan: &Plan,
    history: &History,
    w: &Attempt,
    until: Duration,
) -> Option<(Duration, Duration)> {
    // Since when the name has been free (perhaps since before `w` asked: what freed it
    // decides whether `w` could know).
    let mut freed: Option<Duration> = None;
    // How long before a sample that found the name free it may have become free: the
    // monitor's window — or, at the first sample (sampling starts once the run settled),
    // any time before.
    let settled = plan.settled();
    let quiet = || (history.samples.iter()).filter(move |(at, _, _)| *at >= settled);
    let window = |name: &str, since: Duration| match quiet().find(|(_, n, _)| *n == name) {
        Some((at, _, _)) if *at == since => Duration::MAX,
        _ => SAMPLE_WINDOW,
    };
    // A multi-key waiter needs its second name free at the same sample too; since when
    // that name alone has been free says what freed it.
    let also: Vec<(Duration, bool)> = (history.samples.iter())
        .filter(|(_, name, _)| Some(*name) == w.also)
        .map(|(at, _, free)| (*at, free.for_primitive(w.primitive)))
        .collect();
    let also_free_since = |at: Duration| {
        let i = also.binary_search_by_key(&at, |(at, _)| *at).ok()?;
        let run = also[..=i].iter().rev().take_while(|(_, free)| *free);
        run.last().map(|(since, _)| *since)
    };
    // Since when `w`'s own name has been free.
    let mut name_freed: Option<Duration> = None;
    for (at, name, free) in quiet() {
        if *name != w.name {
            continue;
        }
        if *at >= until {
            break;
        }
        if !free.for_primitive(w.primitive) {
            (name_freed, freed) = (None, None);
            continue;
        }
        let name_since = *name_freed.get_or_insert(*at);
        let also_since = w.also.and_then(|_| also_free_since(*at));
        if w.also.is_some() && also_since.is_none() {
            freed = None;
            continue;
        }
        let since = *freed.get_or_insert(*at);
        let waited_from = since.max(w.asked);
        // A name freed by a holder elsewhere that shortened its lease (each of a multi-key
        // waiter's names, from when that name was freed).
        let shortened = |name: &'static str, since: Duration| {
            shortened_elsewhere(history, w, name, since, window(name, since))
        };
        if *at > w.asked && *at - waited_from >= SERVED_WITHIN {
            let excused = fair_line_may_block(history, w, waited_from, *at)
                || other_kind_in_process(history, w, waited_from, *at)
                || shortened(w.name, name_since)
                || (w.also.zip(also_since)).is_some_and(|(also, since)| shortened(also, since))
                || pausing_after_an_error(w, *at)
                || freed_by_a_non_writer(history, w, since, window(w.name, since));
            if !excused {
                return Some((waited_from, *at));
            }
        }
    }
    None
}

/// `w`'s last try before `at` failed for another reason than the name being held (no
/// quorum, an error): it waits out its retry pause, by design, not for a release.
fn pausing_after_an_error(w: &Attempt, at: Duration) -> bool {
    (w.failures.iter())
        .rfind(|failed| failed.at <= at)
        .is_some_and(|failed| !failed.held)
}

/// `w` reads, and what freed the name was a plain lock, a fair lock or a leader — which
/// keep readers out but announce their release on the key's channel, not the readers' —
/// or a writer's key that ran out unreleased (readers that waited while it waited learned
/// only its intent's heartbeat): `w` waits by what its last try saw (docs/SAFETY.md, 10).
fn freed_by_a_non_writer(history: &History, w: &Attempt, at: Duration, window: Duration) -> bool {
    w.primitive == Primitive::Read
        && (history.sections.iter()).any(|s| {
            let ended = s.released.unwrap_or(s.valid).min(s.valid);
            let announced =
                s.primitive == Primitive::Write && s.released.is_some_and(|r| r < s.valid);
            s.name == w.name
                && s.primitive != Primitive::Read
                && !announced
                && ended <= at
                && at - ended <= window
        })
}

/// A waiter of another exclusive kind for the same name (a writer beside a plain lock, a
/// fair lock beside either, a candidate) waited in `w`'s process during the stretch: one
/// locker's waiters for a key share its wake-up there and may queue behind each other, and
/// no order is promised across kinds (claim 8: one kind of lock per key for order).
/// (Readers and permits wait apart: on their own channel, in their own line.)
fn other_kind_in_process(history: &History, w: &Attempt, from: Duration, to: Duration) -> bool {
    let queued = |p: Primitive| p.exclusive();
    queued(w.primitive)
        && (history.attempts.iter()).any(|o| {
            o.process == w.process
                && o.name == w.name
                && o.primitive != w.primitive
                && queued(o.primitive)
                && o.asked < to
                && o.ended.is_none_or(|e| e > from)
        })
}

/// A fair lock's waiter without wake-up (which may be first in line, and polls) waited
/// during the stretch.
fn fair_line_may_block(history: &History, w: &Attempt, from: Duration, to: Duration) -> bool {
    w.primitive == Primitive::Fair
        && (history.attempts.iter()).any(|o| {
            o.name == w.name
                && o.primitive == Primitive::Fair
                && !o.wake_up
                && o.asked < to
                && o.ended.is_none_or(|e| e > from)
        })
}

/// What freed `name` just before `at` (a sample later): a forced release, a release, or
/// nothing (its holder's key ran out).
fn freed_by(history: &History, name: &str, at: Duration) -> String {
    let window = SAMPLE_WINDOW;
    let recent = |t: Duration| t <= at && at - t <= window;
    let took_effect = |b: &&crate::history::Breach| b.at <= at && recent(b.until.min(at));
    if let Some(breach) =
        (history.breaches.iter()).find(|b| took_effect(b) && b.name.as_deref() == Some(name))
    {
        return format!("freed by {} at {:?}", breach.what, breach.at);
    }
    let released = (history.sections.iter())
        .filter(|s| s.name == name)
        .find(|s| s.released.is_some_and(recent));
    if let Some(s) = released {
        return format!(
            "freed by t{}'s release at {:?}",
            s.task,
            s.released.unwrap_or_default()
        );
    }
    let expired = (history.sections.iter())
        .filter(|s| s.name == name)
        .find(|s| recent(s.valid));
    match expired {
        Some(s) => format!(
            "freed when t{}'s key ran out (valid to {:?}, released {:?})",
            s.task, s.valid, s.released
        ),
        None => "freed (by what, unseen)".into(),
    }
}

/// `name` (one of `w`'s) was freed at `at` by a key that ran out after its holder, in
/// another process than `w`'s, refreshed it to a shorter TTL: `w` learned the longer one
/// from its last try (nobody announces a shorter TTL to other processes), and waits by
/// that.
fn shortened_elsewhere(
    history: &History,
    w: &Attempt,
    name: &str,
    at: Duration,
    window: Duration,
) -> bool {
    (history.sections.iter()).any(|s| {
        s.name == name
            && s.shortened
            // (A fair lock's waiters hear only of their turn: in any process, they wait
            // by the TTL they saw, or their heartbeat's try.)
            && (s.process != w.process || w.primitive == Primitive::Fair)
            && s.valid <= at
            && at - s.valid <= window
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::FailedTry;
    use crate::plan::{Scale, Strike};

    fn failed(at: f64, held: bool, unreachable: Vec<usize>) -> FailedTry {
        FailedTry {
            at: secs(at),
            held,
            unreachable,
        }
    }

    fn strike(at: f64, fault: Fault) -> Strike {
        Strike {
            id: 0,
            at: secs(at),
            fault,
        }
    }

    /// A Redlock lock's acquire by process 0, asked at 0.5 s, whose try failed at 1 s for
    /// want of node 1.
    fn quorum_rule(
        faults: Vec<Strike>,
        cuts: Vec<(Duration, usize, usize)>,
        deadline: f64,
    ) -> Vec<&'static str> {
        let mut plan = Plan::draw(1, Scale::short());
        plan.topology = Topology::Redlock(3);
        plan.faults = faults;
        let mut attempt = waiter(0, 0, 0.5, 2.0, false);
        attempt.primitive = Primitive::Lock;
        attempt.deadline = secs(deadline);
        attempt.failures = vec![failed(1.0, false, vec![1])];
        let history = History {
            attempts: vec![attempt],
            cuts,
            ..History::default()
        };
        let mut found = Vec::new();
        healthy_nodes_answer(&plan, &history, &mut found);
        found.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_redlock_try_fails_for_want_of_a_node_only_if_something_hindered_it() {
        assert_eq!(quorum_rule(vec![], vec![], 10.0), ["quorum"]);
        // Node 1 frozen, lost or restarting during the try; the link to it slowed; the
        // process paused.
        for fault in [
            Fault::Freeze {
                node: 1,
                lasting: secs(0.3),
            },
            Fault::Down {
                node: 1,
                lasting: Duration::ZERO,
            },
            Fault::Restart {
                node: 1,
                down: secs(0.2),
            },
            Fault::Slow {
                process: 0,
                node: 1,
                extra: secs(0.1),
                lasting: secs(0.2),
            },
            Fault::Pause {
                process: 0,
                lasting: secs(0.1),
            },
        ] {
            let text = fault.to_string();
            assert!(
                quorum_rule(vec![strike(0.8, fault)], vec![], 10.0).is_empty(),
                "{text}"
            );
        }
        // A request of the process to node 1 cut during the try.
        assert!(quorum_rule(vec![], vec![(secs(0.9), 0, 1)], 10.0).is_empty());
        // Another node frozen, another link cut, or node 1 frozen before the try: no excuse.
        let elsewhere = vec![strike(
            0.8,
            Fault::Freeze {
                node: 2,
                lasting: secs(0.3),
            },
        )];
        let cuts = vec![(secs(0.9), 0, 2), (secs(0.9), 1, 1)];
        assert_eq!(quorum_rule(elsewhere, cuts, 10.0), ["quorum"]);
        let before = vec![strike(
            0.1,
            Fault::Freeze {
                node: 1,
                lasting: secs(0.3),
            },
        )];
        assert_eq!(quorum_rule(before, vec![], 10.0), ["quorum"]);
        // A try cut short by the acquire's deadline.
        assert!(quorum_rule(vec![], vec![], 0.5).is_empty());
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A kept-alive holder of `name` from 1 s (asked at 0.9 s) that heard a request at
    /// 2 s, with the given requests (name, sent, answered).
    fn ask_rule(asks: &[(&'static str, f64, f64)]) -> Vec<&'static str> {
        let section = Section {
            task: 0,
            process: 0,
            primitive: Primitive::Lock,
            style: crate::plan::Style::Lease,
            name: "job",
            fence: None,
            asked: secs(0.9),
            start: secs(1.0),
            valid: secs(3.0),
            keep_until: None,
            last_act: None,
            overran: false,
            released: Some(secs(2.1)),
            release_held: Some(true),
            told_lost: None,
            heard_ask: Some(secs(2.0)),
            shortened: false,
            renewed_with: None,
        };
        let history = History {
            sections: vec![section],
            asks: (asks.iter())
                .map(|&(name, sent, until)| crate::history::Ask {
                    task: 1,
                    name,
                    sent: secs(sent),
                    until: secs(until),
                })
                .collect(),
            ..History::default()
        };
        let mut found = Vec::new();
        super::asks(&history, &mut found);
        found.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_holder_hears_a_request_only_if_one_was_made_while_it_held() {
        assert_eq!(ask_rule(&[]), ["ask"]);
        assert!(ask_rule(&[("job", 1.5, 1.6)]).is_empty());
        // Stored while its acquire was under way: it may have held on the server already.
        assert!(ask_rule(&[("job", 0.8, 0.95)]).is_empty());
        // Answered before it asked for the lock: a request for an earlier holder.
        assert_eq!(ask_rule(&[("job", 0.5, 0.8)]), ["ask"]);
        // Sent after it heard one; or for another name.
        assert_eq!(ask_rule(&[("job", 2.05, 2.06)]), ["ask"]);
        assert_eq!(ask_rule(&[("other", 1.5, 1.6)]), ["ask"]);
    }

    /// A fair waiter of `line` in process `process`.
    fn waiter(task: usize, process: usize, asked: f64, ended: f64, obtained: bool) -> Attempt {
        Attempt {
            task,
            process,
            primitive: Primitive::Fair,
            name: "line",
            also: None,
            asked: secs(asked),
            ended: Some(secs(ended)),
            obtained,
            wake_up: true,
            cancelled: false,
            deadline: secs(10.0),
            failures: Vec::new(),
        }
    }

    /// `first` in line at 1 s (its first try found the key held) and served at 3 s;
    /// `second` asked at `asked` and served at 2 s.
    fn fair_rule(asked: f64, first_ended: f64, faults: Vec<Strike>) -> Vec<&'static str> {
        let mut plan = Plan::draw(1, Scale::short());
        plan.faults = faults;
        let mut first = waiter(0, 0, 0.5, first_ended, first_ended > 2.0);
        first.failures = vec![failed(0.7, false, vec![]), failed(1.0, true, vec![])];
        let history = History {
            attempts: vec![first, waiter(1, 1, asked, 2.0, true)],
            ..History::default()
        };
        let mut found = Vec::new();
        fair_order(&plan, &history, &mut found);
        found.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_fair_waiter_that_gave_up_left_the_line_at_its_deadline_not_when_it_returned() {
        let plan = Plan::draw(1, Scale::short());
        let rule = |deadline: f64| {
            let mut first = waiter(0, 0, 0.5, 2.05, false);
            first.failures = vec![failed(1.0, true, vec![])];
            first.deadline = secs(deadline);
            let history = History {
                attempts: vec![first, waiter(1, 1, 1.5, 2.0, true)],
                ..History::default()
            };
            let mut found = Vec::new();
            fair_order(&plan, &history, &mut found);
            found.iter().map(|v| v.rule).collect::<Vec<_>>()
        };
        // Its deadline (1.95 s) came before the other was served (2.0 s): its withdrawal
        // may have reached the server first, though it returned at 2.05 s.
        assert!(rule(1.45).is_empty());
        // Its deadline came after: it was in line when passed.
        assert_eq!(rule(1.55), ["fair-order"]);
    }

    fn pause(process: usize, at: f64, lasting: f64) -> Strike {
        let lasting = secs(lasting);
        strike(at, Fault::Pause { process, lasting })
    }

    #[test]
    fn a_fair_waiter_passed_by_a_later_one_breaks_the_order_unless_it_left_or_was_paused() {
        // Asked after the first was in line, served ahead of it: out of order.
        assert_eq!(fair_rule(1.5, 3.0, vec![]), ["fair-order"]);
        // Asked before the first's try was answered: nobody can tell which reached the
        // server first (its error at 0.7 s says nothing about the line).
        assert!(fair_rule(0.9, 3.0, vec![]).is_empty());
        // Still waiting, though it gave up later: passed while in line.
        assert_eq!(fair_rule(1.5, 2.5, vec![]), ["fair-order"]);
        // Gone (gave up) before the second was served.
        assert!(fair_rule(1.5, 1.9, vec![]).is_empty());
        // Its process paused while it was in line: its heartbeat may have run out.
        assert!(fair_rule(1.5, 3.0, vec![pause(0, 1.2, 0.5)]).is_empty());
        // Paused before it was in line, or after it was passed, or another process: no
        // excuse.
        assert_eq!(
            fair_rule(1.5, 3.0, vec![pause(0, 0.2, 0.5)]),
            ["fair-order"]
        );
        assert_eq!(
            fair_rule(1.5, 3.0, vec![pause(0, 2.1, 0.5)]),
            ["fair-order"]
        );
        assert_eq!(
            fair_rule(1.5, 3.0, vec![pause(1, 1.2, 0.5)]),
            ["fair-order"]
        );
    }

    /// A holder of `name` (process 0) from `start` to `released`, its latest validity
    /// `valid`; kept alive with renewals of `ttl` when given.
    fn holder(
        task: usize,
        primitive: Primitive,
        start: f64,
        valid: f64,
        released: Option<f64>,
        ttl: Option<f64>,
    ) -> Section {
        Section {
            task,
            process: task,
            primitive,
            style: crate::plan::Style::Lease,
            name: "job",
            fence: None,
            asked: secs(start - 0.01),
            start: secs(start),
            valid: secs(valid),
            keep_until: None,
            last_act: None,
            overran: false,
            released: released.map(secs),
            release_held: released.map(|_| true),
            told_lost: None,
            heard_ask: None,
            shortened: false,
            renewed_with: ttl.map(secs),
        }
    }

    fn rules_of(plan: &Plan, history: &History) -> Vec<&'static str> {
        check(plan, history).iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_renewal_sent_after_a_forced_release_took_the_claim_is_a_violation() {
        let mut plan = Plan::draw(1, Scale::short());
        plan.faults.clear();
        // (Without wake-up: how soon it is told is `forced-told`'s, tested below.)
        plan.processes.iter_mut().for_each(|p| p.wake_up = false);
        let forced = |called: f64, answered: f64| crate::history::Forced {
            task: 9,
            name: "job",
            called: secs(called),
            answered: secs(answered),
        };
        // A lease of 1 s held from 1 s; forced free at 2.0–2.1 s.
        let history = |valid: f64| History {
            sections: vec![holder(0, Primitive::Lock, 1.0, valid, Some(3.5), Some(1.0))],
            forced: vec![forced(2.0, 2.1)],
            ..History::default()
        };
        // Its latest validity came from a renewal sent before the answer (at most then +
        // the TTL less 1 %): fine; from one sent after it: not.
        assert!(rules_of(&plan, &history(3.08)).is_empty());
        assert_eq!(rules_of(&plan, &history(3.2)), ["renewal"]);
        // Released before the force was called, or acquired after: not its claim.
        let mut before = history(3.2);
        before.sections[0].released = Some(secs(1.9));
        assert!(rules_of(&plan, &before).is_empty());
        let mut after = history(3.2);
        after.sections[0].start = secs(2.05);
        assert!(rules_of(&plan, &after).is_empty());
    }

    #[test]
    fn a_lease_with_wake_up_not_told_at_once_of_a_forced_release_is_a_violation() {
        let mut plan = Plan::draw(1, Scale::short());
        plan.faults.clear();
        plan.processes.iter_mut().for_each(|p| p.wake_up = true);
        // A lease held from 1 s, valid to 3 s; forced free at 2.0–2.1 s; it must have been
        // told by 2.4 s (or have let go).
        let history = |told: Option<f64>, released: Option<f64>| {
            let mut lease = holder(0, Primitive::Lock, 1.0, 3.0, released, Some(1.0));
            lease.told_lost = told.map(secs);
            History {
                sections: vec![lease],
                forced: vec![crate::history::Forced {
                    task: 9,
                    name: "job",
                    called: secs(2.0),
                    answered: secs(2.1),
                }],
                ..History::default()
            }
        };
        assert!(rules_of(&plan, &history(Some(2.39), Some(2.5))).is_empty());
        assert!(rules_of(&plan, &history(None, Some(2.4))).is_empty());
        assert_eq!(
            rules_of(&plan, &history(Some(2.41), Some(2.5))),
            ["forced-told"]
        );
        assert_eq!(rules_of(&plan, &history(None, Some(3.0))), ["forced-told"]);
        // Not held to it: a process without wake-up, a holder that is not kept alive, a
        // lease younger than the bound, one whose validity had ended, a force during
        // faults (before the run settled).
        let late = history(None, Some(3.0));
        let mut without = plan.clone();
        without.processes[0].wake_up = false;
        assert!(rules_of(&without, &late).is_empty());
        let mut careful = late.clone();
        careful.sections[0].style = crate::plan::Style::Careful;
        assert!(rules_of(&plan, &careful).is_empty());
        let mut young = late.clone();
        young.sections[0].start = secs(1.75);
        assert!(rules_of(&plan, &young).is_empty());
        let mut ended = late.clone();
        ended.sections[0].valid = secs(1.9);
        ended.sections[0].released = None;
        assert!(!rules_of(&plan, &ended).contains(&"forced-told"));
        let mut faulty = plan.clone();
        faulty.faults = vec![Strike {
            id: 0,
            at: secs(0.5),
            fault: Fault::Cut {
                process: 0,
                node: 0,
                applied: false,
            },
        }];
        assert!(faulty.settled() > secs(2.0));
        assert!(!rules_of(&faulty, &late).contains(&"forced-told"));
    }

    #[test]
    fn a_holder_renewed_after_a_rival_took_its_lost_claim_is_a_violation() {
        let mut plan = Plan::draw(1, Scale::short());
        plan.faults.clear();
        let evicted = crate::history::Breach {
            at: secs(1.5),
            until: secs(1.5),
            name: Some("job".into()),
            what: "evict".into(),
            failover: false,
        };
        // A lease of 1 s from 1 s lost its key to an eviction at 1.5 s; a rival took it at
        // 1.6 s. The lease's validity to 2.9 s came from a renewal sent at 1.91 s or later.
        let history = |valid: f64| History {
            sections: vec![
                holder(0, Primitive::Lock, 1.0, valid, Some(2.5), Some(1.0)),
                holder(1, Primitive::Lock, 1.6, 2.4, Some(2.4), None),
            ],
            breaches: vec![evicted.clone()],
            ..History::default()
        };
        assert_eq!(rules_of(&plan, &history(2.9)), ["renewal"]);
        // Renewed before the rival took it (2.5 s: sent at 1.51 s or later): exempt.
        assert!(rules_of(&plan, &history(2.5)).is_empty());
        // A failover since may have brought its claim back (a replica that still had it).
        plan.faults = vec![strike(1.7, Fault::Failover { down: secs(0.1) })];
        assert!(rules_of(&plan, &history(2.9)).is_empty());
    }

    #[test]
    fn a_release_with_a_waiter_in_line_is_followed_by_a_holder_once_the_run_is_quiet() {
        let mut plan = Plan::draw(1, Scale::short());
        plan.topology = Topology::Single;
        plan.faults.clear();
        let mut waiting = waiter(1, 1, 0.5, 3.0, true);
        waiting.primitive = Primitive::Lock;
        waiting.name = "job";
        waiting.failures = vec![failed(0.6, true, vec![])];
        let free = crate::history::Free {
            exclusive: true,
            read: true,
            permit: true,
            handed: false,
        };
        let history = |next: f64, samples: Vec<f64>| History {
            sections: vec![
                holder(0, Primitive::Lock, 0.2, 2.0, Some(1.0), None),
                holder(1, Primitive::Lock, next, next + 1.0, Some(next + 0.5), None),
            ],
            attempts: vec![waiting.clone()],
            samples: samples
                .into_iter()
                .map(|at| (secs(at), "job", free))
                .collect(),
            ..History::default()
        };
        // Free after the release and nobody took it for 100 ms: the waiter was not told.
        assert_eq!(rules_of(&plan, &history(2.5, vec![1.04])), ["hand-off"]);
        // Taken within 100 ms; or never free (handed on): served.
        assert!(rules_of(&plan, &history(1.05, vec![1.04])).is_empty());
        assert!(rules_of(&plan, &history(2.5, vec![])).is_empty());
        // On Redlock there is no line.
        plan.topology = Topology::Redlock(3);
        assert!(rules_of(&plan, &history(2.5, vec![1.04])).is_empty());
    }
}
