//! Redlock: a quorum of independent masters.
//!
//! Every operation goes to all nodes at once, each request bounded by the node timeout,
//! and counts the answers. Three rules make it the algorithm rather than an imitation:
//!
//! - **Parallel, bounded**: a dead or frozen node costs one node timeout, never the sum.
//! - **Validity**: a lease counts only if a quorum agreed AND time is left once the time
//!   taken and the clock-drift allowance are subtracted (see [`crate::quorum`]); it is
//!   valid until `start + ttl − drift` on this client's monotonic clock.
//! - **Undo**: a failed acquire deletes what it took on every node — also those that did
//!   not answer, where the request may still land — before the next try.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Cmd, RedisError, RedisResult, ScriptInvocation, Value};
use tokio::time::Instant;

use crate::backend::common::{
    keep_ms, release_try, renewal_reply, Attempt, Obtained, Renewal, Renewed, Reply, StateReader,
};
use crate::backend::fan_out::{self, heard, Collected, Collector, StillOut};
use crate::background;
use crate::connection::Connection;
use crate::error::Error;
use crate::quorum::{quorum, NodeError, NodeFailure, QuorumFailure, QuorumSettings};
use crate::scripts::{evalsha, send_notice, Claim, FenceRaise, Obtain, ObtainTry, ScriptConn};
use crate::token::Token;

/// The TTL that sizes node timeouts where no lease is known (inspect, release by token).
const TTL_FOR_TIMEOUTS: Duration = Duration::from_secs(10);

/// The independent masters of a Redlock locker, and how their answers are judged.
pub(crate) struct Quorum<C> {
    conns: Box<[C]>,
    settings: QuorumSettings,
    /// Which nodes have answered this locker at least once (a reply or an error). A
    /// request to a connection still being set up is written only once it is up, by
    /// whichever task is polled first: an acquire's request heard on a task of its own
    /// could then go behind its release. Until every node has answered once, a quorum
    /// does not decide without the others (`wait_for_every_node` for that operation).
    answered_once: Arc<[AtomicBool]>,
}

impl<C: Connection> Quorum<C> {
    pub(crate) fn new(conns: Vec<C>, settings: QuorumSettings) -> Quorum<C> {
        Quorum {
            answered_once: conns.iter().map(|_| AtomicBool::new(false)).collect(),
            conns: conns.into_boxed_slice(),
            settings,
        }
    }

    pub(crate) fn nodes(&self) -> &[C] {
        &self.conns
    }

    pub(crate) fn settings(&self) -> &QuorumSettings {
        &self.settings
    }

    pub(crate) fn needed(&self) -> usize {
        quorum(self.conns.len())
    }

    /// Whether a quorum may decide an operation without the slower nodes: the settings
    /// allow it, and every node's connection has answered once (see `answered_once`).
    fn quorum_decides(&self) -> bool {
        self.settings.quorum_decides()
            && (self.answered_once.iter()).all(|node| node.load(Ordering::Relaxed))
    }

    /// Runs `op` on every node at once (given the node's index and connection); each
    /// node's answer is bounded by `timeout`.
    async fn fan_out<T, F, Fut>(&self, timeout: Duration, op: F) -> Vec<Reply<T>>
    where
        F: Fn(usize, C) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        // One timer for the whole fan-out rather than one per node (timers are a measurable
        // part of a Redlock try's client CPU). Nobody agrees: every node is waited for.
        let gathering = Collector::new(self.conns.len(), 0);
        let requests = self.conns.iter().enumerate().map(|(node, conn)| {
            let (request, gathering) = (op(node, conn.clone()), &gathering);
            async move {
                let reply = request.await.map_err(NodeError::Redis);
                self.answered_once[node].store(true, Ordering::Relaxed);
                gathering.record(node, reply, false);
            }
        });
        let gathered = {
            let requests = std::pin::pin!(join_all(requests));
            gathering.gather(requests, timeout).await
        };
        gathering
            .take(gathered, timeout)
            .into_iter()
            .flatten()
            .collect()
    }

    /// Runs `op` on every node at once and returns as soon as a quorum of answers
    /// `agrees`, every node answered, or `timeout` passed. The requests still out are in
    /// the [`StillOut`]: whoever holds it must hear them (see [`fan_out::finish`]).
    async fn fan_out_to_quorum<T, F, Fut>(
        &self,
        timeout: Duration,
        op: F,
        agrees: fn(&T) -> bool,
    ) -> (Arc<Collector<T>>, Collected, StillOut)
    where
        T: Send + 'static,
        F: Fn(usize, C) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
    {
        let gathering = Arc::new(Collector::new(self.conns.len(), self.needed()));
        let requests = self.conns.iter().enumerate().map(|(node, conn)| {
            let (request, gathering) = (op(node, conn.clone()), gathering.clone());
            let answered_once = self.answered_once.clone();
            async move {
                let reply = request.await.map_err(NodeError::Redis);
                answered_once[node].store(true, Ordering::Relaxed);
                let agreed = reply.as_ref().is_ok_and(agrees);
                gathering.record(node, reply, agreed);
            }
        });
        let requests = join_all(requests);
        let mut rest: StillOut = Box::pin(async move {
            requests.await;
        });
        let gathered = gathering.gather(rest.as_mut(), timeout).await;
        (gathering, gathered, rest)
    }

    /// A plain try's one command on every node, decided once a quorum took the claim (a
    /// node still to answer may take it too: the release goes to every node). The
    /// requests still out, if any, come back with their gathering.
    async fn set_everywhere(
        &self,
        cmd: Cmd,
        timeout: Duration,
    ) -> (Vec<Option<Reply<Obtain>>>, Option<LateReplies>) {
        let cmd = Arc::new(cmd);
        let set = |_, mut conn: C| {
            let cmd = cmd.clone();
            async move {
                let reply: Value = cmd.query_async(&mut conn).await?;
                Ok(match reply {
                    Value::Nil => Obtain::Held {
                        index: 0,
                        ttl: None,
                        ahead: None,
                    },
                    _ => Obtain::Obtained { fence: None },
                })
            }
        };
        let taken: fn(&Obtain) -> bool = match self.quorum_decides() {
            true => |obtain| matches!(obtain, Obtain::Obtained { .. }),
            false => |_| false,
        };
        let (gathering, gathered, rest) = self.fan_out_to_quorum(timeout, set, taken).await;
        let replies = gathering.take(gathered, timeout);
        let late = (gathered == Collected::Quorum).then(|| LateReplies {
            late: gathering.out(),
            gathering,
            rest,
        });
        (replies, late)
    }

    /// Counts the nodes that agreed (`judge` says `Ok`), and lists the others.
    fn tally<T>(
        &self,
        replies: impl IntoIterator<Item = (usize, Reply<T>)>,
        elapsed: Duration,
        judge: impl Fn(T) -> Result<(), NodeError>,
    ) -> QuorumFailure {
        let mut failure = QuorumFailure {
            agreed: 0,
            needed: self.needed(),
            nodes: self.conns.len(),
            too_late: false,
            elapsed,
            failures: Vec::new(),
        };
        for (node, reply) in replies {
            match reply.and_then(&judge) {
                Ok(()) => failure.agreed += 1,
                Err(error) => failure.failures.push(NodeFailure { node, error }),
            }
        }
        warn_if_partial(&failure);
        failure
    }

    /// The end of a lease of `ttl` whose requests were sent at `started`, if it leaves a
    /// valid lease (see [`QuorumSettings::validity`]).
    fn valid_until(&self, ttl: Duration, started: Instant, elapsed: Duration) -> Option<Instant> {
        self.settings.validity(ttl, elapsed)?;
        Some(started + ttl - self.settings.drift(ttl))
    }

    /// How long one round of a try waits for the nodes, starting at `from`: the node
    /// timeout for `ttl`, never past the try's end.
    fn round_timeout(&self, ttl: Duration, try_until: Option<Instant>, from: Instant) -> Duration {
        let timeout = self.settings.timeout_for(ttl);
        match try_until {
            Some(until) => timeout.min(until.saturating_duration_since(from)),
            None => timeout,
        }
    }

    pub(crate) async fn try_obtain(
        &self,
        claim: &dyn Claim,
        request: ObtainTry<'_>,
        started: Instant,
        try_until: Option<Instant>,
    ) -> Attempt {
        let ttl = Duration::from_millis(request.terms.ttl_ms);
        let timeout = self.round_timeout(ttl, try_until, started);
        let (replies, late) = self.ask_everywhere(claim, request, timeout).await;
        let answers = || replies.iter().flatten();
        let held = held_key_and_ttl(answers());
        let refused = answers().find_map(|reply| match reply {
            Ok(Obtain::Refused(why)) => Some(why.clone()),
            _ => None,
        });
        // With fences, each node that took the claim answered its own next fence.
        let fences: Vec<Option<u64>> = (replies.iter())
            .map(|reply| match reply {
                Some(Ok(Obtain::Obtained { fence })) => *fence,
                _ => None,
            })
            .collect();
        let mut failure = self.tally(heard(replies), started.elapsed(), |obtain| match obtain {
            Obtain::Obtained { .. } => Ok(()),
            Obtain::Held { .. } | Obtain::Refused(_) => Err(NodeError::Held),
        });
        if failure.agreed >= failure.needed && refused.is_none() {
            let fence = match request.terms.fenced {
                false => Ok(None),
                true => {
                    let raise = FenceRaise {
                        token: &request.terms.token,
                        fence: 0,
                        retention_ms: request.terms.retention_ms,
                    };
                    // A round of its own, with a node timeout of its own: the first may
                    // have used all of its own waiting for a node that never answered (a
                    // stalled minority), which left the raise no time at all — a healthy
                    // quorum then failed every fenced try. Never past the try's end; the
                    // validity left is checked once it is done.
                    let timeout = self.round_timeout(ttl, try_until, Instant::now());
                    let durable = self.durable_fence(claim, raise, &fences, timeout).await;
                    durable.map(Some)
                }
            };
            if let Some(obtained) = self.obtained(fence, &mut failure, ttl, started) {
                if let Some(late) = late {
                    let wait = timeout.saturating_sub(started.elapsed());
                    let name = lock_name(claim);
                    late.hear_in_background(name, wait, self.needed(), self.conns.len());
                }
                return obtained;
            }
        }
        if let Some(late) = late {
            // Too late after all: the undo goes behind the requests still out.
            late.hear_before_undo(timeout.saturating_sub(started.elapsed()))
                .await;
        }
        // Undo on every node, including those that did not answer: the request may still
        // reach them. On the same connection the release queues behind it, so once every
        // node confirmed the release, nothing of this try is left anywhere.
        let token = &request.terms.token;
        let undo = self.fan_out(self.settings.timeout_for(ttl), |_, mut conn| async move {
            claim.undo_unattended(&mut conn, token).await
        });
        let cleaned = undo.await.iter().all(Result::is_ok);
        // (A fair lock, whose line would be each node's own, is refused on Redlock: no
        // waiter is ever told how many are ahead of it.)
        match refused {
            Some(why) => Attempt::Ended {
                error: Error::InvalidArgument(why),
                held,
                may_hold: !cleaned,
            },
            None => Attempt::NoQuorum {
                failure: Box::new(failure),
                held,
                may_hold: !cleaned,
            },
        }
    }

    /// One try's request on every node: a plain try's command, decided once a quorum took
    /// the claim (its requests still out come back as the [`LateReplies`]), or the claim's
    /// script, which waits for every node: a node that lost its scripts (restarted) loads
    /// them again only for a caller still waiting for the reply, and a fenced try needs
    /// every node's fence.
    async fn ask_everywhere(
        &self,
        claim: &dyn Claim,
        request: ObtainTry<'_>,
        timeout: Duration,
    ) -> (Vec<Option<Reply<Obtain>>>, Option<LateReplies>) {
        match claim.plain_try(&request) {
            Some(cmd) => self.set_everywhere(cmd, timeout).await,
            None => {
                let obtain = |_, mut conn: C| async move { claim.obtain(&mut conn, request).await };
                let replies = self.fan_out(timeout, obtain).await;
                (replies.into_iter().map(Some).collect(), None)
            }
        }
    }

    /// The claim, if a quorum took it (and the fence, when asked for) with validity left;
    /// otherwise `failure` says why not.
    fn obtained(
        &self,
        fence: Result<Option<u64>, Vec<NodeFailure>>,
        failure: &mut QuorumFailure,
        ttl: Duration,
        started: Instant,
    ) -> Option<Attempt> {
        failure.elapsed = started.elapsed();
        match fence {
            Ok(fence) => match self.valid_until(ttl, started, failure.elapsed) {
                Some(valid_until) => {
                    return Some(Attempt::Obtained(Obtained {
                        sent_at: started,
                        valid_until,
                        fence,
                    }));
                }
                None => failure.too_late = true,
            },
            Err(unfenced) => count_out(failure, unfenced),
        }
        None
    }

    /// The fence of a claim taken without one: every node that still holds it moves its
    /// counters to its next fence, and the highest is made durable on a quorum (see
    /// [`durable_fence`](Quorum::durable_fence)) before it is handed out.
    pub(crate) async fn fence(
        &self,
        claim: &dyn Claim,
        token: &Token,
        ttl: Duration,
        retention_ms: u64,
        valid_until: Instant,
    ) -> Result<u64, Error> {
        let started = Instant::now();
        if valid_until <= started {
            // The quorum may be someone else's by now: hand out nothing.
            return Err(Error::NotHeld);
        }
        let timeout = (self.settings.timeout_for(ttl)).min(valid_until - started);
        let replies = self
            .fan_out(timeout, |_, mut conn| async move {
                claim.fence(&mut conn, token, retention_ms).await
            })
            .await;
        let taken: Vec<Option<u64>> = (replies.iter())
            .map(|reply| reply.as_ref().ok().copied().flatten())
            .collect();
        let mut failure = self.tally(
            replies.into_iter().enumerate(),
            started.elapsed(),
            |fence| match fence {
                Some(_) => Ok(()),
                None => Err(NodeError::NotHeld),
            },
        );
        if failure.agreed >= failure.needed {
            let raise = FenceRaise {
                token,
                fence: 0,
                retention_ms,
            };
            let timeout = timeout.saturating_sub(started.elapsed());
            match self.durable_fence(claim, raise, &taken, timeout).await {
                Ok(fence) if Instant::now() < valid_until => return Ok(fence),
                Ok(_) => return Err(Error::NotHeld),
                Err(unfenced) => count_out(&mut failure, unfenced),
            }
        }
        failure.elapsed = started.elapsed();
        Err(self.lost_or_no_quorum(failure))
    }

    /// The fence for a claim taken on a quorum: above every fence handed out
    /// before, made durable on a quorum before it is handed out.
    ///
    /// Each node that took the claim answered its own next fence (its counter, raised in
    /// the same script). Their maximum is the candidate. Handing it out as it is would not
    /// be enough: counters on a minority may have been raised by tries that failed, so a
    /// later holder whose quorum misses those nodes could be handed a smaller fence. The
    /// candidate is therefore handed out only once a quorum of nodes stores it (or more)
    /// while this owner still holds the claim there — then every later quorum includes one
    /// of those nodes, and a later acquisition there counts past it. When the nodes agree
    /// no second request is needed; otherwise every lower node is raised — even when a
    /// quorum agreed already — so that all the nodes holding the claim say the same fence
    /// (`inspect`, and an election's term, read it from them; see `holder_fence`).
    ///
    /// Returns the fence, or, when too few nodes store it, why each node that took the
    /// claim but not the fence failed.
    async fn durable_fence(
        &self,
        claim: &dyn Claim,
        raise: FenceRaise<'_>,
        fences: &[Option<u64>],
        timeout: Duration,
    ) -> Result<u64, Vec<NodeFailure>> {
        let fence = fences.iter().flatten().copied().max().unwrap_or(0);
        let settled = fences.iter().filter(|f| **f == Some(fence)).count();
        if settled == fences.iter().flatten().count() && settled >= self.needed() {
            return Ok(fence);
        }
        // Raise the nodes that took the claim with a lower fence. Those that took it with
        // this fence stored it already; those that did not take it cannot count (their
        // failure is listed by the caller).
        let raise = FenceRaise { fence, ..raise };
        let replies = self
            .fan_out(timeout, |node, mut conn| async move {
                match fences[node] {
                    Some(seen) if seen < fence => claim.raise_fence(&mut conn, raise).await,
                    _ => Ok(true),
                }
            })
            .await;
        let mut stored = 0;
        let mut failures = Vec::new();
        for (node, reply) in replies.into_iter().enumerate() {
            if fences[node].is_none() {
                continue;
            }
            match reply {
                Ok(true) => stored += 1,
                Ok(false) => failures.push(NodeFailure {
                    node,
                    error: NodeError::NotHeld,
                }),
                Err(error) => failures.push(NodeFailure { node, error }),
            }
        }
        match stored >= self.needed() {
            true => Ok(fence),
            false => Err(failures),
        }
    }

    /// Deletes this owner's claim on every node, sending the whole script. Returns whether
    /// every node confirmed within `wait`.
    pub(crate) async fn release_unattended(
        &self,
        claim: &dyn Claim,
        token: &Token,
        wait: Duration,
    ) -> bool {
        self.fan_out(wait, |_, mut conn| async move {
            claim.release_unattended(&mut conn, token, 0).await
        })
        .await
        .iter()
        .all(Result::is_ok)
    }

    /// Starts an owner-checked release on each of `nodes` and returns at once (see
    /// [`background`]). Best effort: where it fails, the claim expires by its TTL.
    pub(crate) fn release_in_background(
        &self,
        nodes: impl IntoIterator<Item = usize>,
        claim: Arc<dyn Claim>,
        token: Token,
        keep_until: Option<Instant>,
    ) {
        for node in nodes {
            let conn = self.conns[node].clone();
            let drift = self.settings.allowance();
            background::release(release_try(conn, claim.clone(), token, keep_until, drift));
        }
    }

    /// Release on every node: done when a quorum deleted this owner's claim; lost when so
    /// many nodes no longer had it that no quorum did. Returns as soon as a quorum
    /// released; the nodes still out are heard in the background. Nodes that did not
    /// answer get the release again in the background (otherwise it expires by TTL).
    pub(crate) async fn release(
        &self,
        claim: &Arc<dyn Claim>,
        token: &Token,
        ttl: Option<Duration>,
        keep_until: Option<Instant>,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let keep = keep_ms(keep_until, self.settings.allowance());
        let timeout = self.settings.timeout_for(ttl.unwrap_or(TTL_FOR_TIMEOUTS));
        // One command for every node (a command built per node was a measurable part of a
        // cycle's client CPU).
        let (cmd, notice) = (
            Arc::new(claim.release_cmd(token, keep)),
            claim.release_notice(),
        );
        // Decided by a quorum, unless a notice follows the script on each node: observers
        // must hear it from every node that had the claim.
        let agrees: fn(&bool) -> bool = match notice {
            None if self.quorum_decides() => |released| *released,
            _ => |_| false,
        };
        let notice = notice.map(Arc::new);
        let release = |_, mut conn: C| {
            let (cmd, notice) = (cmd.clone(), notice.clone());
            async move {
                let missing: i64 = evalsha(&mut conn, &cmd).await?;
                send_notice(&mut conn, notice.as_deref()).await;
                Ok(missing == 0)
            }
        };
        let (gathering, gathered, rest) = self.fan_out_to_quorum(timeout, release, agrees).await;
        // Taken before the nodes still out are heard on a task: what it hears is theirs.
        let replies = gathering.take(gathered, timeout);
        if gathered == Collected::Quorum {
            let wait = timeout.saturating_sub(started.elapsed());
            self.finish_release(rest, &gathering, wait, claim, token, keep_until);
        }
        let failure = self.tally(
            heard(replies),
            started.elapsed(),
            |released| match released {
                true => Ok(()),
                false => Err(NodeError::NotHeld),
            },
        );
        let unanswered = (failure.failures.iter())
            .filter(|f| f.error.is_unreachable())
            .map(|f| f.node);
        self.release_in_background(unanswered, claim.clone(), *token, keep_until);
        match failure.agreed >= failure.needed {
            true => Ok(()),
            false => Err(self.lost_or_no_quorum(failure)),
        }
    }

    /// Hears a release's requests still out (`rest`) within `wait` on a task of their own
    /// (a node that lost the script gets it whole); the nodes among them that do not
    /// answer, or cannot be reached, get the release again in the background.
    fn finish_release(
        &self,
        rest: StillOut,
        gathering: &Arc<Collector<bool>>,
        wait: Duration,
        claim: &Arc<dyn Claim>,
        token: &Token,
        keep_until: Option<Instant>,
    ) {
        let late = gathering.out();
        let nodes: Vec<(usize, C)> = (late.iter())
            .map(|node| (*node, self.conns[*node].clone()))
            .collect();
        let (claim, token, drift) = (claim.clone(), *token, self.settings.allowance());
        let (gathering, needed, all) = (gathering.clone(), self.needed(), self.conns.len());
        let name = lock_name(&*claim);
        fan_out::finish(rest, wait, move || {
            let failed = gathering.failed(&late, wait);
            for (_, conn) in
                (nodes.into_iter()).filter(|(n, _)| failed.iter().any(|f| f.node == *n))
            {
                let again = release_try(conn, claim.clone(), token, keep_until, drift);
                background::release(again);
            }
            warn_of_late(
                &name,
                QuorumFailure::untimed(gathering.agreed(), needed, all, failed),
            );
        });
    }

    /// Refresh on every node: counts only when a quorum extended the claim before the
    /// current validity (`valid_until`) ran out, and the new lease leaves validity.
    pub(crate) async fn refresh(
        &self,
        claim: &dyn Claim,
        token: &Token,
        ttl_ms: u64,
        valid_until: Option<Instant>,
    ) -> Result<Instant, Error> {
        let started = Instant::now();
        if valid_until.is_some_and(|v| v <= started) {
            // Too late to extend: the claim may already be someone else's. Send nothing, so
            // that "not held" also means "nothing was changed".
            return Err(Error::NotHeld);
        }
        let ttl = Duration::from_millis(ttl_ms);
        let mut timeout = self.settings.timeout_for(ttl);
        if let Some(valid_until) = valid_until {
            // An answer after the current validity is worthless: the claim may have expired
            // and been taken by then.
            timeout = timeout.min(valid_until.saturating_duration_since(started));
        }
        let replies = self
            .fan_out(timeout, |_, mut conn| async move {
                claim.refresh(&mut conn, token, ttl_ms).await
            })
            .await;
        let mut failure = self.tally(
            replies.into_iter().enumerate(),
            started.elapsed(),
            |extended| match extended {
                true => Ok(()),
                false => Err(NodeError::NotHeld),
            },
        );
        let in_time = valid_until.is_none_or(|v| Instant::now() < v);
        if failure.agreed >= failure.needed && in_time {
            if let Some(valid_until) = self.valid_until(ttl, started, failure.elapsed) {
                return Ok(valid_until);
            }
            failure.too_late = true;
        }
        match in_time {
            true => Err(self.lost_or_no_quorum(failure)),
            false => Err(Error::NotHeld),
        }
    }

    /// One keep-alive call on every node; a lease is renewed when a quorum extended it in
    /// time, lost when so many nodes no longer hold it that no quorum does.
    pub(crate) async fn renew(
        &self,
        call: &ScriptInvocation<'static>,
        ttls: &[Duration],
    ) -> Vec<Renewal> {
        let started = Instant::now();
        // Sized for the longest lease: a short one in the batch (e.g. a last renewal cut
        // to a hold limit) must not starve the others; each is judged by its own validity.
        let longest = ttls.iter().max().copied().unwrap_or(TTL_FOR_TIMEOUTS);
        let replies: Vec<Reply<Vec<Renewed>>> = self
            .fan_out(
                self.settings.timeout_for(longest),
                |_, mut conn| async move {
                    let reply = call
                        .invoke_async::<Value>(&mut ScriptConn(&mut conn))
                        .await?;
                    renewal_reply(reply, ttls.len())
                },
            )
            .await;
        let elapsed = started.elapsed();
        let lease_replies = |lease: usize| -> Vec<Reply<Renewed>> {
            (replies.iter())
                .map(|r| r.as_ref().map(|a| a[lease].clone()).map_err(Clone::clone))
                .collect()
        };
        (0..ttls.len())
            .map(|lease| {
                let mut failure = self.tally(
                    lease_replies(lease).into_iter().enumerate(),
                    elapsed,
                    |answer| match answer {
                        Renewed::Extended { .. } => Ok(()),
                        Renewed::NotHeld => Err(NodeError::NotHeld),
                    },
                );
                if failure.agreed >= failure.needed {
                    if let Some(valid_until) = self.valid_until(ttls[lease], started, elapsed) {
                        let asked = asked_by_a_quorum(&replies, lease, failure.needed);
                        return Renewal::Renewed {
                            sent_at: started,
                            valid_until,
                            asked,
                        };
                    }
                    failure.too_late = true;
                }
                match failure.is_lost() {
                    true => Renewal::NotHeld,
                    false => Renewal::Failed(quorum_error(&failure)),
                }
            })
            .collect()
    }

    /// What `call` reads on every node; a node that cannot be asked says why in its slot.
    pub(crate) async fn inspect<V: StateReader>(
        &self,
        view: &V,
        call: &ScriptInvocation<'static>,
    ) -> Result<V::Info, Error> {
        let timeout = self.settings.timeout_for(TTL_FOR_TIMEOUTS);
        let started = Instant::now();
        let replies: Vec<Reply<Value>> = self
            .fan_out(timeout, |_, mut conn| async move {
                call.invoke_async::<Value>(&mut ScriptConn(&mut conn)).await
            })
            .await;
        // Fewer answers than a quorum cannot tell free from held: unknown is an error.
        let answered = replies.iter().filter(|reply| reply.is_ok()).count();
        if answered < self.needed() {
            let failures = (replies.into_iter().enumerate())
                .filter_map(|(node, reply)| reply.err().map(|error| NodeFailure { node, error }))
                .collect();
            return Err(Error::NoQuorum(Box::new(QuorumFailure {
                agreed: answered,
                needed: self.needed(),
                nodes: self.conns.len(),
                too_late: false,
                elapsed: started.elapsed(),
                failures,
            })));
        }
        view.each(replies, self.needed())
    }

    /// A quorum failure as the caller's error: lost when so many nodes no longer held the
    /// claim that no quorum can; otherwise the nodes could not be reached in time.
    fn lost_or_no_quorum(&self, failure: QuorumFailure) -> Error {
        match failure.is_lost() {
            true => Error::NotHeld,
            false => Error::NoQuorum(Box::new(failure)),
        }
    }
}

/// A plain try's requests still out once a quorum took the claim.
struct LateReplies {
    gathering: Arc<Collector<Obtain>>,
    rest: StillOut,
    /// The nodes still out when the quorum decided (those that answer later are heard
    /// on the task, not in the try's replies).
    late: Vec<usize>,
}

impl LateReplies {
    /// The claim was obtained: the requests still out are heard within `wait` on a task of
    /// their own (dropped, a request not yet written would never be sent), and those that
    /// then fail are warned of (`needed` of `nodes` make a quorum).
    fn hear_in_background(self, name: String, wait: Duration, needed: usize, nodes: usize) {
        let (gathering, late) = (self.gathering, self.late);
        fan_out::finish(self.rest, wait, move || {
            let failed = gathering.failed(&late, wait);
            warn_of_late(
                &name,
                QuorumFailure::untimed(gathering.agreed(), needed, nodes, failed),
            );
        });
    }

    /// The claim was not obtained after all: hears the requests still out (within `wait`),
    /// so that the undo goes behind them.
    async fn hear_before_undo(self, wait: Duration) {
        let _ = tokio::time::timeout(wait, self.rest).await;
    }
}

/// The claim was taken, but the fence could not be made durable on a quorum: only the
/// nodes that stored both agreed; `unfenced` are no longer counted, and say why.
/// Whether one request to let go (one id) was found beside `lease` on `needed` nodes: heard
/// as the asker was answered, from a quorum. Requests each stored on a minority (each
/// failed, as far as its asker knows) do not add up to one.
fn asked_by_a_quorum(replies: &[Reply<Vec<Renewed>>], lease: usize, needed: usize) -> bool {
    let mut seen: Vec<(&[u8], usize)> = Vec::new();
    for reply in replies.iter().filter_map(|r| r.as_ref().ok()) {
        let Renewed::Extended { requests } = &reply[lease] else {
            continue;
        };
        for id in requests {
            match seen.iter_mut().find(|(known, _)| *known == &id[..]) {
                Some((_, nodes)) => *nodes += 1,
                None => seen.push((id, 1)),
            }
        }
    }
    seen.iter().any(|(_, nodes)| *nodes >= needed)
}

/// A quorum that agreed although some nodes could not be asked: the lock holds, with less
/// room for another failure — operators should hear of the nodes that are down.
fn warn_if_partial(tally: &QuorumFailure) {
    if let Some(errors) = unreachable_despite_quorum(tally) {
        tracing::warn!(
            agreed = tally.agreed,
            needed = tally.needed,
            nodes = tally.nodes,
            errors = %errors,
            "redmutex: quorum reached without every node"
        );
    }
}

/// The nodes that could not be asked in an operation a quorum agreed to, as one text.
fn unreachable_despite_quorum(tally: &QuorumFailure) -> Option<String> {
    if tally.agreed < tally.needed {
        return None;
    }
    let mut unreachable = (tally.failures.iter()).filter(|f| f.error.is_unreachable());
    let first = unreachable.next()?;
    let mut errors = format!("node {}: {}", first.node, first.error);
    for failure in unreachable {
        errors.push_str(&format!("; node {}: {}", failure.node, failure.error));
    }
    Some(errors)
}

/// The nodes that an acquire or a release of `lock_name` decided without, and that then
/// failed to answer (or could not be reached): the same warning as for nodes that failed
/// before the quorum decided, once they are known (on a task of its own, outside the
/// operation's span: it names the lock itself).
fn warn_of_late(lock_name: &str, tally: QuorumFailure) {
    if let Some(errors) = unreachable_despite_quorum(&tally) {
        tracing::warn!(
            lock.name = %lock_name,
            agreed = tally.agreed,
            needed = tally.needed,
            nodes = tally.nodes,
            errors = %errors,
            "redmutex: quorum reached without every node"
        );
    }
}

/// The name an operation's span gives `claim`: its first key.
fn lock_name(claim: &dyn Claim) -> String {
    String::from_utf8_lossy(claim.keys().get(0).unwrap_or_default()).into_owned()
}

fn count_out(failure: &mut QuorumFailure, unfenced: Vec<NodeFailure>) {
    failure.agreed -= unfenced.len();
    failure.failures.extend(unfenced);
    failure.failures.sort_by_key(|f| f.node);
}

/// The key found held on the most nodes (of those, the first), and the shortest time any
/// node holds it for. (Not simply the first key found held anywhere: a node that a release
/// has not reached yet still shows the key it frees, while the others already show the
/// key that keeps the claim out — which is the one to wait for. Waiting for the first, a
/// waiter of several keys woken by that release found "held" and kept its turn, leaving
/// the waiters that queued behind it without a try to wait out the key's TTL.)
fn held_key_and_ttl<'a>(
    replies: impl Iterator<Item = &'a Reply<Obtain>> + Clone,
) -> Option<(usize, Option<Duration>)> {
    let found: Vec<usize> = (replies.clone())
        .filter_map(|reply| match reply {
            Ok(Obtain::Held { index, .. }) => Some(*index),
            _ => None,
        })
        .collect();
    let nodes_holding = |key: &usize| found.iter().filter(|k| *k == key).count();
    let held_key = (found.iter())
        .max_by_key(|key| (nodes_holding(key), std::cmp::Reverse(**key)))
        .copied();
    let held_ttl = replies
        .filter_map(|reply| match reply {
            Ok(Obtain::Held { index, ttl, .. }) if Some(*index) == held_key => *ttl,
            _ => None,
        })
        .min();
    held_key.map(|key| (key, held_ttl))
}

/// A renewal that missed its quorum, as the error a lost lease reports.
fn quorum_error(failure: &QuorumFailure) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Io,
        "no quorum for the renewal",
        failure.to_string(),
    ))
}
