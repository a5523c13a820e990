//! Checked arguments: keys and TTLs are validated here, before anything reaches Redis.

use std::time::Duration;

use crate::error::{Argument, Error};
use crate::token::Channels;

/// The longest key accepted, in bytes (before the locker's prefix is added).
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// The most metadata accepted, in bytes.
pub const MAX_METADATA_LEN: usize = 64 * 1024;

/// The longest TTL accepted: 2⁵³ − 1 ms (about 285,000 years).
///
/// Redis accepts up to `i64::MAX` minus the current Unix time in milliseconds; staying at
/// 2⁵³ keeps every TTL exact as a Lua number too, with a wide margin.
pub const MAX_TTL: Duration = Duration::from_millis((1 << 53) - 1);

/// The shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// How long a waiter keeps its place (a fair lock's waiter in line, a read-write lock's
/// waiting writer's claim on readers) without a sign of life, unless told otherwise: 3 s. A
/// waiter tries at least every third of it, which renews its place.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(3);

/// The shortest heartbeat a waiter may have: 30 ms.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(30);

/// `heartbeat` if within [`MIN_HEARTBEAT`]..=[`MAX_TTL`]; otherwise an error saying whose
/// heartbeat (`whose`) it was.
pub(crate) fn check_heartbeat(heartbeat: Duration, whose: &str) -> Result<Duration, Error> {
    if heartbeat < MIN_HEARTBEAT || heartbeat > MAX_TTL {
        return Err(Error::invalid(
            Argument::Heartbeat,
            format!(
                "{whose} heartbeat must be {MIN_HEARTBEAT:?} to {MAX_TTL:?}, not {heartbeat:?}"
            ),
        ));
    }
    Ok(heartbeat)
}

/// A TTL in whole milliseconds, checked against [`MIN_TTL`]..=[`MAX_TTL`]. Sub-millisecond
/// parts are dropped (rounding down: the lock never lives longer than asked).
pub(crate) fn ttl_millis(ttl: Duration) -> Result<u64, Error> {
    if ttl < MIN_TTL {
        return Err(Error::invalid(
            Argument::Ttl,
            format!("{ttl:?} is below the minimum of 1ms"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(
            Argument::Ttl,
            format!("{ttl:?} is above the maximum of {}ms", MAX_TTL.as_millis()),
        ));
    }
    Ok(ttl.as_millis() as u64)
}

/// The keys of one lock, with the locker's prefix, checked: at least one, none empty or too
/// long, none named like a fence counter, no duplicates. What a [`Lock`](crate::Lock) holds
/// (its `P`, the default); read them with [`Lock::keys`](crate::Lock::keys).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redmutex::Error> {
/// use std::time::Duration;
/// use redmutex::{memory::MemoryRedis, claim::Keys, Lock};
/// fn stored(lock: &Lock<MemoryRedis, Keys>) -> Vec<String> {
///     lock.keys().map(|key| String::from_utf8_lossy(key).into_owned()).collect()
/// }
/// let locker = redmutex::Locker::in_memory().with_prefix("app:");
/// let lock = locker.acquire_all(["payment", "stock"], Duration::from_secs(10)).await?;
/// assert_eq!(stored(&lock), ["app:payment", "app:stock"]);
/// # lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys(Box<[Box<[u8]>]>, Lines, Channels);

/// Whether a lock's waiting lockers line up beside its keys (see `mutex.lua`): not on a
/// cluster, where a release declaring a line that does not exist yet would be refused
/// during a slot migration (`TRYAGAIN`); waiters there hear of releases on the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lines {
    Kept,
    None,
}

impl Keys {
    pub(crate) fn new<K: AsRef<[u8]>>(
        prefix: &[u8],
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Keys, Error> {
        let mut out: Vec<Box<[u8]>> = Vec::new();
        for key in keys {
            let key = key.as_ref();
            check_key(key)?;
            let mut full = Vec::with_capacity(prefix.len() + key.len());
            full.extend_from_slice(prefix);
            full.extend_from_slice(key);
            if let Some(kind) = crate::fence::reserved_as(&full) {
                return Err(reserved(&full, kind));
            }
            if out.iter().any(|k| **k == *full) {
                return Err(Error::invalid(
                    Argument::Keys,
                    format!("duplicate key {:?}", String::from_utf8_lossy(key)),
                ));
            }
            out.push(full.into_boxed_slice());
        }
        if out.is_empty() {
            return Err(Error::invalid(
                Argument::Keys,
                "a lock needs at least one key",
            ));
        }
        Ok(Keys(out.into_boxed_slice(), Lines::Kept, Channels::Plain))
    }

    /// The same keys, whose waiters do not line up (see [`Lines`]).
    pub(crate) fn without_lines(self) -> Keys {
        Keys(self.0, Lines::None, self.2)
    }

    /// The same keys, announced on shard channels (a cluster's, see [`Channels`]).
    pub(crate) fn sharded(self) -> Keys {
        Keys(self.0, self.1, Channels::Sharded)
    }

    /// How their releases and requests are announced.
    pub(crate) fn channels(&self) -> Channels {
        self.2
    }

    /// Whether waiting lockers line up beside these keys.
    pub(crate) fn lined(&self) -> bool {
        self.1 == Lines::Kept
    }

    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.0.iter().map(|k| &**k)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn get(&self, index: usize) -> Option<&[u8]> {
        self.0.get(index).map(|k| &**k)
    }
}

/// The error for a key named like a companion key (see [`crate::fence::reserved_as`]).
fn reserved(key: &[u8], kind: crate::fence::Companion) -> Error {
    let suffix = String::from_utf8_lossy(kind.suffix());
    Error::invalid(
        Argument::Key,
        format!(
            "{:?} is reserved: keys of the form {{…}}{suffix} and {{…}}{suffix}:… \
             (prefix included) are {}; choose another name or a prefix",
            String::from_utf8_lossy(key),
            kind.what()
        ),
    )
}

/// Redis Cluster: every key of one lock in one hash slot, or a typed error that says how
/// to get there — before anything is sent (the server would answer `CROSSSLOT`).
pub(crate) fn check_one_slot(keys: &Keys) -> Result<(), Error> {
    let first = keys.get(0).expect("at least one key");
    let slot = crate::fence::hash_slot(first);
    match keys.iter().find(|key| crate::fence::hash_slot(key) != slot) {
        None => Ok(()),
        Some(other) => Err(Error::invalid(
            Argument::Keys,
            format!(
                "{:?} (hash slot {slot}) and {:?} (hash slot {}) are in different hash slots; \
                 on Redis Cluster the keys of one lock must share a slot: give them a common \
                 {{hash tag}}, e.g. {{order-7}}:payment and {{order-7}}:stock",
                String::from_utf8_lossy(first),
                String::from_utf8_lossy(other),
                crate::fence::hash_slot(other)
            ),
        )),
    }
}

fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::invalid(Argument::Key, "a key must not be empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(
            Argument::Key,
            format!("{} bytes is above the maximum of {MAX_KEY_LEN}", key.len()),
        ));
    }
    Ok(())
}

/// Checks the keys of one lock as a locker with `prefix` would, without Redis: at least
/// one, none empty or longer than [`MAX_KEY_LEN`], none named like a fence counter once
/// prefixed (`{…}:fence`, `{…}:fence:…`), no duplicates. For callers that want to refuse
/// bad input before they even connect (the CLI does); every acquire, release, refresh and
/// inspect makes the same check.
///
/// # Errors
/// [`Error::InvalidArgument`], saying which key and why.
///
/// ```
/// assert!(redmutex::limits::check_keys("app:", ["job", "{job}:fence"]).is_ok());
/// assert!(redmutex::limits::check_keys("", ["{job}:fence"]).is_err());
/// assert!(redmutex::limits::check_keys("", ["a", "a"]).is_err());
/// ```
pub fn check_keys<K: AsRef<[u8]>>(
    prefix: impl AsRef<[u8]>,
    keys: impl IntoIterator<Item = K>,
) -> Result<(), Error> {
    Keys::new(prefix.as_ref(), keys).map(|_| ())
}

/// Checks metadata as an acquire does, without Redis: at most [`MAX_METADATA_LEN`] bytes.
///
/// # Errors
/// [`Error::InvalidArgument`].
///
/// ```
/// assert!(redmutex::limits::check_metadata("host=web-3").is_ok());
/// assert!(redmutex::limits::check_metadata(&"m".repeat(redmutex::limits::MAX_METADATA_LEN + 1)).is_err());
/// ```
pub fn check_metadata(metadata: &str) -> Result<(), Error> {
    if metadata.len() > MAX_METADATA_LEN {
        return Err(Error::invalid(
            Argument::Metadata,
            format!(
                "{} bytes is above the maximum of {MAX_METADATA_LEN}",
                metadata.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        assert_eq!(ttl_millis(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(
            ttl_millis(Duration::from_micros(1500)).unwrap(),
            1,
            "rounds down"
        );
        assert_eq!(ttl_millis(MAX_TTL).unwrap(), (1 << 53) - 1);
        for bad in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_TTL + Duration::from_millis(1),
            Duration::MAX,
        ] {
            let err = ttl_millis(bad).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(a) if a.argument == Argument::Ttl),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn keys_are_prefixed_and_checked() {
        let keys = Keys::new(b"app:", ["a", "b"]).unwrap();
        assert_eq!(
            keys.iter().collect::<Vec<_>>(),
            [b"app:a".as_slice(), b"app:b"]
        );
        let invalid = |r: Result<Keys, Error>| match r.unwrap_err() {
            Error::InvalidArgument(a) => a.argument,
            e => panic!("unexpected {e}"),
        };
        assert_eq!(invalid(Keys::new(b"", Vec::<&str>::new())), Argument::Keys);
        assert_eq!(
            invalid(Keys::new(b"p:", [""])),
            Argument::Key,
            "prefix does not make an empty key valid"
        );
        assert_eq!(invalid(Keys::new(b"", ["a", "b", "a"])), Argument::Keys);
        assert_eq!(
            invalid(Keys::new(b"", [vec![b'x'; MAX_KEY_LEN + 1]])),
            Argument::Key
        );
        assert!(Keys::new(b"", [vec![b'x'; MAX_KEY_LEN]]).is_ok());
        assert_eq!(invalid(Keys::new(b"", ["{job}:fence"])), Argument::Key);
        assert_eq!(
            invalid(Keys::new(b"{app}:", ["fence:{app}:k"])),
            Argument::Key,
            "the prefix counts: {{app}}:fence:{{app}}:k is the counter of {{app}}:k"
        );
        assert!(
            Keys::new(b"app:", ["{job}:fence"]).is_ok(),
            "app:{{job}}:fence is no counter"
        );
        assert!(check_metadata(&"m".repeat(MAX_METADATA_LEN)).is_ok());
        assert!(check_metadata(&"m".repeat(MAX_METADATA_LEN + 1)).is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Small alphabets, so that empty and duplicate keys come up often.
            #[test]
            fn keys_are_accepted_exactly_when_valid_and_kept_byte_for_byte(
                prefix in proptest::collection::vec(any::<u8>(), 0..4),
                keys in proptest::collection::vec(
                    proptest::collection::vec(proptest::sample::select(vec![0u8, b'a', 0xff]), 0..3),
                    0..5,
                ),
            ) {
                let mut distinct = keys.clone();
                distinct.sort();
                distinct.dedup();
                let valid = !keys.is_empty()
                    && keys.iter().all(|k| !k.is_empty())
                    && distinct.len() == keys.len();
                match Keys::new(&prefix, &keys) {
                    Ok(checked) => {
                        prop_assert!(valid, "{keys:?} accepted");
                        let expected: Vec<Vec<u8>> =
                            keys.iter().map(|k| [&prefix[..], k].concat()).collect();
                        let got: Vec<Vec<u8>> = checked.iter().map(<[u8]>::to_vec).collect();
                        prop_assert_eq!(got, expected);
                    }
                    Err(e) => {
                        prop_assert!(!valid, "{keys:?} refused: {e}");
                        prop_assert!(e.is_invalid_argument() && !e.is_transient());
                    }
                }
            }

            #[test]
            fn sizes_are_checked_at_the_documented_limits(extra in 0usize..3, under in 0usize..3) {
                let long = vec![b'k'; MAX_KEY_LEN + 1 + extra];
                prop_assert!(Keys::new(b"", [&long]).is_err());
                prop_assert!(Keys::new(b"", [vec![b'k'; MAX_KEY_LEN - under]]).is_ok());
                prop_assert!(check_metadata(&"m".repeat(MAX_METADATA_LEN + 1 + extra)).is_err());
                prop_assert!(check_metadata(&"m".repeat(MAX_METADATA_LEN - under)).is_ok());
            }
        }
    }
}
