//! `redmutex elect` (run a command while this process leads) and `redmutex leader` (who
//! leads, once or as it changes).

use std::time::Duration;

use futures_util::StreamExt;
use redmutex::{Connection, Leader, Locker};

use crate::exec::{self, Job};
use crate::exit::{self, Failure};
use crate::output::outln;
use crate::reach::Outage;
use crate::{ElectArgs, LeaderArgs};

/// Campaigns; while leading, runs the command (told its term in `REDMUTEX_FENCE`); stops it
/// when the leadership is lost — and with `--again` campaigns once more, as after stepping
/// down on request (`release --ask`). Ends with the command's status when it exits while
/// leading.
pub async fn elect<C: Connection>(
    locker: &Locker<C>,
    args: ElectArgs,
    urls: &[String],
    wait_redis: Duration,
) -> Result<u8, Failure> {
    let program = args.command[0].to_string_lossy().into_owned();
    let value = args
        .value
        .clone()
        .unwrap_or_else(|| crate::default_metadata(&program));
    let failed = |e: redmutex::Error| Failure::from_lock_error(&e, urls);
    let election = (locker.election(&args.key))
        .and_then(|e| e.with_ttl(args.ttl))
        .map_err(failed)?;
    let keys = [args.key.clone()];
    let job = Job {
        keys: &keys,
        command: &args.command,
        grace: args.grace,
        permits: None,
        urls,
        on_revoke: args.on_revoke,
    };
    // A campaign ends at once when Redis goes away (it never outlives its connection):
    // through an outage shorter than --wait-redis, this campaigns again.
    let mut outage = Outage::new(wait_redis);
    loop {
        let leadership = match election.campaign(value.as_str()).await {
            Ok(leadership) => leadership,
            Err(e) => {
                let transient = e.is_transient();
                outage.failed(failed(e), transient)?;
                tokio::time::sleep(crate::reach::ASK_EVERY).await;
                continue;
            }
        };
        outage.answered();
        crate::output::say(&format!("leading in term {}", leadership.term()));
        let signal = leadership.signal();
        match exec::hold(leadership, &job, &program).await {
            Err(failure) if args.again && failure.code == exit::LOST => {
                crate::output::say(&format!("{}; campaigning again", failure.message));
            }
            // Asked to step down, and did: still a candidate, after whoever asked.
            Ok(_) if args.again && signal.is_release_requested() => {
                crate::output::say("stepped down on request; campaigning again");
                let_another_lead(&election, args.ttl).await;
            }
            result => return result,
        }
    }
}

/// After stepping down on request, gives another candidate (the one that asked, most
/// likely) the leadership before this process campaigns again: until someone leads, or
/// for one TTL. (Campaigning at once could win the key back from a candidate that polls.)
async fn let_another_lead<C: Connection>(election: &redmutex::Election<C>, ttl: Duration) {
    let until = tokio::time::Instant::now() + ttl;
    while tokio::time::Instant::now() < until {
        if let Ok(Some(_)) = election.leader().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Prints the leader (value, term, TTL) or that there is none; with `--watch`, one line
/// per change until interrupted.
pub async fn leader<C: Connection>(
    locker: &Locker<C>,
    args: LeaderArgs,
    urls: &[String],
    wait_redis: Duration,
) -> Result<u8, Failure> {
    let failed = |e: redmutex::Error| Failure::from_lock_error(&e, urls);
    let election = locker.election(&args.key).map_err(failed)?;
    if !args.watch {
        let leader = election.leader().await.map_err(failed)?;
        outln!("{}", line(&args, leader.as_ref()))?;
        return Ok(0);
    }
    let mut changes = Box::pin(election.observe());
    let mut outage = Outage::new(wait_redis);
    // The observer reads only when told of a change, or every third of the TTL: a probe
    // beside it notices a Redis that stops answering (frozen, not only gone) at once.
    let next_probe = || async {
        tokio::time::sleep(crate::reach::ASK_EVERY).await;
        crate::reach::probe(locker, urls).await
    };
    let mut probe = Box::pin(next_probe());
    // The line printed last, and whether an outage was seen since: the first read after
    // one is printed even when nothing changed, so that its end shows, whichever notices
    // it (the observer's own read, or the probe) — once.
    let (mut last, mut outage_seen) = (None::<String>, false);
    let mut show = |leader: Option<&Leader>, outage_seen: &mut bool| -> Result<(), Failure> {
        let now = line(&args, leader);
        if last.as_deref() != Some(now.as_str()) || std::mem::take(outage_seen) {
            outln!("{now}")?;
            last = Some(now);
        }
        Ok(())
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
                    show(leader.as_ref(), &mut outage_seen)?;
                }
                // A read that failed: said on stderr; the watch goes on, through an
                // outage shorter than --wait-redis.
                Some(Err(e)) => {
                    let transient = e.is_transient();
                    outage_seen = true;
                    outage.failed(failed(e), transient)?;
                }
                None => return Ok(0),
            },
            answer = &mut probe => {
                match answer {
                    // Redis answers again, and the observer may have seen nothing of the
                    // outage (it reads when told of a change): the leader is read now.
                    Ok(()) if outage_seen => match election.leader().await {
                        Ok(leader) => {
                            outage.answered();
                            show(leader.as_ref(), &mut outage_seen)?;
                        }
                        Err(e) => {
                            let transient = e.is_transient();
                            outage.failed(failed(e), transient)?;
                        }
                    },
                    Ok(()) => outage.answered(),
                    Err(why) => {
                        outage_seen = true;
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

/// One line for `leader`: `VALUE term N ttl Xms`, or `none`; with `--json` an object.
fn line(args: &LeaderArgs, leader: Option<&Leader>) -> String {
    let key = crate::describe::json_string(&args.key);
    match (args.json, leader) {
        (true, None) => format!("{{\"key\":{key},\"leader\":null,\"term\":null,\"ttl_ms\":null}}"),
        (true, Some(l)) => format!(
            "{{\"key\":{key},\"leader\":{},\"term\":{},\"ttl_ms\":{}}}",
            crate::describe::json_string(&l.value),
            l.term.map_or("null".into(), |t| t.to_string()),
            l.ttl.map_or("null".into(), |t| t.as_millis().to_string())
        ),
        (false, None) => "none".to_owned(),
        (false, Some(l)) => format!(
            "{} term {} ttl {}",
            crate::describe::printable(&l.value),
            l.term.map_or("?".into(), |t| t.to_string()),
            l.ttl.map_or("none".into(), crate::duration::human)
        ),
    }
}
