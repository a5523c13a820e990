//! One request sent to every node of a quorum at once, its answers gathered as they come,
//! until they decide.
//!
//! Most operations wait for every node (or the node timeout): their outcome depends on
//! what each node said. An acquire or a release is decided as soon as a quorum agreed, and
//! waiting for the slowest node then only adds its latency to the caller's — on a loaded
//! host the slowest of five local servers was a third of a cycle, and a frozen minority
//! node cost every acquire a whole node timeout. Such a fan-out returns at the quorum, and
//! hands the requests still out to a task of its own ([`finish`]): a request that is
//! dropped may never be sent (a connection skips requests nobody waits for, and one still
//! connecting has sent nothing yet), and a lock should be on every node it can reach, not
//! only on a bare quorum — one of those restarting empty would then leave its holder short.
//!
//! Each request is queued on the node's connection when the fan-out starts, and only its
//! answer is heard later; a connection that is up sends its requests in order (redis-rs's
//! `MultiplexedConnection` and `ConnectionManager` do), so the owner's release usually goes
//! behind its acquire on a slow node. A connection still being set up writes its requests
//! once it is up, in whichever order their tasks are polled: a quorum decides alone only
//! once every node has answered the locker once (`Quorum::quorum_decides`). Waiting for
//! each operation's answer before the next one's request would make that certain, and was
//! measured: it cost a quarter of the throughput at 64 tasks (docs/BENCHMARKS.md).
//! SAFETY.md ("Networks") says what is left.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

use crate::backend::common::Reply;
use crate::quorum::{NodeError, NodeFailure};
use crate::sync::lock;

/// The requests of a fan-out still out once it was decided, as one future.
pub(crate) type StillOut = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The answers of one fan-out, slot by node, and how many agreed so far.
pub(crate) struct Collector<T> {
    slots: Mutex<CollectorState<T>>,
    agreed: AtomicUsize,
    needed: usize,
}

struct CollectorState<T> {
    /// The answers not taken yet.
    replies: Vec<Option<Reply<T>>>,
    /// Which nodes answered, taken or not.
    answered: Vec<bool>,
}

/// How a fan-out ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collected {
    /// Every node answered.
    Every,
    /// A quorum agreed before every node answered: the others are still out.
    Quorum,
    /// The timeout came first: the nodes still silent timed out.
    TimedOut,
}

impl<T> Collector<T> {
    /// An empty gathering for `nodes` nodes, decided when `needed` agree; `needed` of 0
    /// means "wait for every node".
    pub(crate) fn new(nodes: usize, needed: usize) -> Collector<T> {
        let needed = match needed {
            0 => usize::MAX,
            needed => needed,
        };
        Collector {
            slots: Mutex::new(CollectorState {
                replies: (0..nodes).map(|_| None).collect(),
                answered: vec![false; nodes],
            }),
            agreed: AtomicUsize::new(0),
            needed,
        }
    }

    /// Records `node`'s answer; `agrees` says whether it counts toward the quorum.
    pub(crate) fn record(&self, node: usize, reply: Reply<T>, agrees: bool) {
        if agrees {
            self.agreed.fetch_add(1, Ordering::Relaxed);
        }
        let mut slots = lock(&self.slots);
        slots.replies[node] = Some(reply);
        slots.answered[node] = true;
    }

    fn decided(&self) -> bool {
        self.agreed.load(Ordering::Relaxed) >= self.needed
    }

    /// Waits until `requests` (the fan-out's, each recording into this gathering) are all
    /// done, a quorum agreed, or `timeout` passed, whichever comes first. Requests still
    /// out stay in `requests`, for the caller to drop or to finish.
    pub(crate) async fn gather<J: Future + ?Sized>(
        &self,
        mut requests: Pin<&mut J>,
        timeout: Duration,
    ) -> Collected {
        // The requests' own wake-ups are the only events that change the count, and each
        // polls this future again: the count needs no waker of its own.
        let decided = std::future::poll_fn(|cx| {
            if requests.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Collected::Every);
            }
            match self.decided() {
                true => Poll::Ready(Collected::Quorum),
                false => Poll::Pending,
            }
        });
        tokio::time::timeout(timeout, decided)
            .await
            .unwrap_or(Collected::TimedOut)
    }

    /// The answers by node: `None` for a node still out when a quorum decided; a node still
    /// silent when the fan-out timed out answered [`NodeError::TimedOut`]. A node still out
    /// records its answer later all the same (see [`failed`](Collector::failed)).
    pub(crate) fn take(&self, gathered: Collected, timeout: Duration) -> Vec<Option<Reply<T>>> {
        let mut slots = lock(&self.slots);
        let silent = || Some(Err(NodeError::TimedOut(timeout)));
        (slots.replies.iter_mut())
            .map(|slot| match (slot.take(), gathered) {
                (None, Collected::TimedOut) => silent(),
                (answer, _) => answer,
            })
            .collect()
    }

    /// The nodes still out: those that have not answered yet.
    pub(crate) fn out(&self) -> Vec<usize> {
        let slots = lock(&self.slots);
        (slots.answered.iter().enumerate())
            .filter(|(_, answered)| !**answered)
            .map(|(node, _)| node)
            .collect()
    }

    /// Those of `nodes` that have not answered (timed out after `timeout`), or answered
    /// that they could not be reached, with why.
    pub(crate) fn failed(&self, nodes: &[usize], timeout: Duration) -> Vec<NodeFailure> {
        let slots = lock(&self.slots);
        // An answer taken already was heard: only one still here can say it failed.
        let failure = |node: usize| match (slots.answered[node], &slots.replies[node]) {
            (false, _) => Some(NodeError::TimedOut(timeout)),
            (true, Some(Err(error))) if error.is_unreachable() => Some(error.clone()),
            (true, _) => None,
        };
        (nodes.iter().copied())
            .filter_map(|node| failure(node).map(|error| NodeFailure { node, error }))
            .collect()
    }

    /// How many nodes agreed so far.
    pub(crate) fn agreed(&self) -> usize {
        self.agreed.load(Ordering::Relaxed)
    }
}

/// Hears `rest` on a task of its own for at most `wait`, then runs `then` (also when the
/// runtime drops the task unfinished). With no runtime to run the task on, `then` runs at
/// once and the requests are left to run on the servers unheard.
pub(crate) fn finish(rest: StillOut, wait: Duration, then: impl FnOnce() + Send + 'static) {
    /// Runs `then` however the task ends.
    struct Then<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Then<F> {
        fn drop(&mut self) {
            if let Some(then) = self.0.take() {
                then();
            }
        }
    }
    let then = Then(Some(then));
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let _ = tokio::time::timeout(wait, rest).await;
        drop(then);
    });
}

/// The answers that came, with their nodes.
pub(crate) fn heard<T>(slots: Vec<Option<Reply<T>>>) -> impl Iterator<Item = (usize, Reply<T>)> {
    (slots.into_iter().enumerate()).filter_map(|(node, slot)| slot.map(|reply| (node, reply)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::pending;
    use std::sync::Arc;

    fn agreeing(g: &Collector<bool>, node: usize) {
        g.record(node, Ok(true), true);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quorum_decides_before_the_slowest_node_answers() {
        let gathering = Collector::<bool>::new(5, 3);
        let requests = async {
            for node in 0..3 {
                agreeing(&gathering, node);
            }
            pending::<()>().await
        };
        let requests = std::pin::pin!(requests);
        let gathered = gathering.gather(requests, Duration::from_secs(1)).await;
        assert_eq!(gathered, Collected::Quorum);
        let slots = gathering.take(gathered, Duration::from_secs(1));
        assert_eq!(slots.iter().filter(|s| s.is_none()).count(), 2);
        assert_eq!(
            heard(slots).map(|(node, _)| node).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_quorum_the_silent_nodes_time_out() {
        let gathering = Collector::<bool>::new(5, 3);
        let requests = async {
            agreeing(&gathering, 0);
            agreeing(&gathering, 1);
            gathering.record(2, Ok(false), false);
            pending::<()>().await
        };
        let requests = std::pin::pin!(requests);
        let started = tokio::time::Instant::now();
        let gathered = gathering.gather(requests, Duration::from_millis(50)).await;
        assert_eq!(gathered, Collected::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        assert_eq!(gathering.out(), [3, 4]);
        let slots = gathering.take(gathered, Duration::from_millis(50));
        assert!(matches!(slots[4], Some(Err(NodeError::TimedOut(_)))));
        assert!(matches!(slots[2], Some(Ok(false))));
    }

    #[tokio::test(start_paused = true)]
    async fn needed_zero_waits_for_every_node() {
        let gathering = Collector::<bool>::new(2, 0);
        let requests = async {
            agreeing(&gathering, 0);
            tokio::time::sleep(Duration::from_millis(10)).await;
            agreeing(&gathering, 1);
        };
        let requests = std::pin::pin!(requests);
        let gathered = gathering.gather(requests, Duration::from_secs(1)).await;
        assert_eq!(gathered, Collected::Every);
        assert!(gathering.out().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_or_dropped_rest_runs_its_follow_up_once() {
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        finish(Box::pin(async {}), Duration::from_secs(1), move || {
            counter.fetch_add(1, Ordering::Relaxed);
        });
        tokio::task::yield_now().await;
        assert_eq!(ran.load(Ordering::Relaxed), 1);
        let counter = ran.clone();
        finish(
            Box::pin(std::future::pending()),
            Duration::from_millis(30),
            move || {
                counter.fetch_add(1, Ordering::Relaxed);
            },
        );
        tokio::time::sleep(Duration::from_millis(31)).await;
        tokio::task::yield_now().await;
        assert_eq!(ran.load(Ordering::Relaxed), 2, "given up after its wait");
    }

    #[test]
    fn a_node_still_out_records_its_answer_after_the_take() {
        let gathering = Collector::<bool>::new(3, 2);
        agreeing(&gathering, 0);
        agreeing(&gathering, 1);
        let late = gathering.out();
        assert_eq!(late, [2]);
        let slots = gathering.take(Collected::Quorum, Duration::from_secs(1));
        assert_eq!(heard(slots).count(), 2);
        let failed = |g: &Collector<bool>| g.failed(&late, Duration::from_secs(1));
        let silent = failed(&gathering);
        assert_eq!(silent.len(), 1, "silent so far");
        assert_eq!(
            (silent[0].node, &silent[0].error),
            (2, &NodeError::TimedOut(Duration::from_secs(1)))
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        gathering.record(2, Err(NodeError::Redis(refused.into())), false);
        assert!(failed(&gathering)[0].error.is_unreachable(), "unreachable");
        gathering.record(2, Ok(false), false);
        assert!(failed(&gathering).is_empty(), "it answered");
        assert_eq!(gathering.agreed(), 2);
    }
}
