//! The in-memory server held to a real one, reply by reply: random sequences of the
//! commands redmutex's scripts and requests use, sent to both side by side, and every reply
//! compared; then expiry to the millisecond — a key, and an expiry scored in a sorted set
//! by the scripts' own rule — on both. A difference is a bug in the double (or a server
//! version's quirk to look into), and it would hide bugs from users' tests.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;
use redmutex::memory::MemoryRedis;
use testkit::{RedisServer, Rng};

use crate::common::{multiplexed, Raw};

/// Few keys, fields and members, so that commands meet each other's data (and its type).
const KEYS: &[&str] = &["a", "b", "{a}:z"];
const FIELDS: &[&str] = &["f", "g", "#used"];
const MEMBERS: &[&str] = &["m", "n", "o"];

fn score(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => "-inf".into(),
        1 => "+inf".into(),
        2 => format!("({}", rng.below(20)),
        _ => rng.below(20).to_string(),
    }
}

/// One random command of those the scripts use (times far off, so that replies do not
/// depend on when each server ran them).
fn command(rng: &mut Rng) -> Vec<String> {
    let key = rng.pick(KEYS).to_string();
    let (field, member) = (rng.pick(FIELDS).to_string(), rng.pick(MEMBERS).to_string());
    let n = rng.below(20).to_string();
    let args: Vec<String> = match rng.below(24) {
        0 => vec!["GET".into(), key],
        1 => {
            let mut set = vec!["SET".into(), key, format!("v{n}")];
            match rng.below(5) {
                0 => set.push("NX".into()),
                1 => set.push("XX".into()),
                2 => set.push("KEEPTTL".into()),
                _ => {}
            }
            if rng.below(2) == 0 {
                set.extend(["PX".into(), "100000000".into()]);
            }
            set
        }
        2 => vec![
            "SETRANGE".into(),
            key,
            rng.below(4).to_string(),
            "xy".into(),
        ],
        3 => vec!["DEL".into(), key, rng.pick(KEYS).into()],
        4 => vec!["EXISTS".into(), key],
        5 => vec!["TYPE".into(), key],
        6 => vec!["PEXPIRE".into(), key, "100000000".into()],
        7 => vec!["PTTL".into(), key],
        8 => vec!["HSET".into(), key, field, format!("{n}:x")],
        9 => vec!["HGET".into(), key, field],
        10 => vec!["HDEL".into(), key, field],
        11 => vec!["HEXISTS".into(), key, field],
        12 => vec!["HINCRBY".into(), key, field, format!("-{n}")],
        13 => vec!["HGETALL".into(), key],
        14 => {
            let mut zadd = vec!["ZADD".into(), key];
            match rng.below(3) {
                0 => zadd.push("XX".into()),
                1 => zadd.push("NX".into()),
                _ => {}
            }
            zadd.extend([n, member]);
            zadd
        }
        15 => vec!["ZREM".into(), key, member],
        16 => vec!["ZCARD".into(), key],
        17 => vec!["ZCOUNT".into(), key, score(rng), score(rng)],
        18 => vec!["ZSCORE".into(), key, member],
        19 => vec!["ZRANK".into(), key, member],
        20 => {
            let mut range = vec!["ZRANGE".into(), key, "0".into(), "-1".into()];
            if rng.below(2) == 0 {
                range.push("WITHSCORES".into());
            }
            range
        }
        21 => vec![
            "ZREVRANGE".into(),
            key,
            "0".into(),
            "0".into(),
            "WITHSCORES".into(),
        ],
        22 => {
            let mut range = vec!["ZRANGEBYSCORE".into(), key, score(rng), score(rng)];
            if rng.below(2) == 0 {
                range.push("WITHSCORES".into());
            }
            if rng.below(3) == 0 {
                range.extend(["LIMIT".into(), "0".into(), "1".into()]);
            }
            range
        }
        _ => vec!["ZREMRANGEBYSCORE".into(), key, score(rng), score(rng)],
    };
    args
}

/// A reply as compared: errors by their code (the wording differs between server
/// versions), a TTL by whether and roughly how long it lasts (the two servers ran it a
/// moment apart), a hash's fields in order (Redis answers them in insertion order, which
/// no script relies on).
fn comparable(args: &[String], reply: redis::RedisResult<Value>) -> String {
    let value = match reply {
        Ok(value) => value,
        Err(e) => return format!("error {}", e.code().unwrap_or("?")),
    };
    match (args[0].as_str(), value) {
        ("PTTL", Value::Int(ms)) if ms > 1_000 => format!("ttl ~{}", (ms + 50_000) / 100_000),
        ("HGETALL", Value::Array(items)) => {
            let mut pairs: Vec<String> = items.chunks(2).map(|pair| format!("{pair:?}")).collect();
            pairs.sort();
            pairs.join(",")
        }
        (_, value) => format!("{value:?}"),
    }
}

async fn send(conn: &mut impl ConnectionLike, args: &[String]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(&args[0]);
    for arg in &args[1..] {
        cmd.arg(arg);
    }
    conn.req_packed_command(&cmd).await
}

#[tokio::test]
async fn random_command_sequences_get_the_same_replies_from_both_servers() {
    let server = RedisServer::spawn();
    let mut real = multiplexed(&server).await;
    for seed in 0..200u64 {
        let mut memory = MemoryRedis::new();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut real).await.unwrap();
        let mut rng = Rng::new(seed);
        let mut sent: Vec<String> = Vec::new();
        for _ in 0..40 {
            let args = command(&mut rng);
            sent.push(args.join(" "));
            let theirs = comparable(&args, send(&mut real, &args).await);
            let ours = comparable(&args, send(&mut memory, &args).await);
            assert_eq!(
                ours,
                theirs,
                "seed {seed}: the in-memory server answered otherwise after:\n  {}",
                sent.join("\n  ")
            );
        }
    }
}

/// A script's view of expiry at the millisecond it runs in, on both servers: a key set to
/// expire at the current millisecond is still there (PTTL 0), one that expired a
/// millisecond ago is gone; and the scripts' own rule for expiries in sorted sets
/// (`helpers.lua`) agrees with the key's — live through the last millisecond.
#[tokio::test]
async fn expiry_is_the_same_to_the_millisecond_on_both_servers() {
    // The scripts' shared rules (now_ms, over_by, live_from, live_at), as every script
    // has them.
    const HELPERS: &str = include_str!("../../../redmutex/src/scripts/helpers.lua");
    const CHECK: &str = "
        local now = now_ms()
        redis.call('set', KEYS[1], 'v', 'pxat', now)
        redis.call('set', KEYS[2], 'v', 'pxat', now - 1)
        redis.call('zadd', KEYS[3], now, 'last', now - 1, 'over', now + 1, 'later')
        local over = redis.call('zrangebyscore', KEYS[3], '-inf', over_by(now))
        local live = redis.call('zcount', KEYS[3], live_from(now), '+inf')
        local last = redis.call('zscore', KEYS[3], 'last')
        if not live_at(last, now) then
          return redis.error_reply('live_at disagrees with the sorted set')
        end
        return { redis.call('exists', KEYS[1]), redis.call('pttl', KEYS[1]),
                 redis.call('exists', KEYS[2]), over, live }";
    let server = RedisServer::spawn();
    let mut real = multiplexed(&server).await;
    let mut memory = MemoryRedis::new();
    // Valkey deletes a key SET with an expiry at the current millisecond at once (Redis
    // keeps it until that millisecond has passed, as it keeps every key); the in-memory
    // server does as Redis does. No script of redmutex's sets such an expiry.
    let set_at_now = match server.command(&["INFO", "server"]).contains("valkey") {
        true => [Value::Int(0), Value::Int(-2)],
        false => [Value::Int(1), Value::Int(0)],
    };
    let script = redis::Script::new(&format!("{HELPERS}{CHECK}"));
    let mut call = script.prepare_invoke();
    call.key("{t}:key").key("{t}:past").key("{t}:scores");
    let expected = |first: [Value; 2]| {
        let [exists, pttl] = first;
        Value::Array(vec![
            exists,
            pttl,
            Value::Int(0),
            Value::Array(vec![Value::BulkString(b"over".to_vec())]),
            Value::Int(2),
        ])
    };
    // A script that runs across a millisecond's end compares with two clocks: its own
    // `TIME` and the time the server fixed for the script's keys when it began. Only the
    // runs that began and ended within one millisecond of the server's clock (`TIME`
    // before and after says so) are judged.
    let mut clock = Raw::new(&server).await;
    let mut judged = 0;
    for _ in 0..200 {
        let before = clock.server_ms().await;
        let theirs: Value = call.invoke_async(&mut real).await.unwrap();
        let after = clock.server_ms().await;
        let ours: Value = call.invoke_async(&mut memory).await.unwrap();
        assert_eq!(ours, expected([Value::Int(1), Value::Int(0)]));
        if before == after {
            judged += 1;
            assert_eq!(
                theirs,
                expected(set_at_now.clone()),
                "the server keeps a key through its last millisecond"
            );
        }
        if judged == 20 {
            return;
        }
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
    panic!("only {judged} of 200 runs of the script began and ended in one millisecond");
}
