//! What every primitive shares, written once against [`Claim`](crate::scripts::Claim): the
//! acquire loop and its parts, the held guard, the lease with its renewer and lost signal,
//! push wake-up, and what inspect shows.

pub(crate) mod acquire;
pub(crate) mod context;
pub(crate) mod guard;
pub(crate) mod inspect;
pub(crate) mod lease;
pub(crate) mod lost;
pub(crate) mod meter;
pub(crate) mod renewer;
pub(crate) mod schedule;
pub(crate) mod tally;
pub(crate) mod waiting;
pub(crate) mod wakeup;
