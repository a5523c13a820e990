//! `redmutex inspect`: whether a key is locked, for how long, and by whom.

use clap::Args;
use redmutex::{
    connection::Connection, state::ListedLock, state::LockInfo, state::LockKind, Locker,
};

use crate::connect::{Checks, Connects, Session};
use crate::describe::{self, json_string, printable};
use crate::exit::Failure;
use crate::output::{self, outln};
use crate::{duration, reach, redact};

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The key to look at.
    #[arg(value_name = "KEY")]
    key: String,

    /// Print one JSON object: key, held, ttl_ms, metadata.
    #[arg(long)]
    json: bool,
}

impl Connects for InspectArgs {
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        output::check_stdout_open(output::ANSWER_LOST)?;
        checks.keys(std::slice::from_ref(&self.key), None)
    }
}

/// What holds a key. Where Redis cannot say (a Redlock key whose nodes that did not answer
/// could complete a quorum, a server that does not answer), it asks again, as `wait` and
/// `watch` do, until `--wait-redis` has passed.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: InspectArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let urls = session.urls;
    let mut outage = reach::Outage::new(session.wait_redis);
    let info = loop {
        match locker.inspect(&args.key).await {
            Ok(info) => break info,
            Err(e) => outage.ask_again(&e, urls).await?,
        }
    };
    let listed = described(locker, &args.key, &info).await;
    match args.json {
        true => outln!("{}", json_answer(&info, listed.as_ref(), urls))?,
        false => print_text(&info, listed.as_ref(), urls)?,
    }
    Ok(0)
}

/// `inspect --json`'s object: the key's view, what the listing knows of it, and on
/// Redlock every node's own view.
fn json_answer(info: &LockInfo, listed: Option<&ListedLock>, urls: &[String]) -> String {
    let mut line = json_view(info, awaited(info, listed));
    add_listed_fields(&mut line, listed);
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
    line
}

/// `inspect`'s text: a line for the key, then on Redlock a line for each node's view.
fn print_text(
    info: &LockInfo,
    listed: Option<&ListedLock>,
    urls: &[String],
) -> Result<(), Failure> {
    let answered = info.nodes.iter().filter(|n| n.info.is_ok()).count();
    let needed = reach::majority(info.nodes.len());
    if !info.nodes.is_empty() && !info.held && answered < needed {
        // Too few nodes answered to say that anyone could take it.
        outln!(
            "{}: unknown, only {answered} of {} nodes answered ({needed} needed)",
            printable(&info.key_lossy()),
            info.nodes.len()
        )?;
    } else if let Some(listed) =
        listed.filter(|listed| info.foreign && listed.kind != LockKind::Foreign)
    {
        // A semaphore's or readers' key is not a lock's: say what holds it instead of
        // calling it foreign.
        let holding = describe::holding(listed);
        outln!("{}: {holding}", printable(&info.key_lossy()))?;
    } else {
        let waiters = listed.and_then(|listed| listed.waiters);
        let view = text_view(info, waiters, awaited(info, listed));
        outln!("{}: {view}", printable(&info.key_lossy()))?;
    }
    for node in &info.nodes {
        let view = match &node.info {
            Ok(view) => text_view(view, None, view.awaited),
            Err(e) => format!("error: {}", redact::scrub(&e.to_string(), urls)),
        };
        outln!("  {}: {view}", redact::node_name(urls, node.node))?;
    }
    Ok(())
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
