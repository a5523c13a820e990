//! `redmutex doctor`: whether the servers can hold locks safely.

use std::time::Duration;

use clap::Args;
use redmutex::{check::Check, check::Finding, check::Level, connection::Connection, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::describe::{json_string, printable};
use crate::exit::{self, Failure};
use crate::output::{self, outln};
use crate::{reach, redact};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print one JSON object: fit, and every finding (node, check, level, detail).
    #[arg(long)]
    json: bool,
}

impl Connects for DoctorArgs {
    fn check(&self, _checks: &Checks<'_>) -> Result<(), Failure> {
        output::check_stdout_open(output::ANSWER_LOST)
    }

    /// Not at all: doctor reports a server that does not answer as a finding rather than
    /// waiting for it, and checks each node, not a quorum.
    fn wait_redis(&self, _wait_redis: Duration) -> Option<Duration> {
        None
    }

    /// `doctor --json` when the one server could not even be connected to: the finding,
    /// with `fit` unknown (null), before the error itself (exit 69).
    fn unreached(&self, urls: &[String], failure: &Failure) -> Result<(), Failure> {
        if !self.json {
            return Ok(());
        }
        let node = urls
            .first()
            .map_or(String::new(), |_| redact::node_name(urls, 0));
        outln!(
            "{{\"fit\":null,\"findings\":[{{\"node\":{},\"check\":\"{}\",\"level\":\"{}\",\"detail\":{}}}]}}",
            json_string(&node),
            Check::Reachable.name(),
            Level::Unknown.name(),
            json_string(&redact::scrub(&failure.message, urls))
        )
    }
}

/// Checks the servers and prints what it found: exit 1 when they are unfit for locks (an
/// evicting policy), 69 when no node could be reached, 0 otherwise (warnings and checks
/// that could not be made do not fail it).
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: DoctorArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let urls = session.urls;
    let mut report = locker.check_server().await;
    // Node by node; on Redlock the probe lock is about all nodes at once, and comes last.
    let redlock = urls.len() > 1;
    report.findings.sort_by_key(|f| match (redlock, f.check) {
        (true, Check::Permissions) => usize::MAX,
        _ => f.node,
    });
    let scope = |f: &Finding| match (redlock, f.check) {
        (true, Check::Permissions) => "all nodes".to_owned(),
        _ => redact::node_name(urls, f.node),
    };
    let enough = answered(&report, urls);
    if args.json {
        let findings: Vec<String> = report
            .findings
            .iter()
            .map(|f| {
                format!(
                    "{{\"node\":{},\"check\":\"{}\",\"level\":\"{}\",\"detail\":{}}}",
                    json_string(&scope(f)),
                    f.check.name(),
                    f.level.name(),
                    json_string(&redact::name_nodes(&f.detail, urls))
                )
            })
            .collect();
        // Fit or not only when enough nodes answered: unknown is neither.
        let fit = match enough {
            true => report.is_fit().to_string(),
            false if report.is_fit() => "null".to_owned(),
            false => "false".to_owned(),
        };
        outln!("{{\"fit\":{fit},\"findings\":[{}]}}", findings.join(","))?;
    } else {
        let mut last_scope = String::new();
        for finding in &report.findings {
            if scope(finding) != last_scope {
                last_scope = scope(finding);
                outln!("{last_scope}")?;
            }
            outln!("  {}", finding_line(finding, urls))?;
        }
        outln!("{}", verdict(&report, enough))?;
    }
    Ok(match (report.is_fit(), enough) {
        (false, _) => 1,
        (true, false) => exit::UNAVAILABLE,
        (true, true) => 0,
    })
}

/// Whether enough nodes answered for a verdict: one server, or a quorum of Redlock's (the
/// locks need one; an evicting node found among fewer is still unfit).
fn answered(report: &redmutex::check::ServerCheck, urls: &[String]) -> bool {
    let unreached = (report.findings.iter())
        .filter(|f| f.check == Check::Reachable && f.level == Level::Unknown)
        .count();
    let reached = urls.len().max(1).saturating_sub(unreached);
    report.reached_any() && reached >= reach::majority(urls.len().max(1))
}

/// `warning  appendfsync       everysec: …`: one finding of `doctor`, escaped.
pub fn finding_line(finding: &Finding, urls: &[String]) -> String {
    let detail = printable(&redact::name_nodes(&finding.detail, urls));
    let (level, check) = (finding.level.name(), finding.check.name());
    format!("{level:<8} {check:<17} {detail}")
}

/// The last line of `doctor`'s text output; `answered`: enough nodes answered for a
/// verdict (see `answered`).
pub fn verdict(report: &redmutex::check::ServerCheck, answered: bool) -> String {
    let count = |level| report.at(level).count();
    let (unsafe_, warnings, unknown) = (
        count(Level::Unsafe),
        count(Level::Warning),
        count(Level::Unknown),
    );
    let head = match (unsafe_, answered, report.reached_any()) {
        (0, false, false) => "not checked: no node could be reached".to_owned(),
        (0, false, true) => "not checked: too few nodes answered for a quorum".to_owned(),
        (0, true, _) => "fit for locks".to_owned(),
        (n, _, _) => format!("NOT fit for locks: {n} unsafe finding(s)"),
    };
    format!("{head}; {warnings} warning(s), {unknown} could not be checked")
}
