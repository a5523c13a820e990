//! Honest answers when Redis cannot be reached. Unknown is never an answer: without a
//! server — or, over several nodes, without a quorum of them — redmutex waits a bounded
//! time for them, saying on stderr what it waits for, then exits 69. It never waits in
//! silence, and never prints "free", "none" or "held" for what nobody can know.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redmutex::{error::QuorumFailure, FailedTry, Locker, TryFailure};
use tokio::time::Instant;

use crate::exit::{self, Failure};
use crate::redact::name_nodes;

/// How often Redis that does not answer is asked again while it is waited for.
pub const ASK_EVERY: Duration = Duration::from_millis(500);

/// Waits until a quorum of the locker's nodes answer, at most `within`; says so on stderr
/// when they do not at once. Exit 69 when they do not in time.
pub async fn quorum_answers(
    locker: &Locker<ConnectionManager>,
    urls: &[String],
    within: Duration,
) -> Result<(), Failure> {
    let give_up = Instant::now() + within;
    let mut said = false;
    let mut state: Option<Round> = None;
    loop {
        // A silent node would hold a round past `within`: the wait ends when it said.
        let left = give_up.saturating_duration_since(Instant::now());
        let patience = match within.is_zero() {
            true => redmutex::connection::CONNECT_TIMEOUT,
            false => redmutex::connection::CONNECT_TIMEOUT.min(left),
        };
        let Err(round) = answering(locker, urls, patience).await else {
            return Ok(());
        };
        // A round cut short by the end of the wait (the last one often has next to no
        // time) is no evidence that nodes which answered before have gone silent: the
        // state said is the fuller round's.
        let cut_short = patience < redmutex::connection::CONNECT_TIMEOUT;
        if !(cut_short && state.as_ref().is_some_and(|last| last.up > round.up)) {
            state = Some(round);
        }
        let state = state.as_ref().map_or("", |s| s.said.as_str());
        if Instant::now() >= give_up {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!("no quorum of Redis nodes answered within {within:?}: {state}"),
            ));
        }
        if !said {
            crate::output::say(&format!(
                "waiting up to {within:?} for a quorum of Redis nodes: {state}"
            ));
            said = true;
        }
        tokio::time::sleep(ASK_EVERY.min(give_up.saturating_duration_since(Instant::now()))).await;
    }
}

/// How many of `nodes` Redlock nodes make a quorum: a strict majority (docs/SAFETY.md).
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// A round of PINGs short of a quorum: how many nodes answered, and what to say about it.
struct Round {
    up: usize,
    said: String,
}

/// Whether Redis answers — one node, or a quorum of the nodes — a PING within a second;
/// otherwise which nodes do not, and why.
pub async fn probe<C: redmutex::connection::Connection>(
    locker: &Locker<C>,
    urls: &[String],
) -> Result<(), String> {
    answering(locker, urls, PROBE_PATIENCE)
        .await
        .map_err(|round| round.said)
}

/// Whether one node, or a quorum of the nodes, answers a PING within `patience`;
/// otherwise how many do, how many are needed, and why the others do not.
async fn answering<C: redmutex::connection::Connection>(
    locker: &Locker<C>,
    urls: &[String],
    patience: Duration,
) -> Result<(), Round> {
    let answers = ping_all(locker, patience).await;
    let needed = majority(answers.len());
    let up = answers.iter().filter(|a| a.is_ok()).count();
    match up >= needed {
        true => Ok(()),
        false => Err(Round {
            up,
            said: format!(
                "{up} of {} nodes answer, {needed} needed ({})",
                answers.len(),
                unanswered(&answers, urls)
            ),
        }),
    }
}

/// How long [`probe`] waits for each node's PING.
const PROBE_PATIENCE: Duration = Duration::from_secs(1);

/// Every node's answer to a PING, given `patience` to come.
async fn ping_all<C: redmutex::connection::Connection>(
    locker: &Locker<C>,
    patience: Duration,
) -> Vec<Result<(), String>> {
    let pings = locker.nodes().iter().map(|conn| {
        let mut conn = conn.clone();
        async move {
            let ping = redis::cmd("PING");
            let ping = ping.query_async::<String>(&mut conn);
            match tokio::time::timeout(patience, ping).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer".to_string()),
            }
        }
    });
    futures_util::future::join_all(pings).await
}

fn unanswered(answers: &[Result<(), String>], urls: &[String]) -> String {
    let failures: Vec<String> = (answers.iter().enumerate())
        .filter_map(|(node, answer)| {
            let error = answer.as_ref().err()?;
            let url = urls
                .get(node)
                .map(|u| crate::redact::redact(u))
                .unwrap_or_default();
            Some(format!("{url}: {error}"))
        })
        .collect();
    failures.join("; ")
}

/// Whether the latest failed tries of an acquire found Redis unreachable — one node's
/// transient error, or too few nodes of a quorum answering — and since when.
#[derive(Clone, Default, Debug)]
pub struct Reach {
    state: Arc<Mutex<Option<Unreachable>>>,
    /// How long it may last before the acquire gives up (`--wait-redis`).
    within: Duration,
}

#[derive(Debug)]
struct Unreachable {
    since: Instant,
    why: String,
}

impl Reach {
    pub fn new(within: Duration) -> Reach {
        Reach {
            state: Arc::default(),
            within,
        }
    }

    /// Takes in a failed try (the acquire's observer calls it).
    pub fn observe(&self, failed: &FailedTry<'_>) {
        let why = match failed.reason {
            TryFailure::Redis(e) => Some(e.to_string()),
            TryFailure::NoQuorum(failure) if too_few_answer(failure) => Some(failure.to_string()),
            _ => None,
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match why {
            Some(why) => {
                let since = state.as_ref().map_or_else(Instant::now, |u| u.since);
                *state = Some(Unreachable { since, why });
            }
            None => *state = None,
        }
    }

    /// Resolves once Redis has been unreachable for `within` without a break, saying on
    /// stderr when it first finds it so; the failure to exit with.
    pub async fn lost_for(&self, urls: &[String]) -> Failure {
        let within = self.within;
        let mut said = false;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let Some(unreachable) = state.as_ref() else {
                said = false;
                continue;
            };
            let why = name_nodes(&unreachable.why, urls);
            if unreachable.since.elapsed() >= within {
                return Failure::new(
                    exit::UNAVAILABLE,
                    format!("Redis did not answer for {within:?}: {why}"),
                );
            }
            if !said {
                say_not_answering(within, &why);
                said = true;
            }
        }
    }
}

/// Says on stderr that Redis stopped answering and how long it is waited for.
fn say_not_answering(within: Duration, why: &str) {
    crate::output::say(&format!(
        "Redis does not answer; waiting up to {within:?} for it: {why}"
    ));
}

/// A quorum failure where fewer nodes answered than make a quorum (rather than nodes that
/// answered "held").
fn too_few_answer(failure: &QuorumFailure) -> bool {
    let unreachable = (failure.failures.iter())
        .filter(|f| f.error.is_unreachable())
        .count();
    failure.nodes.saturating_sub(unreachable) < failure.needed
}

/// Awaits `wait` — an acquire fed back into `reach` — unless Redis stays unreachable for
/// as long as `reach` allows first: then the failure to exit with (69). The acquire is dropped,
/// which
/// cleans up whatever its tries may have left.
pub async fn bounded<T>(
    reach: &Reach,
    urls: &[String],
    wait: impl std::future::Future<Output = T>,
) -> Result<T, Failure> {
    tokio::select! {
        out = wait => Ok(out),
        failure = reach.lost_for(urls) => Err(failure),
    }
}

/// A long-running read (`watch`, `leader --watch`) through outages of Redis: a read that
/// fails starts (or continues) an outage, said once on stderr; one that lasts `within`
/// (`--wait-redis`) without an answer ends the command with its last failure (69), rather
/// than watching on blind.
#[derive(Debug)]
pub struct Outage {
    within: Duration,
    /// When the current outage began; `None` while Redis answers.
    since: Option<Instant>,
}

impl Outage {
    pub fn new(within: Duration) -> Outage {
        Outage {
            within,
            since: None,
        }
    }

    /// Redis answered: any outage is over.
    pub fn answered(&mut self) {
        self.since = None;
    }

    /// A read failed with `failure`: `Ok` while the outage is shorter than `within`, the
    /// failure to exit with once it is not. A failure that waiting will not mend
    /// (`transient` false: a permission, a wrong password) ends it at once.
    pub fn failed(&mut self, failure: Failure, transient: bool) -> Result<(), Failure> {
        if !transient {
            return Err(failure);
        }
        let within = self.within;
        let Some(since) = self.since else {
            self.since = Some(Instant::now());
            say_not_answering(within, &failure.message);
            return Ok(());
        };
        if since.elapsed() < within {
            return Ok(());
        }
        Err(Failure::new(
            failure.code,
            format!("Redis did not answer for {within:?}: {}", failure.message),
        ))
    }

    /// A read failed with `e`: waits a moment before it is asked again (`Ok`), or ends
    /// the command as [`failed`](Outage::failed) does. The one rule of every command that
    /// reads what holds a key (`inspect`, `list`, `wait`, `watch`): what Redis cannot
    /// tell — no server, no quorum, or a quorum whose silent nodes could change the answer
    /// — is asked again until `--wait-redis` has passed, then exit 69.
    ///
    /// # Cancel safety
    /// Cancel safe: it only sleeps.
    pub async fn ask_again(&mut self, e: &redmutex::Error, urls: &[String]) -> Result<(), Failure> {
        self.failed(Failure::from_lock_error(e, urls), e.is_transient())?;
        tokio::time::sleep(ASK_EVERY).await;
        Ok(())
    }

    /// When the current outage ends the command, if there is one.
    pub fn deadline(&self) -> Option<Instant> {
        self.since.map(|since| since + self.within)
    }
}
