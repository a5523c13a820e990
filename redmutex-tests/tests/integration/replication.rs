//! Replica confirmation (`Locker::with_replication`) against a primary with a real replica,
//! which the tests pause (SIGSTOP) to make it fall behind.

use std::time::Duration;

use crate::common::{blamed, ms, multiplexed, multiplexed_with_timeout, Raw};
use redis::aio::MultiplexedConnection;
use redmutex::{error::Argument, Error, Locker, LostReason, Replication};
use testkit::RedisServer;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn not_replicated(error: &Error) -> (u32, u32) {
    match error {
        Error::NotReplicated(why) => (why.acked, why.wanted),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
}

/// A primary with one replica, a raw connection to the primary, and a locker on it whose
/// writes the replica must confirm within `wait`.
async fn primary_with_replica(
    wait: Duration,
) -> (RedisServer, RedisServer, Raw, Locker<MultiplexedConnection>) {
    let primary = RedisServer::spawn();
    let replica = primary.spawn_replica(&[]);
    let raw = Raw::new(&primary).await;
    let locker = Locker::new(multiplexed(&primary).await)
        .with_replication(Replication::new(1, wait))
        .unwrap();
    (primary, replica, raw, locker)
}

#[tokio::test]
async fn writes_count_only_once_the_replica_has_them() {
    let (primary, replica, mut raw, locker) = primary_with_replica(ms(200)).await;

    // Confirmed: the replica has the key, its new TTL and its fence when each call returns.
    let mut lock = locker.acquire("repl:a", secs(10)).await.unwrap();
    let token = lock.token();
    assert!(replica.command(&["GET", "repl:a"]).contains(token.as_str()));
    lock.refresh(secs(30)).await.unwrap();
    let pttl: i64 = replica.command(&["PTTL", "repl:a"])[1..]
        .trim()
        .parse()
        .unwrap();
    assert!(pttl > 10_000, "the replica has the refreshed TTL: {pttl}");
    let fence = lock.fence().await.unwrap();
    assert!(replica
        .command(&["GET", "{repl:a}:fence"])
        .contains(&fence.to_string()));
    // (On a connection of its own: the waits of the calls below hold theirs.)
    let renewing = Locker::new(multiplexed(&primary).await)
        .with_replication(Replication::new(1, ms(200)))
        .unwrap();
    let lease = (renewing.acquire("repl:lease", ms(900)).await.unwrap())
        .keep_alive()
        .unwrap();
    let held = locker.acquire("repl:held", secs(10)).await.unwrap();
    let valid_until = held.valid_until();

    // The replica falls behind.
    replica.pause();
    let refused = locker.acquire("repl:b", secs(10)).await.unwrap_err();
    assert_eq!(not_replicated(&refused), (0, 1));
    assert!(refused.is_transient());
    assert!(refused.to_string().contains("0 of 1 replicas"), "{refused}");
    assert!(
        !raw.exists("repl:b").await,
        "an unconfirmed acquire is undone"
    );
    // A refresh is refused and does not extend what the holder may count on.
    let mut held = held;
    let error = held.refresh(secs(60)).await.unwrap_err();
    assert_eq!(not_replicated(&error), (0, 1));
    assert!(held.valid_until() <= valid_until);
    // A fence is not handed out.
    let error = held.fence().await.unwrap_err();
    assert_eq!(not_replicated(&error), (0, 1));
    assert!(held.fence_if_taken().is_none());
    // Renewals the primary applies but the replica does not confirm: the lease is lost.
    let reason = tokio::time::timeout(secs(3), lease.lost()).await.unwrap();
    match reason {
        LostReason::Unreachable { last_error } => {
            let last = last_error.expect("the renewal's error");
            assert!(last.to_string().contains("not replicated"), "{last}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    // Without confirmation, the same primary takes the key at once.
    let plain = Locker::new(multiplexed(&primary).await);
    plain
        .acquire("repl:c", secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    replica.resume();
    let again = locker.acquire("repl:b", secs(10)).await.unwrap();
    again.release().await.unwrap();
    held.release().await.unwrap();
    lock.release().await.unwrap();
    drop(lease);
}

/// A confirmation that comes after the lock's validity is of no use: the acquire fails
/// (the claim undone) rather than return a lock already over.
#[tokio::test]
async fn a_confirmation_later_than_the_lock_lasts_is_no_lock() {
    // The replica confirms after 400 ms: within the wait allowed, after the lock's 200 ms.
    let (_primary, replica, mut raw, locker) = primary_with_replica(ms(480)).await;

    replica.pause();
    let started = tokio::time::Instant::now();
    let acquire = async {
        let outcome = locker.acquire("repl:late", ms(200)).await;
        (outcome, started.elapsed())
    };
    let resume = async {
        tokio::time::sleep(ms(400)).await;
        replica.resume();
    };
    let ((outcome, took), ()) = tokio::join!(acquire, resume);
    match outcome {
        Ok(lock) => panic!(
            "a lock returned after {took:?}, valid until {:?} (now {:?})",
            lock.valid_until(),
            tokio::time::Instant::now()
        ),
        Err(error) => assert!(error.is_transient(), "{error}"),
    }
    assert!(raw.wait_until_gone("repl:late", secs(2)).await);
}

/// A release that keeps the lock for its minimum hold writes an expiry the replica must
/// have: unconfirmed, the holder is told (a failover could end the hold early).
#[tokio::test]
async fn an_unconfirmed_minimum_hold_is_reported() {
    // (A wait shorter than the connection's response timeout, as the docs advise.)
    let (_primary, replica, mut raw, locker) = primary_with_replica(ms(200)).await;
    let lock = (locker.acquire("repl:kept", secs(10)))
        .min_hold(secs(5))
        .await
        .unwrap();
    replica.pause();
    let error = lock.release().await.unwrap_err();
    replica.resume();
    assert_eq!(not_replicated(&error), (0, 1));
    let pttl = raw.pttl("repl:kept").await;
    assert!(pttl > 4_000, "kept on the primary all the same: {pttl}");
}

#[tokio::test]
async fn more_replicas_than_answer_never_confirm_and_bad_settings_are_refused() {
    let primary = RedisServer::spawn();
    let _replica = primary.spawn_replica(&[]);
    let mut raw = Raw::new(&primary).await;
    let locker = Locker::new(multiplexed(&primary).await);

    let two = (locker.clone())
        .with_replication(Replication::new(2, ms(100)))
        .unwrap();
    let refused = two.acquire("repl:two", secs(10)).await.unwrap_err();
    assert_eq!(not_replicated(&refused), (1, 2));
    assert!(!raw.exists("repl:two").await);
    // The semaphore's acquire goes through the same try, and is undone the same way.
    let semaphore = two.semaphore("repl:sem", 3).unwrap();
    let refused = semaphore.acquire(1, secs(10)).await.unwrap_err();
    assert_eq!(not_replicated(&refused), (1, 2));
    assert!(semaphore.inspect().await.unwrap().is_none());

    for bad in [
        Replication::new(0, ms(100)),
        Replication::new(1, Duration::ZERO),
        Replication::new(1, secs(61)),
    ] {
        let error = locker.clone().with_replication(bad).err().unwrap();
        assert_eq!(blamed(&error), Some(Argument::Replication), "{bad:?}");
    }
    let servers = RedisServer::spawn_many(3);
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(multiplexed(server).await);
    }
    let redlock = Locker::redlock(conns).unwrap();
    let error = redlock
        .with_replication(Replication::new(1, ms(100)))
        .err()
        .unwrap();
    assert_eq!(blamed(&error), Some(Argument::Replication));
    assert_eq!(raw.dbsize().await, 0);
}

#[tokio::test]
async fn on_disk_waits_for_the_append_only_files_where_the_server_has_waitaof() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let primary = RedisServer::spawn_with(testkit::ServerOptions {
        extra_args: aof.iter().map(|arg| arg.to_string()).collect(),
        ..Default::default()
    });
    let replica = primary.spawn_replica(&aof);
    let mut raw = Raw::new(&primary).await;
    // A replica may confirm its fsync only with its once-a-second acknowledgement (see
    // `Replication::on_disk`): 2 s covers that, on a connection that waits longer still.
    let locker = Locker::new(multiplexed_with_timeout(&primary, secs(5)).await)
        .with_replication(Replication::new(1, secs(2)).on_disk())
        .unwrap();
    let has_waitaof = !primary
        .command(&["WAITAOF", "0", "0", "0"])
        .starts_with("-ERR unknown command");
    if !has_waitaof {
        // Redis before 7.2: the server's error, not transient, and nothing left behind.
        let error = locker.acquire("aof:a", secs(10)).await.unwrap_err();
        assert!(matches!(error, Error::Redis(_)), "{error:?}");
        assert!(!error.is_transient());
        assert!(!raw.exists("aof:a").await);
        testkit::lacks("waitaof", "this server has no WAITAOF (Redis 7.2+, Valkey)");
        return;
    }
    // A replica that has just synced rewrites its append-only file first, and confirms
    // nothing on disk until that is done.
    let until = std::time::Instant::now() + secs(10);
    loop {
        let replies =
            primary.commands(&[&["SET", "aof:ready", "1"], &["WAITAOF", "1", "1", "100"]]);
        if replies[1].ends_with(":1\r\n:1\r\n") {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the replica never fsynced: {replies:?}"
        );
    }
    raw.run::<i64>(redis::cmd("DEL").arg("aof:ready")).await;
    let lock = locker.acquire("aof:a", secs(10)).await.unwrap();
    lock.release().await.unwrap();
    replica.pause();
    let refused = locker.acquire("aof:b", secs(10)).await.unwrap_err();
    assert_eq!(not_replicated(&refused), (0, 1));
    assert!(!raw.exists("aof:b").await);
    replica.resume();

    // A primary without an append-only file cannot confirm anything on disk.
    let no_aof = RedisServer::spawn();
    let _its_replica = no_aof.spawn_replica(&[]);
    let locker = Locker::new(multiplexed(&no_aof).await)
        .with_replication(Replication::new(1, ms(300)).on_disk())
        .unwrap();
    let error = locker.acquire("aof:c", secs(10)).await.unwrap_err();
    assert!(matches!(error, Error::Redis(_)), "{error:?}");
    assert!(!Raw::new(&no_aof).await.exists("aof:c").await);
}
