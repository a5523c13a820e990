//! Guarded writes (`write_if_held`): the caller's commands run only while its claim is
//! held, checked in the same script call, against real servers.

use std::time::Duration;

use redis::Value;
use redmutex::{error::Argument, Error, Locker, Writes};
use testkit::RedisServer;

use crate::common::{self, ms, multiplexed, Raw};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `SET key value`, touching `key`.
fn set(key: &str, value: &str) -> Writes {
    let mut writes = Writes::new();
    writes.add(redis::cmd("SET").arg(key).arg(value), [key]);
    writes
}

#[tokio::test]
async fn writes_land_while_held_and_never_once_another_owner_holds_it() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    let lock = locker.acquire("job", ms(300)).await.unwrap();
    raw.set("job:kind", "a string").await;
    let mut writes = Writes::new();
    writes
        .add(
            redis::cmd("SET").arg("job:state").arg("running"),
            ["job:state"],
        )
        .add(
            redis::cmd("HSET").arg("job:kind").arg("f").arg(1),
            ["job:kind"],
        )
        .add(redis::cmd("INCR").arg("job:runs"), ["job:runs"])
        .add(redis::cmd("GET").arg("job:missing"), ["job:missing"]);
    let replies = lock.write_if_held(&writes).await.unwrap();
    assert_eq!(replies.len(), 4, "{replies:?}");
    assert_eq!(replies[0], Value::Okay);
    // A command that fails answers its error; the others still ran.
    assert!(matches!(replies[1], Value::ServerError(_)), "{replies:?}");
    assert_eq!(replies[2], Value::Int(1));
    assert_eq!(replies[3], Value::Nil);
    assert_eq!(raw.get("job:state").await.as_deref(), Some(&b"running"[..]));

    // The holder "pauses" past its TTL; another process takes the lock meanwhile.
    tokio::time::sleep(ms(400)).await;
    let other = common::own_locker(&server, false).await;
    let theirs = other.acquire("job", secs(30)).await.unwrap();
    let late = lock.write_if_held(&set("job:state", "stale")).await;
    assert!(late.unwrap_err().is_not_held());
    assert_eq!(
        raw.get("job:state").await.as_deref(),
        Some(&b"running"[..]),
        "the late write landed nowhere"
    );
    // Nobody holds it at all (expired, not taken): refused too.
    theirs.release().await.unwrap();
    let refused = lock.write_if_held(&set("job:state", "stale")).await;
    assert!(refused.unwrap_err().is_not_held());
    assert_eq!(raw.get("job:state").await.as_deref(), Some(&b"running"[..]));
}

/// Every held type has it: a permit, a reader, a writer, a fair lock's holder, a lease
/// and a leadership; each refuses once released.
#[tokio::test]
async fn every_held_claim_guards_writes_until_it_is_released() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    let writes = set("data", "x");
    let refused = |result: Result<Vec<Value>, Error>| result.unwrap_err().is_not_held();

    let permit = locker.semaphore("pool", 2).unwrap().acquire(1, secs(30));
    let permit = permit.await.unwrap();
    assert_eq!(permit.write_if_held(&writes).await.unwrap(), [Value::Okay]);
    permit.release().await.unwrap();

    let rw = locker.rw_lock("table").unwrap();
    let reader = rw.read(secs(30)).await.unwrap();
    assert_eq!(reader.write_if_held(&writes).await.unwrap(), [Value::Okay]);
    reader.release().await.unwrap();
    let writer = rw.write(secs(30)).await.unwrap();
    assert_eq!(writer.write_if_held(&writes).await.unwrap(), [Value::Okay]);
    writer.release().await.unwrap();

    let fair = locker
        .fair_lock("ledger")
        .unwrap()
        .acquire(secs(30))
        .await
        .unwrap();
    assert_eq!(fair.write_if_held(&writes).await.unwrap(), [Value::Okay]);
    fair.release().await.unwrap();

    let lease = (locker.acquire("job", secs(30)).await.unwrap())
        .keep_alive()
        .unwrap();
    assert_eq!(lease.write_if_held(&writes).await.unwrap(), [Value::Okay]);
    lease.release().await.unwrap();

    let election = locker.election("leader").unwrap();
    let leadership = election.campaign("node-1").await.unwrap();
    assert_eq!(
        leadership.write_if_held(&writes).await.unwrap(),
        [Value::Okay]
    );
    // Deposed: the key is another leader's now.
    raw.run::<()>(redis::cmd("DEL").arg("leader")).await;
    let next = locker
        .election("leader")
        .unwrap()
        .campaign("node-2")
        .await
        .unwrap();
    assert!(refused(
        leadership.write_if_held(&set("data", "deposed")).await
    ));
    assert_eq!(raw.get("data").await.as_deref(), Some(&b"x"[..]));
    next.resign().await.unwrap();
    drop(leadership);
}

/// What cannot be sent is refused before anything is, with the typed error saying why;
/// Redlock refuses guarded writes (the lock on several servers, the data on one).
#[tokio::test]
async fn bad_writes_and_redlock_are_refused_before_any_request() {
    let server = RedisServer::spawn();
    let locker = Locker::new(multiplexed(&server).await);
    let lock = locker.acquire("job", secs(30)).await.unwrap();
    let lease = locker
        .acquire("job2", secs(30))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    let before = common::command_calls(&server);
    let writes_error = |error: Error| match error {
        Error::InvalidArgument(bad) => {
            assert_eq!(bad.argument, Argument::Writes);
            bad.reason
        }
        other => panic!("{other}"),
    };
    let none = lock.write_if_held(&Writes::new()).await.unwrap_err();
    assert!(writes_error(none).contains("no command"));
    let mut empty_key = Writes::new();
    empty_key.add(redis::cmd("SET").arg("").arg(1), [""]);
    let refused = lock.write_if_held(&empty_key).await.unwrap_err();
    assert!(writes_error(refused).contains("0 bytes"));
    // The lock's own key and what it keeps beside it are the protocol's, through a lease
    // too (which checks before it looks whether it is lost).
    let own = lock.write_if_held(&set("job", "x")).await.unwrap_err();
    assert!(writes_error(own).contains("this lock's own key"));
    let counter = lock
        .write_if_held(&set("{job}:fence", "1"))
        .await
        .unwrap_err();
    assert!(writes_error(counter).contains("only redmutex writes"));
    let lease_own = lease.write_if_held(&set("job2", "x")).await.unwrap_err();
    assert!(writes_error(lease_own).contains("this lock's own key"));
    let sent = common::command_calls(&server).since(&before);
    assert_eq!(sent.summary(), "", "nothing sent");
    lock.release().await.unwrap();
    lease.release().await.unwrap();

    let servers = RedisServer::spawn_many(3);
    let redlock = Locker::redlock(common::multiplexed_all(&servers).await).unwrap();
    let lock = redlock.acquire("job", secs(30)).await.unwrap();
    let refused = lock.write_if_held(&set("data", "x")).await.unwrap_err();
    assert!(writes_error(refused).contains("Redlock"));
    for server in &servers {
        assert!(!Raw::new(server).await.exists("data").await);
    }
    lock.release().await.unwrap();
}

/// Holder and writer are separate processes' lockers: a holder whose lock another owner
/// took after it expired cannot write through it, whichever primitive it held.
#[tokio::test]
async fn a_semaphore_holder_past_its_ttl_writes_nothing() {
    let server = RedisServer::spawn();
    let mut raw = Raw::new(&server).await;
    let locker = Locker::new(multiplexed(&server).await);
    let pool = locker.semaphore("pool", 1).unwrap();
    let permit = pool.acquire(1, ms(200)).await.unwrap();
    tokio::time::sleep(ms(300)).await;
    let other = common::own_locker(&server, false).await;
    let theirs = other.semaphore("pool", 1).unwrap().acquire(1, secs(30));
    let theirs = theirs.await.unwrap();
    let late = permit.write_if_held(&set("data", "late")).await;
    assert!(late.unwrap_err().is_not_held());
    assert!(!raw.exists("data").await);
    assert_eq!(
        theirs.write_if_held(&set("data", "theirs")).await.unwrap(),
        [Value::Okay]
    );
    theirs.release().await.unwrap();
}
