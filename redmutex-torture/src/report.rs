//! The report of a mode's run: a text table for people, one JSON object for scripts.

use std::fmt::Write as _;

use crate::record::Holder;
use crate::run::Report;
use crate::schedule::{FaultKind, Mode};

fn topology(mode: Mode) -> &'static str {
    match mode {
        Mode::Single => "one node (append-only file, fsync always) behind a TCP proxy",
        Mode::Redlock => "Redlock over five nodes (no persistence), each behind a TCP proxy",
        Mode::Cluster => "a six-node Redis Cluster (append-only files)",
        Mode::Sentinel => {
            "a master and a replica under three sentinels (no persistence), failed over \
             to the replica after it missed the last writes; nobody waits for the replica"
        }
        Mode::SentinelConfirmed => {
            "as sentinel, every write confirmed by the replica (with_replication(1, 100 ms))"
        }
    }
}

fn json_key(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Cut => "cut",
        FaultKind::Latency => "latency",
        FaultKind::NodePause => "node_pause",
        FaultKind::NodeRestart => "node_restart",
        FaultKind::HolderPause => "holder_pause",
        FaultKind::ClientKill => "client_kill",
        FaultKind::Failover => "failover",
    }
}

/// The text report.
pub fn text(r: &Report) -> String {
    let v = &r.verdict;
    let a = &r.args;
    let per_second = v.sections as f64 / a.seconds.max(1) as f64;
    let total_faults: usize = r.faults.iter().map(|f| f.1).sum();
    let faults = r
        .faults
        .iter()
        .map(|(kind, n)| format!("{} {n}", kind.name()))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = String::new();
    let mut row = |name: &str, value: String| {
        let _ = writeln!(out, "  {name:<37} {value}");
    };
    row("topology", topology(r.mode).to_string());
    row(
        "settings",
        format!(
            "seed {}, {} s, {} processes x {} tasks, {} keys, TTL {} ms",
            r.seed, a.seconds, a.processes, a.tasks, a.keys, a.ttl_ms
        ),
    );
    row(
        "acquisitions",
        format!(
            "{} ({per_second:.0}/s): {}",
            v.sections,
            (Holder::ALL.iter().zip(v.by_holder))
                .map(|(holder, n)| format!("{} {n}", holder.name()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    row("faults injected", format!("{total_faults}: {faults}"));
    row(
        "told \"lost\"",
        format!(
            "{} leases, {} careful holders past their validity",
            v.lost, v.expired
        ),
    );
    row("holders acting after their validity", v.overran.to_string());
    // Where a failover loses acknowledged writes, rivals get in: counted, not failed.
    let must = match r.mode.loses_writes() {
        true => "lost to failovers",
        false => "must be 0",
    };
    if r.mode.is_sentinel() {
        row(
            "broken by rivals after failovers",
            format!(
                "{} (overlaps, permits over the limit, minimum holds, \"free\" while held)",
                v.broken_by_rivals()
            ),
        );
    }
    row(
        "overlaps, holder not told \"lost\"",
        format!("{} ({must})", v.unsafe_overlaps),
    );
    row(
        "taken within a minimum hold",
        format!("{} ({must})", v.min_hold_violations),
    );
    row(
        "\"free\" answered while held",
        format!("{} ({must})", v.watch_violations),
    );
    row(
        "more permit holders than the limit",
        format!(
            "{} ({must}; limit {})",
            v.permit_overflows,
            crate::record::PERMITS
        ),
    );
    row(
        "pairs overlapping a late holder",
        format!(
            "{}; fence in order in {}, late write refused in {}",
            v.overrun_overlaps, v.overrun_fenced, v.overrun_refused
        ),
    );
    row(
        "fence-order violations",
        format!("{} (must be 0)", v.fence_violations),
    );
    row(
        "resource writes",
        format!(
            "{} accepted, {} stale refused, {} inconsistent",
            v.writes_accepted, v.stale_writes_refused, v.store_violations
        ),
    );
    row(
        "guarded writes",
        format!(
            "{} accepted, {} refused ({} after a refused fence); accepted after a refused \
             fence {}, after a later holder took the lock {} (both must be 0)",
            v.guarded_accepted,
            v.guarded_refused,
            v.guarded_stale_refused,
            v.guarded_violations,
            v.guarded_after_rival
        ),
    );
    row(
        "requests to let go",
        format!(
            "{} asked a holder, {} found nobody, {} failed; heard by {} holders, {} of them \
             never asked (must be 0)",
            v.asks[0], v.asks[1], v.asks[2], v.heard, v.ask_violations
        ),
    );
    row(
        "failed acquires",
        format!(
            "not obtained {}, transient {}, other {}",
            r.not_obtained, r.transient_errors, r.other_errors
        ),
    );
    row(
        "lost before asking for the fence",
        format!("{} (no fence handed out)", r.no_fence),
    );
    row(
        "releases",
        format!(
            "lock already gone {}, failed {}",
            v.releases_not_held, v.releases_failed
        ),
    );
    row(
        "leftover lock keys",
        format!(
            "{} at exit, {} after their time + 1 s, {} without TTL",
            r.leftover_at_exit,
            r.leftover_keys.len(),
            r.keys_without_ttl
        ),
    );
    for key in &r.leftover_keys {
        row("left behind", key.clone());
    }
    for failure in &r.worker_failures {
        row("worker failure", failure.clone());
    }
    for message in &r.error_messages {
        row("error seen", message.clone());
    }
    for example in &v.examples {
        row("violation", example.clone());
    }
    row(
        "verdict",
        if r.passed() { "UPHELD" } else { "VIOLATED" }.to_string(),
    );
    out
}

/// One JSON object on one line.
pub fn json(r: &Report) -> String {
    let v = &r.verdict;
    let faults = r
        .faults
        .iter()
        .map(|(kind, n)| format!("\"{}\":{n}", json_key(*kind)))
        .collect::<Vec<_>>()
        .join(",");
    let strings = |items: &[String]| {
        items
            .iter()
            .map(|s| format!("\"{}\"", escape(s)))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        concat!(
            "{{\"mode\":\"{}\",\"seed\":{},\"seconds\":{},\"processes\":{},\"tasks\":{},",
            "\"keys\":{},\"ttl_ms\":{},\"acquisitions\":{},{},\"faults\":{{{}}},",
            "\"faults_total\":{},\"lost_signals\":{},\"permit_overflows\":{},",
            "\"min_hold_violations\":{},\"watch_violations\":{},",
            "\"expired\":{},\"overran\":{},\"unsafe_overlaps\":{},\"overrun_overlaps\":{},",
            "\"overrun_fenced\":{},\"overrun_refused\":{},\"fence_violations\":{},",
            "\"store_violations\":{},\"writes_accepted\":{},\"stale_writes_refused\":{},",
            "\"guarded_accepted\":{},\"guarded_refused\":{},\"guarded_stale_refused\":{},",
            "\"guarded_violations\":{},\"guarded_after_rival\":{},",
            "\"asks\":{},\"asks_nobody\":{},\"asks_failed\":{},\"asks_heard\":{},",
            "\"ask_violations\":{},",
            "\"not_obtained\":{},\"transient_errors\":{},\"other_errors\":{},\"no_fence\":{},",
            "\"releases_not_held\":{},\"releases_failed\":{},\"leftover_at_exit\":{},",
            "\"leftover_after_ttl\":{},\"keys_without_ttl\":{},\"broken_by_rivals\":{},",
            "\"leftover_keys\":[{}],\"worker_failures\":[{}],",
            "\"errors\":[{}],\"violations\":[{}],\"passed\":{}}}"
        ),
        r.mode.name(),
        r.seed,
        r.args.seconds,
        r.args.processes,
        r.args.tasks,
        r.args.keys,
        r.args.ttl_ms,
        v.sections,
        (Holder::ALL.iter().zip(v.by_holder))
            .map(|(holder, n)| format!("\"{}\":{n}", holder.name()))
            .collect::<Vec<_>>()
            .join(","),
        faults,
        r.faults.iter().map(|f| f.1).sum::<usize>(),
        v.lost,
        v.permit_overflows,
        v.min_hold_violations,
        v.watch_violations,
        v.expired,
        v.overran,
        v.unsafe_overlaps,
        v.overrun_overlaps,
        v.overrun_fenced,
        v.overrun_refused,
        v.fence_violations,
        v.store_violations,
        v.writes_accepted,
        v.stale_writes_refused,
        v.guarded_accepted,
        v.guarded_refused,
        v.guarded_stale_refused,
        v.guarded_violations,
        v.guarded_after_rival,
        v.asks[0],
        v.asks[1],
        v.asks[2],
        v.heard,
        v.ask_violations,
        r.not_obtained,
        r.transient_errors,
        r.other_errors,
        r.no_fence,
        v.releases_not_held,
        v.releases_failed,
        r.leftover_at_exit,
        r.leftover_keys.len(),
        r.keys_without_ttl,
        v.broken_by_rivals(),
        strings(&r.leftover_keys),
        strings(&r.worker_failures),
        strings(&r.error_messages),
        strings(&v.examples),
        r.passed()
    )
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\u000ad");
    }
}
