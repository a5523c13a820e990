//! Fencing tokens: where each key's counter lives, how long it is kept, and the Redis
//! Cluster hash-slot maths that decides where.
//!
//! A fence is taken only when it is asked for: [`Lock::fence`](crate::Lock::fence) runs an
//! owner-checked script that moves the counters of the lock's keys to the next fence while
//! this owner still holds every key (or the acquire takes it with the keys, see
//! [`Acquire::with_fence`](crate::Acquire::with_fence)). Locks whose fence nobody reads
//! cost nothing and leave no counter.
//!
//! The counter must live in the key's hash slot, so that one script may touch both on Redis
//! Cluster; its name is derived from the key:
//!
//! - a key `K` without a hash tag and without `}` gets `{K}:fence`: its tag is the whole
//!   key, so it hashes like the key;
//! - a key with a hash tag `{t}` gets `{t}:fence:K` — same tag;
//! - a key with no hash tag that contains `}` (so it cannot be wrapped in braces) gets
//!   `{T}:fence:K`, where `T` is a short tag chosen to hash to the key's slot.
//!
//! A tag never contains `}`, so these names cannot collide with each other. Lock keys
//! (prefix included) of the forms `{…}:fence` and `{…}:fence:…` are refused
//! ([`reserved_as`]), so no lock key can ever be a counter; the same goes for the other
//! companions: a semaphore's details (`:permits`), a fair lock's queue (`:queue`), a read-write lock's readers and writers' intents, a lock's
//! line of waiting lockers (`:line`), and the holders asked to let a key go (`:ask`).
//!
//! Counters expire [`DEFAULT_RETENTION`] (configurable) after their last use, so that keys
//! locked once do not leave a key behind forever. A missing counter counts on from the
//! server's clock in microseconds (in the scripts' `next_fence`), which has passed every
//! fence the expired counter handed out — one fence per microsecond being far beyond what a
//! Redis node serves — as long as the server's clock was not set back by the retention
//! period or more meanwhile.

use std::sync::LazyLock;

/// How long a fence counter is kept after its last use, unless the locker says otherwise
/// ([`Locker::with_fence_retention`](crate::Locker::with_fence_retention)): one day.
pub const DEFAULT_FENCE_RETENTION: std::time::Duration = std::time::Duration::from_secs(86_400);

/// A locker's fence settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fences {
    /// Fences may be taken (not [`Locker::without_fences`](crate::Locker::without_fences)).
    pub(crate) enabled: bool,
    /// How long a counter is kept after its last use.
    pub(crate) retention_ms: u64,
}

impl Default for Fences {
    fn default() -> Fences {
        Fences {
            enabled: true,
            retention_ms: DEFAULT_FENCE_RETENTION.as_millis() as u64,
        }
    }
}

/// The shortest fence retention accepted: a second.
pub(crate) const MIN_FENCE_RETENTION: std::time::Duration = std::time::Duration::from_secs(1);

/// Redis Cluster's number of hash slots.
pub(crate) const SLOTS: u16 = 16384;

/// The name of the fence counter of `key` (see the module docs).
pub(crate) fn counter_key(key: &[u8]) -> Vec<u8> {
    companion_key(key, Companion::Fence)
}

/// A key that lives beside a lock key or a semaphore, in its hash slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Companion {
    /// The fence counter of a key or semaphore.
    Fence,
    /// A semaphore's holders' details (permits, metadata, the agreed limit).
    Permits,
    /// A fair lock's waiters, in arrival order, with their heartbeats.
    Queue,
    /// A read-write lock's readers' details (metadata).
    Readers,
    /// A read-write lock's waiting writers' intents.
    Intents,
    /// The lockers waiting for a mutex key, in line (see `helpers.lua`).
    Line,
    /// The holders of a key asked to let it go (see `listing.lua`'s `ask`).
    Ask,
}

impl Companion {
    /// Every kind, for the reserved-name check.
    pub(crate) const ALL: [Companion; 7] = [
        Companion::Fence,
        Companion::Permits,
        Companion::Queue,
        Companion::Readers,
        Companion::Intents,
        Companion::Line,
        Companion::Ask,
    ];

    /// The part of the name after the tag's `}`.
    pub(crate) fn suffix(self) -> &'static [u8] {
        match self {
            Companion::Fence => b":fence",
            Companion::Permits => b":permits",
            Companion::Queue => b":queue",
            Companion::Readers => b":readers",
            Companion::Intents => b":intents",
            Companion::Line => b":line",
            Companion::Ask => b":ask",
        }
    }

    /// What such keys are, for messages.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Companion::Fence => "fence counters",
            Companion::Permits => "semaphores' details",
            Companion::Queue => "fair locks' queues",
            Companion::Readers => "read-write locks' readers",
            Companion::Intents => "read-write locks' waiting writers",
            Companion::Line => "locks' lines of waiting lockers",
            Companion::Ask => "requests to release held locks",
        }
    }
}

/// The name of `key`'s companion of this kind, in `key`'s hash slot (see the module docs:
/// `{K}:fence`, `{t}:fence:K`, or `{T}:fence:K`, and the same with the other suffixes).
pub(crate) fn companion_key(key: &[u8], kind: Companion) -> Vec<u8> {
    let suffix = kind.suffix();
    let mut name = Vec::with_capacity(key.len() + 16);
    name.push(b'{');
    if let Some(tag) = hash_tag(key) {
        name.extend_from_slice(tag);
        name.push(b'}');
        name.extend_from_slice(suffix);
        name.push(b':');
        name.extend_from_slice(key);
    } else if !key.contains(&b'}') {
        name.extend_from_slice(key);
        name.push(b'}');
        name.extend_from_slice(suffix);
    } else {
        name.extend_from_slice(&SLOT_TAGS[usize::from(hash_slot(key))]);
        name.push(b'}');
        name.extend_from_slice(suffix);
        name.push(b':');
        name.extend_from_slice(key);
    }
    name
}

/// Whether `key` (with the prefix) has the form of a fence counter — `{…}:fence` or
/// `{…}:fence:…` with no `}` inside the braces — and so may not be a lock key. This is the
/// set of every name [`counter_key`] can produce, and a little more, stated simply.
#[cfg(test)]
fn is_counter_name(key: &[u8]) -> bool {
    reserved_as(key) == Some(Companion::Fence)
}

/// Which companion `key` (with the prefix) is named like, if any — `{…}:fence`,
/// `{…}:fence:…`, `{…}:permits`, `{…}:queue:…` and so on, with no `}` inside the braces: such a
/// name may not be a lock key or a semaphore.
pub(crate) fn reserved_as(key: &[u8]) -> Option<Companion> {
    let rest = key.strip_prefix(b"{")?;
    let close = rest.iter().position(|&b| b == b'}')?;
    if close == 0 {
        return None;
    }
    Companion::ALL
        .into_iter()
        .find(|kind| match rest[close + 1..].strip_prefix(kind.suffix()) {
            Some(tail) => tail.is_empty() || tail[0] == b':',
            None => false,
        })
}

/// The part of `key` that Redis Cluster hashes, if it is not the whole key: the bytes
/// between the first `{` and the first `}` after it, when there are any.
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the bytes between
/// the first `{` and the next `}`, if not empty), or of the whole key, modulo 16384. The
/// keys of one multi-key lock on a cluster must share it.
pub(crate) fn hash_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster uses it.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        let crc = crc ^ (u16::from(byte) << 8);
        (0..8).fold(crc, |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// For every slot, a short tag that hashes to it: found once, by trying the tags `0`,
/// `1`, … in base 36 until every slot has one (about 150,000 CRCs, under a millisecond
/// or two). Only keys without a hash tag that contain `}` need it.
static SLOT_TAGS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut tags: Vec<Vec<u8>> = vec![Vec::new(); usize::from(SLOTS)];
    let mut missing = usize::from(SLOTS);
    let mut n: u64 = 0;
    while missing > 0 {
        let tag = base36(n);
        let slot = usize::from(crc16(&tag) % SLOTS);
        if tags[slot].is_empty() {
            tags[slot] = tag;
            missing -= 1;
        }
        n += 1;
    }
    tags
});

fn base36(mut n: u64) -> Vec<u8> {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_reference_check_value() {
        // The CRC-16/XMODEM check value, and the example in the Redis Cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on a real cluster (also checked live in the
        // cluster tests).
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"bar"), 5061);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(hash_slot(b"foo{{bar}}zap"), hash_slot(b"{bar"));
        assert_eq!(hash_slot(b"foo{bar}{zap}"), hash_slot(b"bar"));
    }

    #[test]
    fn hash_tags_are_the_first_non_empty_braces() {
        assert_eq!(hash_tag(b"a{b}c"), Some(&b"b"[..]));
        assert_eq!(hash_tag(b"a{}c{d}"), None);
        assert_eq!(hash_tag(b"a}b{c"), None);
        assert_eq!(hash_tag(b"{"), None);
        assert_eq!(hash_tag(b"plain"), None);
    }

    #[test]
    fn counters_share_the_slot_of_their_key() {
        let keys: [&[u8]; 8] = [
            b"lock:{order-7}",
            b"plain",
            b"a{b",
            b"a}b",
            b"}",
            b"x{}y}",
            b"{a}",
            b"k\xc3\xa9y:\xff",
        ];
        for key in keys {
            let counter = counter_key(key);
            assert_eq!(
                hash_slot(&counter),
                hash_slot(key),
                "{:?} → {:?}",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&counter)
            );
            assert_ne!(counter, key);
        }
        assert_eq!(
            counter_key(b"lock:{order-7}"),
            b"{order-7}:fence:lock:{order-7}"
        );
        assert_eq!(counter_key(b"plain"), b"{plain}:fence");
        assert!(counter_key(b"a}b").ends_with(b"}:fence:a}b"));
    }

    #[test]
    fn counter_names_are_recognised() {
        for name in [
            &b"{job}:fence"[..],
            b"{order-7}:fence:lock:{order-7}",
            b"{a}:fence:",
            b"{x y}:fence:anything at all",
        ] {
            assert!(is_counter_name(name), "{:?}", String::from_utf8_lossy(name));
        }
        for name in [
            &b"job"[..],
            b"{job}:fences",
            b"{}:fence",
            b"job:{x}:fence",
            b"{job}:fence2",
            b"{job:fence",
            b"{a}b}:fence",
            b"{job} :fence",
        ] {
            assert!(
                !is_counter_name(name),
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn every_slot_has_a_tag() {
        for (slot, tag) in SLOT_TAGS.iter().enumerate() {
            assert!(!tag.is_empty() && !tag.contains(&b'}'));
            assert_eq!(usize::from(crc16(tag) % SLOTS), slot);
        }
    }

    #[test]
    fn distinct_keys_get_distinct_counters() {
        let keys: [&[u8]; 8] = [
            b"a",
            b"{a}",
            b"a}",
            b"}a",
            b"{a}:fence",
            b"b{a}",
            b"{a}:fence:{a}",
            b"a}:fence",
        ];
        let mut counters: Vec<Vec<u8>> = keys.iter().map(|k| counter_key(k)).collect();
        counters.sort();
        counters.dedup();
        assert_eq!(counters.len(), keys.len());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Keys of any bytes, and keys made mostly of braces, which exercise every naming
        /// rule (hash tags, empty tags, a `}` without a `{`).
        fn key() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..24),
                proptest::collection::vec(proptest::sample::select(b"{}{}a:b*".to_vec()), 1..12),
            ]
        }

        proptest! {
            #[test]
            fn counters_share_their_keys_slot_and_never_collide(a in key(), b in key()) {
                let (ca, cb) = (counter_key(&a), counter_key(&b));
                prop_assert_eq!(hash_slot(&ca), hash_slot(&a));
                prop_assert_eq!(hash_slot(&cb), hash_slot(&b));
                prop_assert_eq!(ca == cb, a == b);
            }

            #[test]
            fn every_counter_has_a_counter_name(key in key()) {
                prop_assert!(is_counter_name(&counter_key(&key)));
            }

            #[test]
            fn under_a_prefix_a_counter_never_names_a_lock_key(
                prefix in "[a-z0-9:]{1,8}",
                a in key(),
                b in key(),
            ) {
                let lock_key = [prefix.as_bytes(), &b].concat();
                let counter = counter_key(&[prefix.as_bytes(), &a].concat());
                prop_assert_ne!(counter, lock_key);
            }
        }
    }
}
