//! Hostile input against a real server: key names of any bytes (binary, unicode, glob and
//! hash-tag characters, at the size limit) reach Redis exactly and touch nothing else;
//! values written by someone else (any type, a foreign or look-alike value, huge) give
//! typed errors and are never overwritten; hostile fence counters leave nothing behind.

use crate::common;
use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::ms;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis::aio::MultiplexedConnection;
use redmutex::retry;
use redmutex::{Locker, LostReason};
use testkit::RedisServer;

async fn cmd<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, c: &mut redis::Cmd) -> T {
    c.query_async(conn).await.unwrap()
}

async fn all_keys(conn: &mut MultiplexedConnection) -> BTreeSet<Vec<u8>> {
    cmd::<Vec<Vec<u8>>>(conn, redis::cmd("KEYS").arg("*"))
        .await
        .into_iter()
        .collect()
}

/// Keys of every shape: binary, unicode, glob and hash-tag characters, at the size limit.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..40),
        r"\PC{1,16}".prop_map(String::into_bytes),
        proptest::collection::vec(proptest::sample::select(b"*?[]^-\\{}ab".to_vec()), 1..10),
        (0usize..3).prop_map(|n| vec![b'k'; redmutex::limits::MAX_KEY_LEN - n]),
    ]
}

/// Keys a script acting on the wrong key would hit: neighbours, prefixes, and what a glob
/// in `key` would match.
fn decoys(key: &[u8]) -> BTreeSet<Vec<u8>> {
    let globless: Vec<u8> = key
        .iter()
        .map(|&b| if b"*?[]^-\\".contains(&b) { b'a' } else { b })
        .collect();
    let mut set: BTreeSet<Vec<u8>> = [
        [key, b"x"].concat(),
        [b"x", key].concat(),
        key[..key.len() - 1].to_vec(),
        globless,
        b"*".to_vec(),
        b"?".to_vec(),
        b"a".to_vec(),
        b"{a}".to_vec(),
    ]
    .into_iter()
    .filter(|d| !d.is_empty() && d != key)
    .collect();
    set.retain(|d| d.first() != Some(&b'{') || d == b"{a}");
    set
}

#[test]
fn key_names_reach_redis_exactly_and_touch_nothing_else() {
    let server = RedisServer::spawn();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (locker, raw) = rt.block_on(async {
        (
            common::locker(&server).await,
            common::multiplexed(&server).await,
        )
    });
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (key(), r"\PC{0,30}");
    runner
        .run(&strategy, |(key, metadata)| {
            // A multiplexed connection is a cheap handle: one clone per case.
            rt.block_on(one_key(&locker, &mut raw.clone(), &key, &metadata));
            Ok(())
        })
        .unwrap();
}

async fn one_key(
    locker: &Locker<MultiplexedConnection>,
    raw: &mut MultiplexedConnection,
    key: &[u8],
    metadata: &str,
) {
    let shown = String::from_utf8_lossy(&key[..key.len().min(40)]).into_owned();
    cmd::<()>(raw, &mut redis::cmd("FLUSHALL")).await;
    let decoys = decoys(key);
    for (i, decoy) in decoys.iter().enumerate() {
        cmd::<()>(raw, redis::cmd("SET").arg(decoy).arg(format!("decoy {i}"))).await;
    }
    let lock = locker
        .acquire(key, ms(10_000))
        .metadata(metadata)
        .retry(retry::none())
        .await
        .unwrap_or_else(|e| panic!("{shown:?}: {e}"));
    let value: Vec<u8> = cmd(raw, redis::cmd("GET").arg(key)).await;
    let mut expected = lock.token().as_bytes().to_vec();
    expected.push(b'-');
    expected.extend_from_slice(metadata.as_bytes());
    assert_eq!(value, expected, "{shown:?}: the value stored");
    // Exactly one new key, the lock key; asked for, its fence adds the counter.
    let added: Vec<Vec<u8>> = all_keys(raw).await.difference(&decoys).cloned().collect();
    assert_eq!(added, [key.to_vec()], "{shown:?}");
    let fence = lock
        .fence()
        .await
        .unwrap_or_else(|e| panic!("{shown:?}: {e}"));
    let added: Vec<Vec<u8>> = all_keys(raw).await.difference(&decoys).cloned().collect();
    assert_eq!(added.len(), 2, "{shown:?}: {added:?}");
    assert!(added.iter().any(|k| k == key), "{shown:?}");
    let counter = added.iter().find(|k| *k != key).unwrap().clone();
    assert!(common::is_fence_counter(&counter), "{shown:?}: {counter:?}");
    let info = locker.inspect(key).await.unwrap();
    assert!(info.held && !info.foreign, "{shown:?}: {info:?}");
    assert_eq!(info.key, key);
    assert_eq!(info.fence, Some(fence));
    assert_eq!(
        info.metadata.as_deref(),
        Some(metadata).filter(|m| !m.is_empty())
    );
    // A multi-key lock over this key and a decoy: refused, and nothing changes.
    let decoy = decoys.iter().next().unwrap();
    let refused = locker
        .acquire_all([key, decoy.as_slice()], ms(10_000))
        .retry(retry::none())
        .await
        .unwrap_err();
    assert!(refused.is_not_obtained(), "{shown:?}: {refused}");
    let mut lock = lock;
    lock.refresh(ms(20_000)).await.unwrap();
    lock.release().await.unwrap();
    let left = all_keys(raw).await;
    let counter_ttl: i64 = cmd(raw, redis::cmd("PTTL").arg(&counter)).await;
    let day = redmutex::limits::DEFAULT_FENCE_RETENTION.as_millis() as i64;
    assert!(
        counter_ttl > day - 60_000 && counter_ttl <= day,
        "{shown:?}: the counter is kept for the retention period, not forever: {counter_ttl}"
    );
    let expected: BTreeSet<Vec<u8>> = decoys.iter().cloned().chain([counter]).collect();
    assert_eq!(
        left, expected,
        "{shown:?}: only the decoys and the counter remain"
    );
    for (i, decoy) in decoys.iter().enumerate() {
        let value: String = cmd(raw, redis::cmd("GET").arg(decoy)).await;
        assert_eq!(value, format!("decoy {i}"), "{shown:?}: decoy {decoy:?}");
        let ttl: i64 = cmd(raw, redis::cmd("PTTL").arg(decoy)).await;
        assert_eq!(ttl, -1, "{shown:?}: decoy {decoy:?} got an expiry");
    }
}

/// What someone else may have left at a lock key, and how to write it.
fn foreign_values() -> Vec<(&'static str, redis::Cmd)> {
    let mut list = vec![];
    let mut add = |name, c: &mut redis::Cmd| list.push((name, c.clone()));
    add("list", redis::cmd("RPUSH").arg("h").arg("x"));
    add("hash", redis::cmd("HSET").arg("h").arg("f").arg("v"));
    add("set", redis::cmd("SADD").arg("h").arg("m"));
    add("sorted set", redis::cmd("ZADD").arg("h").arg(1).arg("m"));
    add(
        "stream",
        redis::cmd("XADD").arg("h").arg("*").arg("f").arg("v"),
    );
    add("empty string", redis::cmd("SET").arg("h").arg(""));
    add(
        "binary",
        redis::cmd("SET").arg("h").arg(b"\x00\xff\r\n".as_slice()),
    );
    add("a number", redis::cmd("SET").arg("h").arg(12345));
    add(
        "a bare token",
        redis::cmd("SET").arg("h").arg("AAAAAAAAAAAAAAAAAAAAAA"),
    );
    add(
        "another owner's value",
        redis::cmd("SET")
            .arg("h")
            .arg(b"AAAAAAAAAAAAAAAAAAAAAA-someone \xff else".as_slice()),
    );
    // 32 MiB, made on the server.
    add(
        "a huge string",
        redis::cmd("SETRANGE")
            .arg("h")
            .arg(32 * 1024 * 1024 - 1)
            .arg("x"),
    );
    list
}

#[tokio::test]
async fn values_written_by_others_are_typed_errors_and_never_overwritten() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = common::multiplexed(&server).await;
    let token = redmutex::Token::generate().unwrap();
    for (name, mut write) in foreign_values() {
        cmd::<()>(&mut raw, &mut redis::cmd("FLUSHALL")).await;
        cmd::<redis::Value>(&mut raw, &mut write).await;
        let before: Vec<u8> = cmd(&mut raw, redis::cmd("DUMP").arg("h")).await;
        let e = locker
            .acquire("h", ms(1000))
            .retry(retry::none())
            .await
            .unwrap_err();
        assert!(e.is_not_obtained(), "{name}: {e}");
        let e = locker
            .acquire_all(["free", "h"], ms(1000))
            .retry(retry::none())
            .await
            .unwrap_err();
        assert!(e.is_not_obtained(), "{name}: {e}");
        let e = locker.release_with_token(["h"], &token).await.unwrap_err();
        assert!(e.is_not_held(), "{name}: {e}");
        let e = locker
            .refresh_with_token(["h"], &token, ms(1000))
            .await
            .unwrap_err();
        assert!(e.is_not_held(), "{name}: {e}");
        let info = locker.inspect("h").await.unwrap();
        assert!(info.held && info.ttl.is_none(), "{name}: {info:?}");
        // Even the one in redmutex's format: redmutex writes no key without a TTL.
        assert!(info.foreign && info.metadata.is_none(), "{name}: {info:?}");
        let after: Vec<u8> = cmd(&mut raw, redis::cmd("DUMP").arg("h")).await;
        assert!(before == after, "{name}: the value changed");
        let ttl: i64 = cmd(&mut raw, redis::cmd("PTTL").arg("h")).await;
        assert_eq!(ttl, -1, "{name}: an expiry was set");
        let keys = all_keys(&mut raw).await;
        assert_eq!(keys, BTreeSet::from([b"h".to_vec()]), "{name}: {keys:?}");
    }
}

/// A fence counter someone else wrote: any type, not a number, at the limit of Redis's
/// integers, negative. The acquire fails with a typed error or hands out a fence above
/// every earlier one; nothing is left behind, the counter is never overwritten with garbage.
#[tokio::test]
async fn hostile_fence_counters_leave_nothing_behind() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = common::multiplexed(&server).await;
    let counter = "{c}:fence";
    let writes: Vec<(&str, redis::Cmd)> = vec![
        ("list", redis::cmd("RPUSH").arg(counter).arg("1").clone()),
        ("text", redis::cmd("SET").arg(counter).arg("seven").clone()),
        (
            "fraction",
            redis::cmd("SET").arg(counter).arg("3.5").clone(),
        ),
        (
            "i64::MAX",
            redis::cmd("SET").arg(counter).arg(i64::MAX).clone(),
        ),
        ("negative", redis::cmd("SET").arg(counter).arg(-5).clone()),
        (
            "above 2^53",
            redis::cmd("SET").arg(counter).arg(1_i64 << 60).clone(),
        ),
    ];
    for (name, mut write) in writes {
        cmd::<()>(&mut raw, &mut redis::cmd("FLUSHALL")).await;
        cmd::<redis::Value>(&mut raw, &mut write).await;
        let before: Vec<u8> = cmd(&mut raw, redis::cmd("DUMP").arg(counter)).await;
        for multi in [false, true] {
            let keys: &[&str] = if multi { &["c", "d"] } else { &["c"] };
            // Taken with the keys: the acquire fails and writes nothing.
            let result = locker.acquire_all(keys, ms(1000)).with_fence().await;
            match result {
                Ok(lock) => panic!("{name}: handed out fence {:?}", lock.fence_if_taken()),
                Err(e) => {
                    assert!(!e.is_not_obtained() && !e.is_transient(), "{name}: {e}");
                    assert!(e.to_string().contains("fence"), "{name}: {e}");
                }
            }
            let after: Vec<u8> = cmd(&mut raw, redis::cmd("DUMP").arg(counter)).await;
            assert!(before == after, "{name}: the counter changed");
            let only_counter = BTreeSet::from([counter.as_bytes().to_vec()]);
            assert_eq!(
                all_keys(&mut raw).await,
                only_counter,
                "{name} (multi {multi})"
            );
            // Asked for after the acquire: the lock is held, its fence a typed error.
            let lock = locker.acquire_all(keys, ms(1000)).await.unwrap();
            let e = lock.fence().await.unwrap_err();
            assert!(!e.is_not_held() && !e.is_transient(), "{name}: {e}");
            assert!(e.to_string().contains("fence"), "{name}: {e}");
            let after: Vec<u8> = cmd(&mut raw, redis::cmd("DUMP").arg(counter)).await;
            assert!(before == after, "{name}: the counter changed");
            lock.release().await.unwrap();
            assert_eq!(
                all_keys(&mut raw).await,
                only_counter,
                "{name} (multi {multi})"
            );
        }
    }
}

/// Someone overwrites a held lock's key: the holder's release and refresh say NotHeld, a
/// lease is told "lost", and the other value survives all of it.
#[tokio::test]
async fn a_lock_overwritten_by_someone_else_is_reported_and_left_alone() {
    let server = RedisServer::spawn();
    let locker = common::locker(&server).await;
    let mut raw = common::multiplexed(&server).await;
    let mut lock = locker.acquire("plain", ms(10_000)).await.unwrap();
    cmd::<()>(&mut raw, redis::cmd("DEL").arg("plain")).await;
    cmd::<()>(&mut raw, redis::cmd("RPUSH").arg("plain").arg("theirs")).await;
    assert!(lock.refresh(ms(10_000)).await.unwrap_err().is_not_held());
    assert!(lock.release().await.unwrap_err().is_not_held());
    let list: Vec<String> = cmd(&mut raw, redis::cmd("LRANGE").arg("plain").arg(0).arg(-1)).await;
    assert_eq!(list, ["theirs"]);

    let lease = locker
        .acquire("leased", ms(600))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    cmd::<()>(&mut raw, redis::cmd("DEL").arg("leased")).await;
    cmd::<()>(&mut raw, redis::cmd("HSET").arg("leased").arg("f").arg("v")).await;
    let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("told lost within a few renewal intervals");
    assert!(matches!(reason, LostReason::NotHeld), "{reason}");
    assert!(lease.release().await.is_err());
    let value: String = cmd(&mut raw, redis::cmd("HGET").arg("leased").arg("f")).await;
    assert_eq!(value, "v");
}

/// Redlock: a node whose counter holds someone else's value counts as a failed node (the
/// quorum of the others still hands out a fence), and the value there stays as it was.
#[tokio::test]
async fn redlock_outvotes_a_node_with_a_hostile_counter_and_leaves_it_alone() {
    let servers = RedisServer::spawn_many(5);
    let mut nodes = Vec::new();
    for server in &servers {
        nodes.push(common::multiplexed(server).await);
    }
    let locker = Locker::redlock(nodes.clone()).unwrap();
    let counter = "{r}:fence";
    cmd::<()>(
        &mut nodes[0],
        redis::cmd("RPUSH").arg(counter).arg("theirs"),
    )
    .await;
    cmd::<()>(&mut nodes[1], redis::cmd("SET").arg(counter).arg("-3")).await;
    let lock = locker.acquire("r", ms(5_000)).with_fence().await.unwrap();
    let fence = lock.fence_if_taken().expect("taken with the keys");
    assert_eq!(lock.fence().await.unwrap(), fence);
    let list: Vec<String> = cmd(
        &mut nodes[0],
        redis::cmd("LRANGE").arg(counter).arg(0).arg(-1),
    )
    .await;
    assert_eq!(list, ["theirs"]);
    let value: String = cmd(&mut nodes[1], redis::cmd("GET").arg(counter)).await;
    assert_eq!(value, "-3");
    for (i, node) in nodes.iter_mut().enumerate() {
        let held: bool = cmd(node, redis::cmd("EXISTS").arg("r")).await;
        assert_eq!(
            held,
            i >= 2,
            "node {i}: the lock only where the counter is ours"
        );
    }
    lock.release().await.unwrap();
}
