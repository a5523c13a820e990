//! `redmutex leader`: who leads an election, once or as it changes.

use clap::Args;
use futures_util::StreamExt;
use redmutex::{connection::Connection, Election, Leader, Locker};

use crate::connect::{Checks, Connects, Session};
use crate::describe::{json_string, printable};
use crate::duration;
use crate::exit::{self, Failure};
use crate::output::{self, outln};
use crate::reach::{self, Outage};

#[derive(Args, Debug)]
pub struct LeaderArgs {
    /// The election's key.
    #[arg(value_name = "KEY")]
    key: String,

    /// Keep printing: one line per change of leader or value, until interrupted.
    #[arg(long)]
    watch: bool,

    /// One JSON object per line: key, leader (its value, or null), term, ttl_ms.
    #[arg(long)]
    json: bool,
}

impl Connects for LeaderArgs {
    fn check(&self, checks: &Checks<'_>) -> Result<(), Failure> {
        output::check_stdout_open(output::ANSWER_LOST)?;
        checks.keys(std::slice::from_ref(&self.key), None)
    }
}

/// Prints the leader (value, term, TTL) or that there is none; with `--watch`, one line
/// per change until interrupted.
pub async fn run<C: Connection>(
    locker: &Locker<C>,
    args: LeaderArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let failed = |e: redmutex::Error| Failure::from_lock_error(&e, session.urls);
    let election = locker.election(&args.key).map_err(failed)?;
    if args.watch {
        return watch(locker, &election, &args, session).await;
    }
    let leader = election.leader().await.map_err(failed)?;
    outln!("{}", line(&args, leader.as_ref()))?;
    Ok(0)
}

/// `leader --watch`: a line per change until interrupted; through an outage shorter than
/// `--wait-redis` (said on stderr, nothing printed meanwhile), 69 after a longer one.
async fn watch<C: Connection>(
    locker: &Locker<C>,
    election: &Election<C>,
    args: &LeaderArgs,
    session: &Session<'_>,
) -> Result<u8, Failure> {
    let urls = session.urls;
    let failed = |e: redmutex::Error| Failure::from_lock_error(&e, urls);
    let mut changes = Box::pin(election.observe());
    let mut outage = Outage::new(session.wait_redis);
    // The observer reads only when told of a change, or every third of the TTL: a probe
    // beside it notices a Redis that stops answering (frozen, not only gone) at once.
    let next_probe = || async {
        tokio::time::sleep(reach::ASK_EVERY).await;
        reach::probe(locker, urls).await
    };
    let mut probe = Box::pin(next_probe());
    let mut shown = Shown {
        args,
        last: None,
        outage_seen: false,
    };
    loop {
        // During an outage, no change comes after its deadline: the watch ends then.
        let deadline = outage.deadline();
        let gone = async move {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            next = changes.next() => match next {
                Some(Ok(leader)) => {
                    outage.answered();
                    shown.show(leader.as_ref())?;
                }
                // A read that failed: said on stderr; the watch goes on, through an
                // outage shorter than --wait-redis.
                Some(Err(e)) => {
                    let transient = e.is_transient();
                    shown.outage_seen = true;
                    outage.failed(failed(e), transient)?;
                }
                None => return Ok(0),
            },
            answer = &mut probe => {
                match answer {
                    // Redis answers again, and the observer may have seen nothing of the
                    // outage (it reads when told of a change): the leader is read now.
                    Ok(()) if shown.outage_seen => match election.leader().await {
                        Ok(leader) => {
                            outage.answered();
                            shown.show(leader.as_ref())?;
                        }
                        Err(e) => {
                            let transient = e.is_transient();
                            outage.failed(failed(e), transient)?;
                        }
                    },
                    Ok(()) => outage.answered(),
                    Err(why) => {
                        shown.outage_seen = true;
                        outage.failed(Failure::new(exit::UNAVAILABLE, why), true)?;
                    }
                }
                probe = Box::pin(next_probe());
            }
            () = gone => {
                let gone = Failure::new(exit::UNAVAILABLE, "no answer");
                outage.failed(gone, true)?;
            }
        }
    }
}

/// The line `leader --watch` printed last, and whether an outage was seen since: the
/// first read after one is printed even when nothing changed, so that its end shows,
/// whichever notices it (the observer's own read, or the probe) — once.
struct Shown<'a> {
    args: &'a LeaderArgs,
    last: Option<String>,
    outage_seen: bool,
}

impl Shown<'_> {
    fn show(&mut self, leader: Option<&Leader>) -> Result<(), Failure> {
        let now = line(self.args, leader);
        if self.last.as_deref() != Some(now.as_str()) || std::mem::take(&mut self.outage_seen) {
            outln!("{now}")?;
            self.last = Some(now);
        }
        Ok(())
    }
}

/// One line for `leader`: `VALUE term N ttl Xms`, or `none`; with `--json` an object.
fn line(args: &LeaderArgs, leader: Option<&Leader>) -> String {
    let key = json_string(&args.key);
    match (args.json, leader) {
        (true, None) => format!("{{\"key\":{key},\"leader\":null,\"term\":null,\"ttl_ms\":null}}"),
        (true, Some(l)) => format!(
            "{{\"key\":{key},\"leader\":{},\"term\":{},\"ttl_ms\":{}}}",
            json_string(&l.value),
            l.term.map_or("null".into(), |t| t.to_string()),
            l.ttl.map_or("null".into(), |t| t.as_millis().to_string())
        ),
        (false, None) => "none".to_owned(),
        (false, Some(l)) => format!(
            "{} term {} ttl {}",
            printable(&l.value),
            l.term.map_or("?".into(), |t| t.to_string()),
            l.ttl.map_or("none".into(), duration::human)
        ),
    }
}
