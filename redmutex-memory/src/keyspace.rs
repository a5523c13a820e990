//! The data of the in-memory server and the Redis commands redmutex sends, with Redis's
//! replies and errors: strings, hashes and sorted sets, key expiry in milliseconds on the
//! clock of [`super::clock`], `SCAN` with a cursor that survives writes between calls.
//!
//! Only what redmutex's scripts and requests use is here; anything else is answered with
//! Redis's "unknown command" error, so that a script that starts using a new command fails
//! the conformance tests instead of quietly doing something else.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::glob::matches;

/// An error reply: its code (`ERR`, `WRONGTYPE`, …) and the text after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandError {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl CommandError {
    fn err(message: impl Into<String>) -> CommandError {
        CommandError {
            code: "ERR",
            message: message.into(),
        }
    }

    fn wrong_type() -> CommandError {
        CommandError {
            code: "WRONGTYPE",
            message: "Operation against a key holding the wrong kind of value".into(),
        }
    }

    fn syntax() -> CommandError {
        CommandError::err("syntax error")
    }

    fn not_integer() -> CommandError {
        CommandError::err("value is not an integer or out of range")
    }

    fn arity(command: &str) -> CommandError {
        CommandError::err(format!("wrong number of arguments for '{command}' command"))
    }

    /// An error reply of exactly this text (a script's `redis.error_reply`), which starts
    /// with its code or not.
    pub(crate) fn raw(text: impl Into<String>) -> CommandError {
        CommandError {
            code: "",
            message: text.into(),
        }
    }

    /// The reply's text as Redis sends it (after the `-`): `CODE message`.
    pub(crate) fn to_string_reply(&self) -> String {
        match self.code {
            "" => self.message.clone(),
            code => format!("{code} {}", self.message),
        }
    }
}

/// A command's reply, in the shapes Redis has.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(&'static str),
    Array(Vec<Reply>),
}

type Outcome = Result<Reply, CommandError>;

/// A sorted set: members ordered by score, then by their bytes, as in Redis.
#[derive(Debug, Default, Clone)]
pub(crate) struct SortedSet {
    scores: HashMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

/// A bound of `ZRANGEBYLEX`: `-`, `+`, `[member` (inclusive) or `(member` (exclusive).
enum LexBound {
    Lowest,
    Highest,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

impl LexBound {
    fn parse(bound: &[u8]) -> Result<LexBound, CommandError> {
        match bound.split_first() {
            Some((b'-', [])) => Ok(LexBound::Lowest),
            Some((b'+', [])) => Ok(LexBound::Highest),
            Some((b'[', member)) => Ok(LexBound::Inclusive(member.to_vec())),
            Some((b'(', member)) => Ok(LexBound::Exclusive(member.to_vec())),
            _ => Err(CommandError::err("min or max not valid string range item")),
        }
    }

    /// As a minimum: whether `member` is at or above it.
    fn below(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Lowest => true,
            LexBound::Highest => false,
            LexBound::Inclusive(bound) => member >= bound.as_slice(),
            LexBound::Exclusive(bound) => member > bound.as_slice(),
        }
    }

    /// As a maximum: whether `member` is at or below it.
    fn above(&self, member: &[u8]) -> bool {
        match self {
            LexBound::Lowest => false,
            LexBound::Highest => true,
            LexBound::Inclusive(bound) => member <= bound.as_slice(),
            LexBound::Exclusive(bound) => member < bound.as_slice(),
        }
    }
}

/// A score with a total order (scores are never NaN: parsing refuses it).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl SortedSet {
    fn insert(&mut self, member: &[u8], score: f64) {
        if let Some(old) = self.scores.insert(member.to_vec(), score) {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(score) => self.order.remove(&(Score(score), member.to_vec())),
            None => false,
        }
    }

    fn in_range<'a>(&'a self, range: &'a ScoreRange) -> impl Iterator<Item = (f64, &'a [u8])> {
        (self.order.iter())
            .map(|(score, member)| (score.0, member.as_slice()))
            .filter(|(score, _)| range.contains(*score))
    }

    fn len(&self) -> usize {
        self.scores.len()
    }
}

/// `min max` of ZRANGEBYSCORE and friends: `-inf`, `+inf`, `(` for an open end.
#[derive(Debug, Clone, Copy)]
struct ScoreRange {
    min: f64,
    min_open: bool,
    max: f64,
    max_open: bool,
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, CommandError> {
        let bound = |arg: &[u8]| -> Result<(f64, bool), CommandError> {
            let bad = || CommandError::err("min or max is not a float");
            match arg.strip_prefix(b"(") {
                Some(rest) => Ok((parse_score(rest).map_err(|_| bad())?, true)),
                None => Ok((parse_score(arg).map_err(|_| bad())?, false)),
            }
        };
        let (min, min_open) = bound(min)?;
        let (max, max_open) = bound(max)?;
        Ok(ScoreRange {
            min,
            min_open,
            max,
            max_open,
        })
    }

    fn contains(&self, score: f64) -> bool {
        let above = if self.min_open {
            score > self.min
        } else {
            score >= self.min
        };
        let below = if self.max_open {
            score < self.max
        } else {
            score <= self.max
        };
        above && below
    }
}

/// What a key holds.
#[derive(Debug, Clone)]
pub(crate) enum Data {
    String(Vec<u8>),
    Hash(Fields),
    SortedSet(SortedSet),
    Set(BTreeSet<Vec<u8>>),
}

impl Data {
    fn type_name(&self) -> &'static str {
        match self {
            Data::String(_) => "string",
            Data::Hash(_) => "hash",
            Data::SortedSet(_) => "zset",
            Data::Set(_) => "set",
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    data: Data,
    /// When the key expires, in Unix milliseconds on the server's clock.
    expires_at_ms: Option<u64>,
}

impl Entry {
    /// As Redis keeps a key: through the last millisecond of its expiry (it is expired
    /// once the clock, in whole milliseconds, is past it).
    fn alive_at(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|at| at >= now_ms)
    }
}

/// A hash's fields and values.
/// (Ordered, so that `HGETALL` answers alike from run to run.)
type Fields = BTreeMap<Vec<u8>, Vec<u8>>;

/// A key's place in the key space: ordered by a hash of its bytes, so that a `SCAN`
/// cursor (the hash to go on from) stays valid while keys come and go.
type Slot = (u64, Vec<u8>);

fn slot(key: &[u8]) -> Slot {
    // FNV-1a: deterministic, so cursors mean the same from call to call.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Never 0: cursor 0 starts and ends an iteration.
    (hash | 1, key.to_vec())
}

/// Every key with its data and expiry.
#[derive(Debug, Default, Clone)]
pub(crate) struct Keyspace {
    entries: BTreeMap<Slot, Entry>,
    /// Commands since expired keys were last swept out (lazily expired keys are dropped
    /// when touched; the sweep bounds the memory of keys nobody touches again).
    since_sweep: usize,
}

/// Expired keys are swept out after this many commands.
const SWEEP_EVERY: usize = 4096;

impl Keyspace {
    /// The live entry at `key` (an expired one is removed).
    fn live(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let slot = slot(key);
        let expired = match self.entries.get(&slot) {
            None => return None,
            Some(entry) => !entry.alive_at(now_ms),
        };
        if expired {
            self.entries.remove(&slot);
            return None;
        }
        self.entries.get_mut(&slot)
    }

    fn remove(&mut self, key: &[u8], now_ms: u64) -> Option<Entry> {
        self.live(key, now_ms)?;
        self.entries.remove(&slot(key))
    }

    fn put(&mut self, key: &[u8], entry: Entry) {
        self.entries.insert(slot(key), entry);
    }

    /// The live keys, in no particular order.
    pub(crate) fn keys(&self, now_ms: u64) -> Vec<Vec<u8>> {
        (self.entries.iter())
            .filter(|(_, entry)| entry.alive_at(now_ms))
            .map(|((_, key), _)| key.clone())
            .collect()
    }

    /// Whether there is no key at all, expired or not.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every key, as a server restarted without persistence has.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// Removes `key` now, as if its TTL ran out; whether it existed.
    pub(crate) fn expire_now(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.remove(key, now_ms).is_some()
    }

    /// A key's time to live: `None` when it does not exist; `Some(None)` without expiry.
    pub(crate) fn ttl_ms(&mut self, key: &[u8], now_ms: u64) -> Option<Option<u64>> {
        let entry = self.live(key, now_ms)?;
        Some(entry.expires_at_ms.map(|at| at - now_ms))
    }

    /// Runs one command (`args[0]` is its name) at server time `now_us` (Unix
    /// microseconds). `publish` sends a message and says how many subscribers heard it.
    pub(crate) fn execute(
        &mut self,
        args: &[Vec<u8>],
        now_us: u64,
        publish: &mut dyn FnMut(&[u8], &[u8]) -> i64,
    ) -> Outcome {
        let now_ms = now_us / 1000;
        self.since_sweep += 1;
        if self.since_sweep >= SWEEP_EVERY {
            self.since_sweep = 0;
            self.entries.retain(|_, entry| entry.alive_at(now_ms));
        }
        let Some(name) = args.first() else {
            return Err(CommandError::err("empty command"));
        };
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let args = &args[1..];
        match name.as_str() {
            "ping" => Ok(Reply::Status("PONG")),
            "time" => Ok(time(now_us)),
            "get" => self.get(&name, args, now_ms),
            "set" => self.set(args, now_ms),
            "setrange" => self.setrange(&name, args, now_ms),
            "incr" | "incrby" => self.incrby(&name, args, now_ms),
            "del" | "unlink" => self.del(&name, args, now_ms),
            "exists" => self.exists(&name, args, now_ms),
            "type" => self.type_of(&name, args, now_ms),
            "pexpire" | "pexpireat" => self.pexpire(&name, args, now_ms),
            "pttl" => self.pttl(&name, args, now_ms),
            "hset" | "hget" | "hmget" | "hdel" | "hexists" | "hincrby" | "hgetall" => {
                self.hash_command(&name, args, now_ms)
            }
            "sadd" | "sismember" => self.set_command(&name, args, now_ms),
            "zadd" => self.zadd(args, now_ms),
            "zcard" | "zcount" | "zscore" | "zrank" | "zrange" | "zrevrange" | "zrangebyscore"
            | "zrangebylex" => self.zset_read(&name, args, now_ms),
            "zrem" | "zremrangebyscore" => self.zset_remove(&name, args, now_ms),
            "publish" => match args {
                [channel, message] => Ok(Reply::Int(publish(channel, message))),
                _ => Err(CommandError::arity(&name)),
            },
            "scan" => self.scan(args, now_ms),
            "dbsize" => Ok(Reply::Int(self.keys(now_ms).len() as i64)),
            "info" => Ok(Reply::Bulk(INFO.as_bytes().to_vec())),
            "config" => config_get(args),
            _ => Err(CommandError::err(format!(
                "unknown command '{name}', with args beginning with: "
            ))),
        }
    }

    fn get(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let [key] = args else {
            return Err(CommandError::arity(name));
        };
        match self.live(key, now_ms).map(|entry| &entry.data) {
            None => Ok(Reply::Nil),
            Some(Data::String(value)) => Ok(Reply::Bulk(value.clone())),
            Some(_) => Err(CommandError::wrong_type()),
        }
    }

    fn set(&mut self, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let [key, value, options @ ..] = args else {
            return Err(CommandError::arity("set"));
        };
        let options = SetOptions::parse(options, now_ms)?;
        let old = self.live(key, now_ms).map(|entry| entry.clone());
        let old_value = match &old {
            Some(Entry {
                data: Data::String(value),
                ..
            }) => Reply::Bulk(value.clone()),
            Some(_) if options.get => return Err(CommandError::wrong_type()),
            _ => Reply::Nil,
        };
        let refused = (options.nx && old.is_some()) || (options.xx && old.is_none());
        if !refused {
            let expires_at_ms = match options.expiry {
                Expiry::Keep => old.as_ref().and_then(|entry| entry.expires_at_ms),
                Expiry::At(at) => Some(at),
                Expiry::Never => None,
            };
            let entry = Entry {
                data: Data::String(value.clone()),
                expires_at_ms,
            };
            self.put(key, entry);
        }
        match (options.get, refused) {
            (true, _) => Ok(old_value),
            (false, true) => Ok(Reply::Nil),
            (false, false) => Ok(Reply::Status("OK")),
        }
    }

    /// INCR and INCRBY: the integer at a string key moved by the step (a missing key is 0),
    /// its expiry kept.
    fn incrby(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let (key, step) = match (name, args) {
            ("incr", [key]) => (key, 1),
            ("incrby", [key, step]) => (key, parse_int(step)?),
            _ => return Err(CommandError::arity(name)),
        };
        let (current, expires_at_ms) = match self.live(key, now_ms) {
            None => (0, None),
            Some(Entry {
                data: Data::String(value),
                expires_at_ms,
            }) => (parse_int(value)?, *expires_at_ms),
            Some(_) => return Err(CommandError::wrong_type()),
        };
        let next = current
            .checked_add(step)
            .ok_or_else(|| CommandError::err("increment or decrement would overflow"))?;
        let entry = Entry {
            data: Data::String(next.to_string().into_bytes()),
            expires_at_ms,
        };
        self.put(key, entry);
        Ok(Reply::Int(next))
    }

    fn setrange(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let [key, offset, value] = args else {
            return Err(CommandError::arity(name));
        };
        let offset = usize::try_from(parse_int(offset)?)
            .map_err(|_| CommandError::err("offset is out of range"))?;
        let entry = match self.live(key, now_ms) {
            Some(entry) => entry,
            None if value.is_empty() => return Ok(Reply::Int(0)),
            None => {
                let entry = Entry {
                    data: Data::String(Vec::new()),
                    expires_at_ms: None,
                };
                self.put(key, entry);
                self.live(key, now_ms).expect("just written")
            }
        };
        let Data::String(stored) = &mut entry.data else {
            return Err(CommandError::wrong_type());
        };
        if !value.is_empty() {
            if stored.len() < offset + value.len() {
                stored.resize(offset + value.len(), 0);
            }
            stored[offset..offset + value.len()].copy_from_slice(value);
        }
        Ok(Reply::Int(stored.len() as i64))
    }

    fn del(&mut self, name: &str, keys: &[Vec<u8>], now_ms: u64) -> Outcome {
        if keys.is_empty() {
            return Err(CommandError::arity(name));
        }
        let removed = keys.iter().filter(|key| self.remove(key, now_ms).is_some());
        Ok(Reply::Int(removed.count() as i64))
    }

    fn exists(&mut self, name: &str, keys: &[Vec<u8>], now_ms: u64) -> Outcome {
        if keys.is_empty() {
            return Err(CommandError::arity(name));
        }
        let found = keys.iter().filter(|key| self.live(key, now_ms).is_some());
        Ok(Reply::Int(found.count() as i64))
    }

    fn type_of(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let [key] = args else {
            return Err(CommandError::arity(name));
        };
        Ok(Reply::Status(match self.live(key, now_ms) {
            Some(entry) => entry.data.type_name(),
            None => "none",
        }))
    }

    /// `PEXPIRE key ms` and `PEXPIREAT key unix-ms` (no NX/XX/GT/LT): a time not in the
    /// future deletes the key, as in Redis.
    fn pexpire(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let [key, when] = args else {
            return Err(CommandError::arity(name));
        };
        let when = parse_int(when)?;
        let at = match name {
            "pexpire" => i128::from(now_ms) + i128::from(when),
            _ => i128::from(when),
        };
        if self.live(key, now_ms).is_none() {
            return Ok(Reply::Int(0));
        }
        if at <= i128::from(now_ms) {
            self.remove(key, now_ms);
            return Ok(Reply::Int(1));
        }
        let at = u64::try_from(at)
            .map_err(|_| CommandError::err(format!("invalid expire time in '{name}' command")))?;
        if let Some(entry) = self.live(key, now_ms) {
            entry.expires_at_ms = Some(at);
        }
        Ok(Reply::Int(1))
    }

    fn pttl(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let [key] = args else {
            return Err(CommandError::arity(name));
        };
        Ok(Reply::Int(match self.ttl_ms(key, now_ms) {
            None => -2,
            Some(None) => -1,
            Some(Some(ms)) => ms as i64,
        }))
    }

    /// The value at `key` if it is of the kind `pick` takes (created by `create` when
    /// missing, if given); Redis's WRONGTYPE error if it is of another kind.
    fn typed<T>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        create: Option<fn() -> Data>,
        pick: fn(&mut Data) -> Option<&mut T>,
    ) -> Result<Option<&mut T>, CommandError> {
        if let Some(create) = create
            && self.live(key, now_ms).is_none()
        {
            let data = create();
            self.put(
                key,
                Entry {
                    data,
                    expires_at_ms: None,
                },
            );
        }
        match self.live(key, now_ms) {
            None => Ok(None),
            Some(entry) => pick(&mut entry.data)
                .map(Some)
                .ok_or_else(CommandError::wrong_type),
        }
    }

    /// The hash at `key`, created empty if missing and `create` is set.
    fn hash(
        &mut self,
        key: &[u8],
        now_ms: u64,
        create: bool,
    ) -> Result<Option<&mut Fields>, CommandError> {
        let empty = create.then_some((|| Data::Hash(Fields::new())) as fn() -> Data);
        self.typed(key, now_ms, empty, |data| match data {
            Data::Hash(fields) => Some(fields),
            _ => None,
        })
    }

    /// `SADD key member …` and `SISMEMBER key member`.
    fn set_command(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let create = name == "sadd";
        let empty = create.then_some((|| Data::Set(BTreeSet::new())) as fn() -> Data);
        match (name, args) {
            ("sadd", [key, members @ ..]) if !members.is_empty() => {
                let set = self.typed(key, now_ms, empty, |data| match data {
                    Data::Set(set) => Some(set),
                    _ => None,
                })?;
                let set = set.expect("created");
                let added = members.iter().filter(|m| set.insert(m.to_vec())).count();
                Ok(Reply::Int(added as i64))
            }
            ("sismember", [key, member]) => {
                let set = self.typed(key, now_ms, empty, |data| match data {
                    Data::Set(set) => Some(set),
                    _ => None,
                })?;
                Ok(Reply::Int(set.is_some_and(|s| s.contains(member)).into()))
            }
            _ => Err(CommandError::arity(name)),
        }
    }

    fn hash_command(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let Some((key, args)) = args.split_first() else {
            return Err(CommandError::arity(name));
        };
        match (name, args) {
            ("hset", pairs) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
                let hash = self.hash(key, now_ms, true)?.expect("created");
                let added = (pairs.chunks(2))
                    .filter(|pair| hash.insert(pair[0].clone(), pair[1].clone()).is_none());
                Ok(Reply::Int(added.count() as i64))
            }
            ("hget", [field]) => Ok(match self.hash(key, now_ms, false)? {
                Some(hash) => hash.get(field).cloned().map_or(Reply::Nil, Reply::Bulk),
                None => Reply::Nil,
            }),
            ("hmget", fields) if !fields.is_empty() => {
                let hash = self.hash(key, now_ms, false)?;
                Ok(Reply::Array(
                    (fields.iter())
                        .map(|field| match hash.as_ref().and_then(|h| h.get(field)) {
                            Some(value) => Reply::Bulk(value.clone()),
                            None => Reply::Nil,
                        })
                        .collect(),
                ))
            }
            ("hexists", [field]) => {
                let hash = self.hash(key, now_ms, false)?;
                Ok(Reply::Int(
                    hash.is_some_and(|h| h.contains_key(field)).into(),
                ))
            }
            ("hdel", fields) if !fields.is_empty() => {
                let Some(hash) = self.hash(key, now_ms, false)? else {
                    return Ok(Reply::Int(0));
                };
                let removed = fields.iter().filter(|f| hash.remove(*f).is_some()).count();
                if hash.is_empty() {
                    self.remove(key, now_ms);
                }
                Ok(Reply::Int(removed as i64))
            }
            ("hincrby", [field, by]) => {
                let by = parse_int(by)?;
                let hash = self.hash(key, now_ms, true)?.expect("created");
                let current = match hash.get(field) {
                    Some(value) => parse_int(value)
                        .map_err(|_| CommandError::err("hash value is not an integer"))?,
                    None => 0,
                };
                let sum = current
                    .checked_add(by)
                    .ok_or_else(|| CommandError::err("increment or decrement would overflow"))?;
                hash.insert(field.clone(), sum.to_string().into_bytes());
                Ok(Reply::Int(sum))
            }
            ("hgetall", []) => Ok(Reply::Array(match self.hash(key, now_ms, false)? {
                Some(hash) => (hash.iter())
                    .flat_map(|(f, v)| [Reply::Bulk(f.clone()), Reply::Bulk(v.clone())])
                    .collect(),
                None => Vec::new(),
            })),
            _ => Err(CommandError::arity(name)),
        }
    }

    /// The sorted set at `key`, created empty if missing and `create` is set.
    fn sorted_set(
        &mut self,
        key: &[u8],
        now_ms: u64,
        create: bool,
    ) -> Result<Option<&mut SortedSet>, CommandError> {
        let empty = create.then_some((|| Data::SortedSet(SortedSet::default())) as fn() -> Data);
        self.typed(key, now_ms, empty, |data| match data {
            Data::SortedSet(set) => Some(set),
            _ => None,
        })
    }

    /// `ZADD key [NX|XX] [GT|LT] [CH] score member …`.
    fn zadd(&mut self, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let Some((key, mut rest)) = args.split_first() else {
            return Err(CommandError::arity("zadd"));
        };
        let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
        while let Some((flag, tail)) = rest.split_first() {
            match flag.to_ascii_lowercase().as_slice() {
                b"nx" => nx = true,
                b"xx" => xx = true,
                b"gt" => gt = true,
                b"lt" => lt = true,
                b"ch" => ch = true,
                _ => break,
            }
            rest = tail;
        }
        if rest.is_empty() || rest.len() % 2 != 0 || (nx && xx) || (gt && lt) || (nx && (gt || lt))
        {
            return Err(CommandError::syntax());
        }
        let pairs: Vec<(f64, &[u8])> = (rest.chunks(2))
            .map(|pair| Ok((parse_score(&pair[0])?, pair[1].as_slice())))
            .collect::<Result<_, CommandError>>()?;
        if xx && self.sorted_set(key, now_ms, false)?.is_none() {
            return Ok(Reply::Int(0));
        }
        let set = self.sorted_set(key, now_ms, true)?.expect("created");
        let (mut added, mut changed) = (0, 0);
        for (score, member) in pairs {
            let old = set.scores.get(member).copied();
            let update =
                |old: f64| !(nx || old == score || (gt && score < old) || (lt && score > old));
            match old {
                None if !xx => {
                    set.insert(member, score);
                    added += 1;
                }
                Some(old) if update(old) => {
                    set.insert(member, score);
                    changed += 1;
                }
                _ => {}
            }
        }
        if set.len() == 0 {
            self.remove(key, now_ms);
        }
        Ok(Reply::Int(if ch { added + changed } else { added }))
    }

    fn zset_read(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let Some((key, args)) = args.split_first() else {
            return Err(CommandError::arity(name));
        };
        let empty = SortedSet::default();
        let found = self.sorted_set(key, now_ms, false)?;
        let set: &SortedSet = found.map_or(&empty, |set| &*set);
        match (name, args) {
            ("zcard", []) => Ok(Reply::Int(set.len() as i64)),
            ("zcount", [min, max]) => {
                let range = ScoreRange::parse(min, max)?;
                Ok(Reply::Int(set.in_range(&range).count() as i64))
            }
            ("zscore", [member]) => Ok(match set.scores.get(member) {
                Some(score) => Reply::Bulk(format_score(*score).into_bytes()),
                None => Reply::Nil,
            }),
            ("zrank", [member]) => Ok(match set.scores.get(member) {
                Some(score) => {
                    let place = (Score(*score), member.clone());
                    Reply::Int(set.order.range(..place).count() as i64)
                }
                None => Reply::Nil,
            }),
            ("zrange" | "zrevrange", [start, stop, options @ ..]) => {
                let scores = with_scores(options)?;
                let all: Vec<(f64, &[u8])> = match name {
                    "zrange" => set.order.iter().map(|(s, m)| (s.0, m.as_slice())).collect(),
                    _ => (set.order.iter().rev())
                        .map(|(s, m)| (s.0, m.as_slice()))
                        .collect(),
                };
                let (start, stop) = (parse_int(start)?, parse_int(stop)?);
                Ok(listed(index_range(&all, start, stop), scores))
            }
            ("zrangebyscore", [min, max, options @ ..]) => {
                let range = ScoreRange::parse(min, max)?;
                let (scores, offset, count) = range_options(options)?;
                let found = set.in_range(&range).skip(offset);
                let found: Vec<(f64, &[u8])> = match count {
                    Some(count) => found.take(count).collect(),
                    None => found.collect(),
                };
                Ok(listed(&found, scores))
            }
            // (The members all of one score, as Redis requires for a meaningful answer.)
            ("zrangebylex", [min, max]) => {
                let (min, max) = (LexBound::parse(min)?, LexBound::parse(max)?);
                let found: Vec<(f64, &[u8])> = (set.order.iter())
                    .map(|(score, member)| (score.0, member.as_slice()))
                    .filter(|(_, member)| min.below(member) && max.above(member))
                    .collect();
                Ok(listed(&found, false))
            }
            _ => Err(CommandError::arity(name)),
        }
    }

    fn zset_remove(&mut self, name: &str, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let Some((key, args)) = args.split_first() else {
            return Err(CommandError::arity(name));
        };
        let removed = match (name, args) {
            ("zrem", members) if !members.is_empty() => {
                let Some(set) = self.sorted_set(key, now_ms, false)? else {
                    return Ok(Reply::Int(0));
                };
                members.iter().filter(|member| set.remove(member)).count()
            }
            ("zremrangebyscore", [min, max]) => {
                let range = ScoreRange::parse(min, max)?;
                let Some(set) = self.sorted_set(key, now_ms, false)? else {
                    return Ok(Reply::Int(0));
                };
                let doomed: Vec<Vec<u8>> = set
                    .in_range(&range)
                    .map(|(_, member)| member.to_vec())
                    .collect();
                doomed.iter().filter(|member| set.remove(member)).count()
            }
            _ => return Err(CommandError::arity(name)),
        };
        if self
            .sorted_set(key, now_ms, false)?
            .is_some_and(|set| set.len() == 0)
        {
            self.remove(key, now_ms);
        }
        Ok(Reply::Int(removed as i64))
    }

    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`: a key present from the first call
    /// to the last is returned exactly once, as Redis guarantees.
    fn scan(&mut self, args: &[Vec<u8>], now_ms: u64) -> Outcome {
        let Some((cursor, mut options)) = args.split_first() else {
            return Err(CommandError::arity("scan"));
        };
        let cursor: u64 = std::str::from_utf8(cursor)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| CommandError::err("invalid cursor"))?;
        let (mut pattern, mut count, mut kind) = (None, 10usize, None);
        while let [option, value, rest @ ..] = options {
            match option.to_ascii_lowercase().as_slice() {
                b"match" => pattern = Some(value.clone()),
                b"count" => {
                    count = usize::try_from(parse_int(value)?)
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(CommandError::syntax)?
                }
                b"type" => kind = Some(String::from_utf8_lossy(value).to_ascii_lowercase()),
                _ => return Err(CommandError::syntax()),
            }
            options = rest;
        }
        if !options.is_empty() {
            return Err(CommandError::syntax());
        }
        let mut visited = self.entries.range((cursor, Vec::new())..).peekable();
        let (mut keys, mut seen) = (Vec::new(), 0);
        let mut next = 0;
        while let Some(((hash, key), entry)) = visited.next() {
            seen += 1;
            let live = entry.alive_at(now_ms);
            let wanted = pattern.as_ref().is_none_or(|p| matches(p, key))
                && kind.as_ref().is_none_or(|k| k == entry.data.type_name());
            if live && wanted {
                keys.push(Reply::Bulk(key.clone()));
            }
            // Keys of one hash go out together, so the cursor (a hash) never splits them.
            match visited.peek() {
                Some(((following, _), _)) if seen >= count && following != hash => {
                    next = *following;
                    break;
                }
                _ => {}
            }
        }
        Ok(Reply::Array(vec![
            Reply::Bulk(next.to_string().into_bytes()),
            Reply::Array(keys),
        ]))
    }
}

/// What `INFO` says of this server (whatever section is asked for): a master that never
/// evicts and keeps nothing on disk.
const INFO: &str = "# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\n\
    # Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n\
    # Persistence\r\naof_enabled:0\r\nrdb_bgsave_in_progress:0\r\n\
    # Replication\r\nrole:master\r\nconnected_slaves:0\r\n";

/// `CONFIG GET name`: the settings `INFO` implies; nothing for other names, as Redis
/// answers for an unknown one.
fn config_get(args: &[Vec<u8>]) -> Outcome {
    let [sub, name] = args else {
        return Err(CommandError::arity("config"));
    };
    if !sub.eq_ignore_ascii_case(b"get") {
        return Err(CommandError::err("only CONFIG GET is supported here"));
    }
    let value = match name.to_ascii_lowercase().as_slice() {
        b"maxmemory-policy" => "noeviction",
        b"maxmemory" => "0",
        b"appendonly" => "no",
        b"appendfsync" => "everysec",
        b"save" => "",
        _ => return Ok(Reply::Array(Vec::new())),
    };
    Ok(Reply::Array(vec![
        Reply::Bulk(name.clone()),
        Reply::Bulk(value.as_bytes().to_vec()),
    ]))
}

fn time(now_us: u64) -> Reply {
    Reply::Array(vec![
        Reply::Bulk((now_us / 1_000_000).to_string().into_bytes()),
        Reply::Bulk((now_us % 1_000_000).to_string().into_bytes()),
    ])
}

/// How `SET` expires the key it writes.
enum Expiry {
    Never,
    Keep,
    At(u64),
}

struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    expiry: Expiry,
}

impl SetOptions {
    fn parse(mut options: &[Vec<u8>], now_ms: u64) -> Result<SetOptions, CommandError> {
        let mut parsed = SetOptions {
            nx: false,
            xx: false,
            get: false,
            expiry: Expiry::Never,
        };
        let mut expiry_given = false;
        while let Some((option, rest)) = options.split_first() {
            options = rest;
            let option = option.to_ascii_lowercase();
            let timed = matches!(option.as_slice(), b"ex" | b"px" | b"exat" | b"pxat");
            if timed || option == b"keepttl" {
                if expiry_given {
                    return Err(CommandError::syntax());
                }
                expiry_given = true;
            }
            if !timed {
                match option.as_slice() {
                    b"nx" => parsed.nx = true,
                    b"xx" => parsed.xx = true,
                    b"get" => parsed.get = true,
                    b"keepttl" => parsed.expiry = Expiry::Keep,
                    _ => return Err(CommandError::syntax()),
                }
                continue;
            }
            let Some((amount, rest)) = options.split_first() else {
                return Err(CommandError::syntax());
            };
            options = rest;
            let amount = parse_int(amount)?;
            if amount <= 0 {
                return Err(CommandError::err("invalid expire time in 'set' command"));
            }
            let amount = amount as u64;
            parsed.expiry = Expiry::At(match option.as_slice() {
                b"ex" => now_ms.saturating_add(amount.saturating_mul(1000)),
                b"px" => now_ms.saturating_add(amount),
                b"exat" => amount.saturating_mul(1000),
                _ => amount,
            });
        }
        if parsed.nx && parsed.xx {
            return Err(CommandError::syntax());
        }
        Ok(parsed)
    }
}

/// An integer argument, as Redis reads it (no spaces, no `+`, no leading zeros but `0`).
fn parse_int(arg: &[u8]) -> Result<i64, CommandError> {
    let text = std::str::from_utf8(arg).map_err(|_| CommandError::not_integer())?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text != "-0";
    match canonical {
        true => text.parse().map_err(|_| CommandError::not_integer()),
        false => Err(CommandError::not_integer()),
    }
}

/// A score argument: a float, `inf`, `+inf`, `-inf` (never NaN).
fn parse_score(arg: &[u8]) -> Result<f64, CommandError> {
    let bad = || CommandError::err("value is not a valid float");
    let text = std::str::from_utf8(arg).map_err(|_| bad())?;
    let score = match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ if text.trim() != text || text.is_empty() => return Err(bad()),
        _ => text.parse::<f64>().map_err(|_| bad())?,
    };
    match score.is_nan() {
        true => Err(bad()),
        false => Ok(score),
    }
}

/// A score as Redis prints it: integers without a fraction, `inf`, `-inf`, otherwise the
/// shortest text that reads back the same.
pub(crate) fn format_score(score: f64) -> String {
    if score.is_infinite() {
        return if score > 0.0 { "inf" } else { "-inf" }.into();
    }
    if score.fract() == 0.0 && score.abs() < 1e17 {
        return format!("{}", score as i64);
    }
    format!("{score}")
}

fn with_scores(options: &[Vec<u8>]) -> Result<bool, CommandError> {
    match options {
        [] => Ok(false),
        [flag] if flag.eq_ignore_ascii_case(b"withscores") => Ok(true),
        _ => Err(CommandError::syntax()),
    }
}

/// `[WITHSCORES] [LIMIT offset count]` of ZRANGEBYSCORE.
fn range_options(mut options: &[Vec<u8>]) -> Result<(bool, usize, Option<usize>), CommandError> {
    let (mut scores, mut offset, mut count) = (false, 0, None);
    while let Some((option, rest)) = options.split_first() {
        match (option.to_ascii_lowercase().as_slice(), rest) {
            (b"withscores", _) => {
                scores = true;
                options = rest;
            }
            (b"limit", [from, many, rest @ ..]) => {
                offset = usize::try_from(parse_int(from)?).unwrap_or(usize::MAX);
                // A negative count means all, as in Redis.
                count = usize::try_from(parse_int(many)?).ok();
                options = rest;
            }
            _ => return Err(CommandError::syntax()),
        }
    }
    Ok((scores, offset, count))
}

/// `start..=stop` of `all`, negative indexes counting from the end, as ZRANGE reads them.
fn index_range<T>(all: &[T], start: i64, stop: i64) -> &[T] {
    let len = all.len() as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return &[];
    }
    &all[start as usize..=stop as usize]
}

fn listed(members: &[(f64, &[u8])], scores: bool) -> Reply {
    let mut out = Vec::with_capacity(members.len() * if scores { 2 } else { 1 });
    for (score, member) in members {
        out.push(Reply::Bulk(member.to_vec()));
        if scores {
            out.push(Reply::Bulk(format_score(*score).into_bytes()));
        }
    }
    Reply::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(keyspace: &mut Keyspace, now_ms: u64, args: &[&str]) -> Outcome {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        keyspace.execute(&args, now_ms * 1000, &mut |_, _| 0)
    }

    fn bulk(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    #[test]
    fn set_nx_px_expires_on_the_clock() {
        let mut ks = Keyspace::default();
        assert_eq!(
            run(&mut ks, 1_000, &["set", "k", "v", "nx", "px", "100"]),
            Ok(Reply::Status("OK"))
        );
        assert_eq!(
            run(&mut ks, 1_050, &["set", "k", "w", "NX", "PX", "100"]),
            Ok(Reply::Nil)
        );
        assert_eq!(run(&mut ks, 1_050, &["pttl", "k"]), Ok(Reply::Int(50)));
        assert_eq!(run(&mut ks, 1_099, &["get", "k"]), Ok(bulk("v")));
        // As Redis keeps it: through the last millisecond of its expiry.
        assert_eq!(run(&mut ks, 1_100, &["get", "k"]), Ok(bulk("v")));
        assert_eq!(run(&mut ks, 1_100, &["pttl", "k"]), Ok(Reply::Int(0)));
        assert_eq!(run(&mut ks, 1_101, &["get", "k"]), Ok(Reply::Nil));
        assert_eq!(run(&mut ks, 1_101, &["pttl", "k"]), Ok(Reply::Int(-2)));
        assert!(ks.keys(1_101).is_empty());
    }

    #[test]
    fn keepttl_and_setrange_keep_the_expiry() {
        let mut ks = Keyspace::default();
        run(&mut ks, 0, &["set", "k", "abc", "px", "500"]).unwrap();
        assert_eq!(
            run(&mut ks, 100, &["setrange", "k", "5", "z"]),
            Ok(Reply::Int(6))
        );
        assert_eq!(
            run(&mut ks, 100, &["get", "k"]),
            Ok(Reply::Bulk(b"abc\0\0z".to_vec()))
        );
        run(&mut ks, 200, &["set", "k", "new", "keepttl"]).unwrap();
        assert_eq!(run(&mut ks, 200, &["pttl", "k"]), Ok(Reply::Int(300)));
        run(&mut ks, 200, &["set", "k", "plain"]).unwrap();
        assert_eq!(run(&mut ks, 200, &["pttl", "k"]), Ok(Reply::Int(-1)));
    }

    #[test]
    fn wrong_types_and_bad_arguments_are_refused() {
        let mut ks = Keyspace::default();
        run(&mut ks, 0, &["hset", "h", "f", "1"]).unwrap();
        assert_eq!(
            run(&mut ks, 0, &["get", "h"]).unwrap_err().code,
            "WRONGTYPE"
        );
        assert_eq!(
            run(&mut ks, 0, &["zadd", "h", "1", "m"]).unwrap_err().code,
            "WRONGTYPE"
        );
        assert_eq!(run(&mut ks, 0, &["type", "h"]), Ok(Reply::Status("hash")));
        assert_eq!(
            run(&mut ks, 0, &["type", "nothing"]),
            Ok(Reply::Status("none"))
        );
        let error = run(&mut ks, 0, &["set", "k", "v", "px", "0"]).unwrap_err();
        assert_eq!(error.message, "invalid expire time in 'set' command");
        assert!(run(&mut ks, 0, &["set", "k", "v", "px", "01"]).is_err());
        assert!(run(&mut ks, 0, &["set", "k", "v", "nx", "xx"]).is_err());
        let error = run(&mut ks, 0, &["flushall"]).unwrap_err();
        assert!(
            error.message.starts_with("unknown command 'flushall'"),
            "{error:?}"
        );
        assert!(ks.keys(0) == vec![b"h".to_vec()]);
    }

    #[test]
    fn zrangebylex_reads_members_between_its_bounds() {
        let mut ks = Keyspace::default();
        let zadd = [
            "zadd", "lex", "0", "a:1", "0", "ab:2", "0", "a:3", "0", "b:4",
        ];
        assert_eq!(run(&mut ks, 0, &zadd), Ok(Reply::Int(4)));
        let mut range = |min: &str, max: &str| run(&mut ks, 0, &["zrangebylex", "lex", min, max]);
        let members = |names: &[&str]| Ok(Reply::Array(names.iter().map(|n| bulk(n)).collect()));
        // A token's requests: from `[a:` up to, not including, `(a;`.
        assert_eq!(range("[a:", "(a;"), members(&["a:1", "a:3"]));
        assert_eq!(range("(a:1", "+"), members(&["a:3", "ab:2", "b:4"]));
        assert_eq!(range("-", "[ab:2"), members(&["a:1", "a:3", "ab:2"]));
        assert_eq!(range("[c", "+"), members(&[]));
        assert_eq!(range("+", "-"), members(&[]));
        assert!(range("a", "+").is_err());
        assert_eq!(
            run(&mut ks, 0, &["zrangebylex", "missing", "-", "+"]),
            members(&[])
        );
        run(&mut ks, 0, &["set", "str", "v"]).unwrap();
        let error = run(&mut ks, 0, &["zrangebylex", "str", "-", "+"]).unwrap_err();
        assert_eq!(error.code, "WRONGTYPE");
    }

    #[test]
    fn sets_add_members_once_and_answer_membership_by_type() {
        let mut ks = Keyspace::default();
        assert_eq!(run(&mut ks, 0, &["sismember", "s", "a"]), Ok(Reply::Int(0)));
        assert_eq!(
            run(&mut ks, 0, &["sadd", "s", "a", "b", "a"]),
            Ok(Reply::Int(2))
        );
        assert_eq!(run(&mut ks, 0, &["sadd", "s", "b"]), Ok(Reply::Int(0)));
        assert_eq!(run(&mut ks, 0, &["sismember", "s", "b"]), Ok(Reply::Int(1)));
        assert_eq!(run(&mut ks, 0, &["sismember", "s", "c"]), Ok(Reply::Int(0)));
        assert_eq!(run(&mut ks, 0, &["type", "s"]), Ok(Reply::Status("set")));
        run(&mut ks, 0, &["set", "k", "v"]).unwrap();
        for command in [&["sadd", "k", "a"][..], &["sismember", "k", "a"]] {
            assert_eq!(run(&mut ks, 0, command).unwrap_err().code, "WRONGTYPE");
        }
        assert!(run(&mut ks, 0, &["sadd", "s"]).is_err());
        assert!(run(&mut ks, 0, &["sismember", "s"]).is_err());
    }

    #[test]
    fn pexpire_in_the_past_deletes() {
        let mut ks = Keyspace::default();
        run(&mut ks, 1_000, &["set", "k", "v"]).unwrap();
        assert_eq!(
            run(&mut ks, 1_000, &["pexpireat", "k", "5000"]),
            Ok(Reply::Int(1))
        );
        assert_eq!(run(&mut ks, 1_000, &["pttl", "k"]), Ok(Reply::Int(4000)));
        assert_eq!(
            run(&mut ks, 1_000, &["pexpire", "k", "0"]),
            Ok(Reply::Int(1))
        );
        assert_eq!(run(&mut ks, 1_000, &["exists", "k"]), Ok(Reply::Int(0)));
        assert_eq!(
            run(&mut ks, 1_000, &["pexpire", "k", "10"]),
            Ok(Reply::Int(0))
        );
    }

    #[test]
    fn hashes_count_and_vanish_when_empty() {
        let mut ks = Keyspace::default();
        assert_eq!(
            run(&mut ks, 0, &["hset", "h", "a", "1", "b", "2"]),
            Ok(Reply::Int(2))
        );
        assert_eq!(run(&mut ks, 0, &["hset", "h", "a", "3"]), Ok(Reply::Int(0)));
        assert_eq!(
            run(&mut ks, 0, &["hincrby", "h", "a", "-5"]),
            Ok(Reply::Int(-2))
        );
        assert_eq!(run(&mut ks, 0, &["hget", "h", "a"]), Ok(bulk("-2")));
        assert_eq!(run(&mut ks, 0, &["hexists", "h", "b"]), Ok(Reply::Int(1)));
        assert_eq!(
            run(&mut ks, 0, &["hmget", "h", "a", "x", "b"]),
            Ok(Reply::Array(vec![bulk("-2"), Reply::Nil, bulk("2")]))
        );
        assert_eq!(
            run(&mut ks, 0, &["hmget", "none", "a"]),
            Ok(Reply::Array(vec![Reply::Nil]))
        );
        assert_eq!(
            run(&mut ks, 0, &["hdel", "h", "a", "b", "c"]),
            Ok(Reply::Int(2))
        );
        assert_eq!(run(&mut ks, 0, &["exists", "h"]), Ok(Reply::Int(0)));
    }

    #[test]
    fn sorted_sets_order_by_score_then_member() {
        let mut ks = Keyspace::default();
        run(
            &mut ks,
            0,
            &["zadd", "z", "2", "b", "2", "a", "1", "c", "+inf", "d"],
        )
        .unwrap();
        let all = run(&mut ks, 0, &["zrange", "z", "0", "-1"]).unwrap();
        assert_eq!(
            all,
            Reply::Array(vec![bulk("c"), bulk("a"), bulk("b"), bulk("d")])
        );
        assert_eq!(run(&mut ks, 0, &["zrank", "z", "b"]), Ok(Reply::Int(2)));
        assert_eq!(
            run(&mut ks, 0, &["zcount", "z", "(1", "+inf"]),
            Ok(Reply::Int(3))
        );
        assert_eq!(
            run(&mut ks, 0, &["zrevrange", "z", "0", "0", "withscores"]),
            Ok(Reply::Array(vec![bulk("d"), bulk("inf")]))
        );
        assert_eq!(
            run(
                &mut ks,
                0,
                &[
                    "zrangebyscore",
                    "z",
                    "-inf",
                    "2",
                    "withscores",
                    "limit",
                    "1",
                    "1"
                ]
            ),
            Ok(Reply::Array(vec![bulk("a"), bulk("2")]))
        );
        assert_eq!(
            run(&mut ks, 0, &["zadd", "z", "xx", "5", "new"]),
            Ok(Reply::Int(0))
        );
        assert_eq!(
            run(&mut ks, 0, &["zadd", "z", "xx", "ch", "0.5", "a"]),
            Ok(Reply::Int(1))
        );
        assert_eq!(run(&mut ks, 0, &["zscore", "z", "a"]), Ok(bulk("0.5")));
        assert_eq!(
            run(&mut ks, 0, &["zremrangebyscore", "z", "-inf", "(2"]),
            Ok(Reply::Int(2))
        );
        assert_eq!(run(&mut ks, 0, &["zrem", "z", "b", "d"]), Ok(Reply::Int(2)));
        assert_eq!(run(&mut ks, 0, &["type", "z"]), Ok(Reply::Status("none")));
        assert!(run(&mut ks, 0, &["zadd", "z", "nan", "x"]).is_err());
    }

    #[test]
    fn scan_returns_every_key_once_while_keys_come_and_go() {
        let mut ks = Keyspace::default();
        for i in 0..500 {
            run(&mut ks, 0, &["set", &format!("lock:{i}"), "v"]).unwrap();
        }
        run(&mut ks, 0, &["set", "other", "v"]).unwrap();
        let (mut cursor, mut seen, mut calls) = ("0".to_string(), Vec::new(), 0);
        loop {
            let reply = run(
                &mut ks,
                0,
                &["scan", &cursor, "match", "lock:*", "count", "50"],
            );
            let Ok(Reply::Array(parts)) = reply else {
                panic!("{reply:?}")
            };
            let [Reply::Bulk(next), Reply::Array(keys)] = parts.as_slice() else {
                panic!()
            };
            seen.extend(keys.iter().cloned());
            // Keys written and deleted meanwhile do not disturb the others.
            run(&mut ks, 0, &["set", &format!("lock:new:{calls}"), "v"]).unwrap();
            run(&mut ks, 0, &["del", &format!("lock:new:{calls}")]).unwrap();
            calls += 1;
            cursor = String::from_utf8(next.clone()).unwrap();
            if cursor == "0" {
                break;
            }
        }
        assert!((10..=12).contains(&calls), "{calls} calls");
        seen.sort_by_key(|reply| format!("{reply:?}"));
        let before = seen.len();
        seen.dedup();
        assert_eq!((before, seen.len()), (500, 500));
    }

    #[test]
    fn time_is_seconds_and_microseconds() {
        let mut ks = Keyspace::default();
        let reply = ks.execute(&[b"TIME".to_vec()], 1_795_489_923_123_456, &mut |_, _| 0);
        assert_eq!(
            reply,
            Ok(Reply::Array(vec![bulk("1795489923"), bulk("123456")]))
        );
    }

    #[test]
    fn integers_are_read_as_redis_reads_them() {
        assert_eq!(parse_int(b"42"), Ok(42));
        assert_eq!(parse_int(b"-7"), Ok(-7));
        for bad in ["", "+1", " 1", "1.0", "007", "-0", "9223372036854775808"] {
            assert!(parse_int(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(format_score(1795489923123.0), "1795489923123");
        assert_eq!(format_score(-2.5), "-2.5");
    }
}
