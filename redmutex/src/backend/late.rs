//! Redlock claims taken by the first quorum that answered while their requests to the
//! other nodes were still under way, and when such a node must be released again.
//!
//! A try returns as soon as a quorum took the claim; its requests to the slower nodes go
//! on in a task of their own (so that those nodes hold the claim too). A release that
//! follows normally queues behind them on each node's connection and so reaches the node
//! after them. Not always: a request still waiting for its connection (one being set up,
//! or one whose queue is full) can be overtaken by the release, which then finds the node
//! empty, while the late request takes the key after it — left there until its TTL. This
//! registry hears both sides of each such node and says when to send the release again:
//! when the release found the node empty (or its answer is unknown) and the late request
//! took the key (or its fate is unknown). Where the request ended before any release was
//! sent, the order is the right one and nothing is sent again.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use crate::token::Token;

/// How a late request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The node took the claim.
    Took,
    /// The node refused it (held by another owner): nothing of ours is there.
    Refused,
    /// No answer (an error, or the node timeout ended): it may have been taken.
    Unknown,
}

/// The late requests of every claim that has some, by its owner's token.
#[derive(Default)]
pub(crate) struct LateRequests {
    claims: Mutex<HashMap<Token, Late>>,
}

struct Late {
    /// Set once a release of the claim was sent, with what it had to keep until.
    released: Option<Option<Instant>>,
    nodes: Vec<LateNode>,
}

struct LateNode {
    node: usize,
    /// `None` while the request is under way.
    request: Option<Ended>,
    /// What a release sent before the request ended found on the node: `Some(true)` when
    /// it deleted the claim, `Some(false)` when the node was empty or did not answer.
    release: Option<bool>,
    settled: bool,
}

/// A node to release again, keeping what the release had to keep until.
pub(crate) type Again = Option<Option<Instant>>;

impl LateRequests {
    fn claims(&self) -> MutexGuard<'_, HashMap<Token, Late>> {
        self.claims.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A claim was taken while its requests to `nodes` are still under way.
    pub(crate) fn start(&self, token: Token, nodes: impl IntoIterator<Item = usize>) {
        let nodes = (nodes.into_iter())
            .map(|node| LateNode {
                node,
                request: None,
                release: None,
                settled: false,
            })
            .collect();
        let late = Late {
            released: None,
            nodes,
        };
        self.claims().insert(token, late);
    }

    /// A release of the claim is about to be sent (before any of its requests).
    pub(crate) fn releasing(&self, token: &Token, keep_until: Option<Instant>) {
        if let Some(late) = self.claims().get_mut(token) {
            late.released = Some(keep_until);
        }
    }

    /// The late request to `node` ended; says whether to release the node again.
    pub(crate) fn request_ended(&self, token: &Token, node: usize, ended: Ended) -> Again {
        self.settle(token, node, |late, entry| {
            entry.request = Some(ended);
            if late.is_none() {
                // No release was sent yet: any release comes after this request.
                entry.settled = true;
            }
        })
    }

    /// What a release found on `node`: `Some(true)` deleted the claim, `Some(false)` found
    /// nothing, `None` no answer. Says whether to release the node again.
    pub(crate) fn release_answered(
        &self,
        token: &Token,
        node: usize,
        deleted: Option<bool>,
    ) -> Again {
        self.settle(token, node, |_, entry| {
            // One release that found it empty (or cannot say) is enough to send another.
            let deleted = deleted.unwrap_or(false) && entry.release != Some(false);
            entry.release = Some(deleted);
        })
    }

    /// Applies `update` to the entry of `node` (given whether a release was sent), then
    /// decides it once both sides are known, and forgets the claim once every node is.
    fn settle(
        &self,
        token: &Token,
        node: usize,
        update: impl FnOnce(Option<Option<Instant>>, &mut LateNode),
    ) -> Again {
        let mut claims = self.claims();
        let late = claims.get_mut(token)?;
        let released = late.released;
        let entry = late.nodes.iter_mut().find(|entry| entry.node == node)?;
        if entry.settled {
            return None;
        }
        update(released, entry);
        let again = match (entry.request, entry.release) {
            _ if entry.settled => None,
            (Some(ended), Some(deleted)) => {
                entry.settled = true;
                let maybe_ours = ended != Ended::Refused;
                (maybe_ours && !deleted).then_some(released.flatten())
            }
            _ => None,
        };
        if late.nodes.iter().all(|entry| entry.settled) {
            claims.remove(token);
        }
        again
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.claims().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token of `TOKEN_LEN` times one letter: distinct per `n`, and easy to read.
    fn token(n: u8) -> Token {
        let letter = char::from(b'A' + n);
        let text: String = std::iter::repeat_n(letter, crate::token::TOKEN_LEN).collect();
        text.parse().unwrap()
    }

    #[test]
    fn a_request_that_ended_before_any_release_needs_nothing_more() {
        let late = LateRequests::default();
        late.start(token(1), [3, 4]);
        assert_eq!(late.request_ended(&token(1), 3, Ended::Took), None);
        assert_eq!(late.request_ended(&token(1), 4, Ended::Unknown), None);
        assert_eq!(late.len(), 0, "forgotten once every node is settled");
        // A release after that finds no entry: it is ordered after the requests.
        late.releasing(&token(1), None);
        assert_eq!(late.release_answered(&token(1), 3, Some(false)), None);
    }

    #[test]
    fn a_release_that_found_the_node_empty_is_sent_again_once_the_request_took_it() {
        let late = LateRequests::default();
        let keep = Some(Instant::now());
        late.start(token(2), [0, 1]);
        late.releasing(&token(2), keep);
        // Node 0: the release came first and found nothing; then the request took it.
        assert_eq!(late.release_answered(&token(2), 0, Some(false)), None);
        assert_eq!(late.request_ended(&token(2), 0, Ended::Took), Some(keep));
        // Node 1: the request took it first, the release deleted it.
        assert_eq!(late.request_ended(&token(2), 1, Ended::Took), None);
        assert_eq!(late.release_answered(&token(2), 1, Some(true)), None);
        assert_eq!(late.len(), 0);
    }

    #[test]
    fn either_side_may_be_heard_last_and_unknown_counts_as_maybe() {
        let late = LateRequests::default();
        late.start(token(3), [0, 1, 2]);
        late.releasing(&token(3), None);
        // The request's reply is read before the release's (both replies were in).
        assert_eq!(late.request_ended(&token(3), 0, Ended::Took), None);
        assert_eq!(late.release_answered(&token(3), 0, Some(false)), Some(None));
        // Unknown request, release unanswered: sent again.
        assert_eq!(late.release_answered(&token(3), 1, None), None);
        assert_eq!(late.request_ended(&token(3), 1, Ended::Unknown), Some(None));
        // Refused there: nothing of ours on the node.
        assert_eq!(late.request_ended(&token(3), 2, Ended::Refused), None);
        assert_eq!(late.len(), 1);
        assert_eq!(late.release_answered(&token(3), 2, Some(false)), None);
        assert_eq!(late.len(), 0);
    }

    #[test]
    fn a_second_release_that_found_nothing_outweighs_a_first_that_deleted() {
        let late = LateRequests::default();
        late.start(token(4), [0]);
        late.releasing(&token(4), None);
        assert_eq!(late.release_answered(&token(4), 0, None), None);
        assert_eq!(late.release_answered(&token(4), 0, Some(true)), None);
        assert_eq!(late.request_ended(&token(4), 0, Ended::Took), Some(None));
        // Decided once: a later answer changes nothing.
        assert_eq!(late.release_answered(&token(4), 0, Some(false)), None);
        assert_eq!(late.len(), 0);
    }

    #[test]
    fn other_claims_and_fast_nodes_are_not_touched() {
        let late = LateRequests::default();
        late.start(token(5), [4]);
        late.releasing(&token(6), None);
        assert_eq!(late.release_answered(&token(5), 0, Some(false)), None);
        assert_eq!(late.request_ended(&token(6), 4, Ended::Took), None);
        assert_eq!(late.len(), 1);
        assert_eq!(late.request_ended(&token(5), 4, Ended::Took), None);
        assert_eq!(late.len(), 0);
    }
}
