//! The lock-management commands: acquire, release, refresh, inspect, wait, doctor.

use std::future::IntoFuture;
use std::time::Duration;

use redmutex::{
    Check, Connection, Error, Finding, Level, ListedLock, Lock, LockInfo, LockKind, Locker, Token,
};

use crate::describe::{self, json_string, printable};
use crate::exit::{self, Failure};
use crate::output::outln;
use crate::waiting;
use crate::{
    duration, redact, AcquireArgs, DoctorArgs, InspectArgs, RefreshArgs, ReleaseArgs, WaitArgs,
};

/// Takes the lock, prints its token and leaves it in Redis. If the token cannot be
/// written (a closed pipe), the lock is released again: nobody could release it otherwise.
pub async fn acquire<C: Connection>(
    locker: &Locker<C>,
    args: AcquireArgs,
    urls: &[String],
) -> Result<u8, Failure> {
    let what = "redmutex-acquire";
    let failed = |e: redmutex::Error| Failure::from_lock_error(&e, urls);
    let (progress, first) = (args.lock.progress.as_ref(), &args.keys[0]);
    if let Some(limit) = args.lock.limit {
        let acquire = (args
            .lock
            .acquire_permits(locker, &args.keys, limit, what, false))
        .map_err(failed)?;
        let waited = waiting::show(locker, progress, first, acquire.into_future());
        let waited = crate::reach::bounded(&args.lock.reach, urls, waited).await?;
        return hand_over(waited.map_err(failed)?).await;
    }
    match args.lock.fair {
        true => {
            let acquire =
                (args.lock.acquire_fair(locker, &args.keys, what, false)).map_err(failed)?;
            let waited = waiting::show(locker, progress, first, acquire.into_future());
            let waited = crate::reach::bounded(&args.lock.reach, urls, waited).await?;
            hand_over(waited.map_err(failed)?).await
        }
        false => {
            let acquire = args.lock.acquire(locker, &args.keys, what, false);
            let waited = waiting::show(locker, progress, first, acquire.into_future());
            let waited = crate::reach::bounded(&args.lock.reach, urls, waited).await?;
            hand_over(waited.map_err(failed)?).await
        }
    }
}

/// Prints the token of `lock` and leaves it in Redis.
async fn hand_over<C: Connection, P>(lock: Lock<C, P>) -> Result<u8, Failure> {
    let token = lock.token();
    if let Err(mut failure) = outln!("{token}") {
        let released = match lock.release().await {
            Ok(()) => "the lock was released",
            Err(e) if e.is_not_held() => "the lock is gone already",
            Err(_) => "the lock could not be released and expires by its TTL",
        };
        failure.message = format!(
            "cannot hand over the token ({}); {released}",
            failure.message
        );
        return Err(failure);
    }
    let _ = lock.detach();
    Ok(0)
}

pub async fn release<C: Connection>(
    locker: &Locker<C>,
    args: ReleaseArgs,
    urls: &[String],
) -> Result<u8, Failure> {
    if args.ask {
        return crate::ops::ask_release(locker, &args.keys, urls).await;
    }
    let Some(token) = args.token.as_deref() else {
        // (clap requires a token without --force or --ask.)
        return crate::ops::force_release(locker, &args.keys, args.now, urls).await;
    };
    let token = parse_token(token)?;
    match locker.release_with_token(&args.keys, &token).await {
        Ok(()) => Ok(0),
        Err(e) if e.is_not_held() => match semaphore_of(locker, &args.keys).await {
            Some(semaphore) => (semaphore.release_with_token(&token).await)
                .map(|()| 0)
                .map_err(|e| not_held_or(&e, urls)),
            None => Err(not_held_or(&e, urls)),
        },
        Err(e) => Err(not_held_or(&e, urls)),
    }
}

/// The semaphore at `keys` when they are one key that holds one (`acquire --limit`): a
/// token that no lock of the key holds may hold its permits. Looked for only then, so
/// that a lock's release and refresh cost one request as before.
async fn semaphore_of<C: Connection>(
    locker: &Locker<C>,
    keys: &[String],
) -> Option<redmutex::Semaphore<C>> {
    let [key] = keys else {
        return None;
    };
    let listed = locker.describe(key).await.ok()??;
    // Giving back or renewing permits needs no limit; the holders' own, where known.
    let limit = listed.permits.map_or(1, |(_, limit)| limit.max(1));
    match listed.kind {
        LockKind::Semaphore => locker.semaphore(key, limit).ok(),
        _ => None,
    }
}

pub async fn refresh<C: Connection>(
    locker: &Locker<C>,
    args: RefreshArgs,
    urls: &[String],
) -> Result<u8, Failure> {
    let token = parse_token(&args.token)?;
    match locker
        .refresh_with_token(&args.keys, &token, args.ttl)
        .await
    {
        Ok(()) => Ok(0),
        Err(e) if e.is_not_held() => match semaphore_of(locker, &args.keys).await {
            Some(semaphore) => (semaphore.refresh_with_token(&token, args.ttl).await)
                .map(|()| 0)
                .map_err(|e| not_held_or(&e, urls)),
            None => Err(not_held_or(&e, urls)),
        },
        Err(e) => Err(not_held_or(&e, urls)),
    }
}

/// What holds a key. Where Redis cannot say (a Redlock key whose nodes that did not answer
/// could complete a quorum, a server that does not answer), it asks again, as `wait` and
/// `watch` do, until `--wait-redis` has passed.
pub async fn inspect<C: Connection>(
    locker: &Locker<C>,
    args: InspectArgs,
    urls: &[String],
    wait_redis: Duration,
) -> Result<u8, Failure> {
    let mut outage = crate::reach::Outage::new(wait_redis);
    let info = loop {
        match locker.inspect(&args.key).await {
            Ok(info) => break info,
            Err(e) => {
                outage.failed(Failure::from_lock_error(&e, urls), e.is_transient())?;
                tokio::time::sleep(crate::reach::ASK_EVERY).await;
            }
        }
    };
    let listed = described(locker, &args.key, &info).await;
    if args.json {
        let mut line = json_view(&info, awaited(&info, listed.as_ref()));
        add_listed_fields(&mut line, listed.as_ref());
        if !info.nodes.is_empty() {
            // Redlock: every node's own view, with its (redacted) address.
            line.pop();
            let nodes: Vec<String> = info
                .nodes
                .iter()
                .map(|n| {
                    let url = json_string(&redact::node_name(urls, n.node));
                    match &n.info {
                        Ok(view) => {
                            let mut obj = json_view(view, view.awaited);
                            obj.insert_str(1, &format!("\"url\":{url},"));
                            obj
                        }
                        Err(e) => format!(
                            "{{\"url\":{url},\"error\":{}}}",
                            json_string(&redact::scrub(&e.to_string(), urls))
                        ),
                    }
                })
                .collect();
            line.push_str(&format!(",\"nodes\":[{}]}}", nodes.join(",")));
        }
        outln!("{line}")?;
        return Ok(0);
    }
    let answered = info.nodes.iter().filter(|n| n.info.is_ok()).count();
    let needed = majority(info.nodes.len());
    if !info.nodes.is_empty() && !info.held && answered < needed {
        // Too few nodes answered to say that anyone could take it.
        outln!(
            "{}: unknown, only {answered} of {} nodes answered ({needed} needed)",
            printable(&info.key_lossy()),
            info.nodes.len()
        )?;
    } else if let Some(listed) = (listed.as_ref())
        .filter(|listed| info.foreign && listed.kind != redmutex::LockKind::Foreign)
    {
        // A semaphore's or readers' key is not a lock's: say what holds it instead of
        // calling it foreign.
        let holding = describe::holding(listed);
        outln!("{}: {holding}", printable(&info.key_lossy()))?;
    } else {
        let waiters = listed.as_ref().and_then(|listed| listed.waiters);
        let view = text_view(&info, waiters, awaited(&info, listed.as_ref()));
        outln!("{}: {view}", printable(&info.key_lossy()))?;
    }
    for node in &info.nodes {
        let view = match &node.info {
            Ok(view) => text_view(view, None, view.awaited),
            Err(e) => format!("error: {}", redact::scrub(&e.to_string(), urls)),
        };
        outln!("  {}: {view}", redact::node_name(urls, node.node))?;
    }
    Ok(0)
}

/// Waits until the key is free without taking it: 0 once free, 75 when the timeout passed
/// first (the holder keeps it), the usual codes for Redis trouble.
pub async fn wait<C: Connection>(
    locker: &Locker<C>,
    args: WaitArgs,
    urls: &[String],
    wait_redis: Duration,
) -> Result<u8, Failure> {
    let timeout = args.timeout.unwrap_or(Duration::MAX);
    let until = tokio::time::Instant::now().checked_add(timeout);
    let mut outage = crate::reach::Outage::new(wait_redis);
    // In spans of at most --wait-redis: a Redis (or a quorum) that stops answering
    // mid-wait ends the span with that error; the wait goes on through an outage shorter
    // than --wait-redis (said on stderr), and ends with 69 after a longer one.
    loop {
        let left = until.map_or(Duration::MAX, |u| {
            u.saturating_duration_since(tokio::time::Instant::now())
        });
        let span = left.min(wait_redis);
        let waited = locker.wait_released(&args.key, span).await;
        if waited.is_ok() {
            outage.answered();
        }
        match waited {
            Ok(true) => return Ok(0),
            Ok(false) if span < left => continue,
            Err(e) if !left.is_zero() => {
                outage.failed(Failure::from_lock_error(&e, urls), e.is_transient())?;
                let pause = crate::reach::ASK_EVERY.min(left);
                tokio::time::sleep(pause).await;
                continue;
            }
            Ok(false) => {
                return Err(Failure::new(
                    exit::NOT_OBTAINED,
                    format!(
                        "{}: still held after {}",
                        printable(&args.key),
                        duration::format(timeout)
                    ),
                ))
            }
            Err(e) => return Err(Failure::from_lock_error(&e, urls)),
        }
    }
}

/// Checks the servers and prints what it found: exit 1 when they are unfit for locks (an
/// evicting policy), 69 when no node could be reached, 0 otherwise (warnings and checks
/// that could not be made do not fail it).
pub async fn doctor<C: Connection>(
    locker: &Locker<C>,
    args: DoctorArgs,
    urls: &[String],
) -> Result<u8, Failure> {
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

/// How many of `nodes` Redlock nodes make a quorum: a strict majority (docs/SAFETY.md).
fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Whether enough nodes answered for a verdict: one server, or a quorum of Redlock's (the
/// locks need one; an evicting node found among fewer is still unfit).
fn answered(report: &redmutex::ServerCheck, urls: &[String]) -> bool {
    let unreached = (report.findings.iter())
        .filter(|f| f.check == Check::Reachable && f.level == Level::Unknown)
        .count();
    let reached = urls.len().max(1).saturating_sub(unreached);
    report.reached_any() && reached >= majority(urls.len().max(1))
}

/// `warning  appendfsync       everysec: …`: one finding of `doctor`, escaped.
pub fn finding_line(finding: &Finding, urls: &[String]) -> String {
    let detail = printable(&redact::name_nodes(&finding.detail, urls));
    let (level, check) = (finding.level.name(), finding.check.name());
    format!("{level:<8} {check:<17} {detail}")
}

/// `doctor --json` when the one server could not even be connected to: the finding, with
/// `fit` unknown (null), before the error itself (exit 69).
pub fn doctor_unreached(
    args: &DoctorArgs,
    urls: &[String],
    failure: &Failure,
) -> Result<(), Failure> {
    if !args.json {
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

/// The last line of `doctor`'s text output; `answered`: enough nodes answered for a
/// verdict (see `answered`).
pub fn verdict(report: &redmutex::ServerCheck, answered: bool) -> String {
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

/// What redmutex primitive holds a key `inspect` found held, as a listing shows it — its
/// kind, holders and waiters (a semaphore's or readers' key is one the lock's view calls
/// foreign) —, if any. Looked up only for a held key; a failed look-up leaves the lock's
/// view alone.
async fn described<C: Connection>(
    locker: &Locker<C>,
    key: &str,
    info: &LockInfo,
) -> Option<ListedLock> {
    if !info.held {
        return None;
    }
    let listed = locker.describe(key).await.ok()??;
    (listed.kind != LockKind::Foreign).then_some(listed)
}

/// Adds what the listing knows to `inspect --json`'s object: `kind` (null when free or
/// foreign), `holder_count`, `waiters` (null where the server keeps no count) and
/// `permits`.
fn add_listed_fields(object: &mut String, listed: Option<&ListedLock>) {
    let kind = listed.map_or("null".to_owned(), |l| format!("\"{}\"", l.kind.name()));
    let holders = listed.map_or(0, |l| l.holder_count);
    let waiters = (listed.and_then(|l| l.waiters)).map_or("null".to_owned(), |n| n.to_string());
    let permits = (listed.and_then(|l| l.permits)).map_or("null".to_owned(), |(used, limit)| {
        format!("{{\"used\":{used},\"limit\":{limit}}}")
    });
    let forced = listed.map_or(0, |l| l.forced);
    object.pop();
    object.push_str(&format!(
        ",\"kind\":{kind},\"holder_count\":{holders},\"waiters\":{waiters},\"permits\":{permits},\"forced\":{forced}}}"
    ));
}

/// Whether someone waits to take the key: where the server counts its waiters, as the
/// listing says (the holder's flag outlives waiters that left); otherwise the flag.
fn awaited(info: &LockInfo, listed: Option<&ListedLock>) -> bool {
    match listed {
        Some(listed) if listed.waiters.is_some() => listed.awaited,
        Some(listed) => info.awaited || listed.awaited,
        None => info.awaited,
    }
}

/// `held, ttl 29.5s, fence 42, 2 waiting, metadata: host=a` (`awaited` where waiters only
/// asked to hear of the release: no count is kept), `free, last fence 42` or `free`.
fn text_view(info: &LockInfo, waiters: Option<u32>, awaited: bool) -> String {
    if !info.held {
        return match info.fence {
            Some(fence) => format!("free, last fence {fence}"),
            None => "free".to_owned(),
        };
    }
    let mut line = "held".to_owned();
    // Redlock: no owner has it on a quorum, but the nodes held (by several owners, or
    // foreign data) leave no quorum free: it frees as their keys expire.
    let split_until = (info.nodes.iter())
        .filter_map(|n| n.info.as_ref().ok()?.ttl)
        .max();
    match (info.ttl, split_until) {
        (Some(ttl), _) => line.push_str(&format!(", ttl {}", duration::human(ttl))),
        (None, Some(until)) => line.push_str(&format!(
            ", split: no owner on a quorum of nodes, free within {}",
            duration::human(until)
        )),
        (None, None) => line.push_str(", no expiry"),
    }
    if let Some(fence) = info.fence {
        line.push_str(&format!(", fence {fence}"));
    }
    if info.foreign {
        line.push_str(", not a redmutex lock");
    }
    if info.forced {
        line.push_str(", released by force (a tombstone until its ttl ends)");
    }
    match waiters {
        Some(n) if n > 0 => line.push_str(&format!(", {n} waiting")),
        _ if awaited => line.push_str(", awaited"),
        _ => {}
    }
    if let Some(metadata) = &info.metadata {
        line.push_str(&format!(", metadata: {}", printable(metadata)));
    }
    line
}

/// `{"key":…,"held":…,"ttl_ms":…,"awaited":…,"fence":…,"metadata":…}`; `fence` is the
/// latest one handed out, held or not; `awaited` as [`awaited`] says.
fn json_view(info: &LockInfo, awaited: bool) -> String {
    format!(
        "{{\"key\":{},\"held\":{},\"ttl_ms\":{},\"awaited\":{},\"fence\":{},\"metadata\":{}}}",
        json_string(&info.key_lossy()),
        info.held,
        info.ttl
            .map_or("null".to_owned(), |t| t.as_millis().to_string()),
        awaited,
        info.fence.map_or("null".to_owned(), |f| f.to_string()),
        info.metadata
            .as_deref()
            .map_or("null".to_owned(), json_string),
    )
}

fn parse_token(text: &str) -> Result<Token, Failure> {
    text.parse()
        .map_err(|e: Error| Failure::usage(e.to_string()))
}

fn not_held_or(e: &Error, urls: &[String]) -> Failure {
    if e.is_not_held() {
        Failure::new(exit::NOT_HELD, "not held")
    } else {
        Failure::from_lock_error(e, urls)
    }
}
