//! Lock tokens and the value stored at a lock key.
//!
//! A lock key holds `TOKEN`, one flag byte, then the optional metadata. The token is 16 bytes
//! from the operating system's CSPRNG, base64url-encoded without padding: always [`TOKEN_LEN`]
//! characters from `[A-Za-z0-9_-]`, so the split needs no separator and a prefix comparison in
//! Lua is an exact owner check. The flag byte says whether someone waits for the release (`w`)
//! or not (`-`): waiters set it on the holder's value, and the release script publishes a
//! wake-up only when it is set; `W` also names the locker next in line, whose id and a moment
//! follow the flag, before the metadata. A release into a minimum hold sets it to `k`: the key
//! stays until it expires, no longer its owner's. A release that hands the key to the locker
//! whose waiters have waited longest stores that locker's id (token-shaped) with the flag `r`,
//! for a moment (see `mutex.lua`).

use std::fmt;

use crate::error::{Argument, Error};

/// The length of an encoded token: 16 random bytes in unpadded base64url.
pub const TOKEN_LEN: usize = 22;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The secret that proves ownership of a lock: 128 random bits, base64url.
///
/// Whoever knows the token can refresh and release the lock, so it is not printed by
/// `Debug` (only its first four characters are).
///
/// ```
/// let token = redmutex::Token::generate().unwrap();
/// assert_eq!(token.as_str().len(), redmutex::limits::TOKEN_LEN);
/// let same: redmutex::Token = token.as_str().parse().unwrap();
/// assert_eq!(same, token);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; TOKEN_LEN]);

impl Token {
    /// Draws a fresh token from the operating system's CSPRNG.
    ///
    /// # Errors
    /// [`Error::Random`] in the practically impossible case that the OS has no randomness.
    ///
    /// ```
    /// let a = redmutex::Token::generate()?;
    /// let b = redmutex::Token::generate()?;
    /// assert_ne!(a, b);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn generate() -> Result<Token, Error> {
        Ok(Token(encode_base64url(&pool::draw()?)))
    }

    /// The token as text.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("deploy", Duration::from_secs(600)).await?;
    /// let text = lock.detach().as_str().to_owned(); // e.g. printed for the script that finishes
    /// assert_eq!(text.len(), redmutex::limits::TOKEN_LEN);
    /// let token: redmutex::Token = text.parse()?;
    /// locker.release_with_token(["deploy"], &token).await?;
    /// # Ok(()) }
    /// ```
    pub fn as_str(&self) -> &str {
        // Only ALPHABET bytes are ever stored, all ASCII.
        std::str::from_utf8(&self.0).expect("token is ASCII")
    }

    /// The token as bytes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redmutex::Error> {
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::in_memory();
    /// let lock = locker.acquire("job", Duration::from_secs(30)).await?;
    /// // The value at the key starts with the owner's token.
    /// let mut conn = locker.connection().clone();
    /// let value: Vec<u8> = redis::cmd("GET").arg("job").query_async(&mut conn).await?;
    /// assert!(value.starts_with(lock.token().as_bytes()));
    /// # lock.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Reads a token from the first [`TOKEN_LEN`] bytes of `value`, if they are one.
    fn from_prefix(value: &[u8]) -> Option<Token> {
        let prefix: [u8; TOKEN_LEN] = value.get(..TOKEN_LEN)?.try_into().ok()?;
        prefix
            .iter()
            .all(|b| ALPHABET.contains(b))
            .then_some(Token(prefix))
    }
}

impl std::str::FromStr for Token {
    type Err = Error;

    /// Parses a token printed earlier (e.g. by the CLI's `acquire`).
    fn from_str(text: &str) -> Result<Token, Error> {
        match Token::from_prefix(text.as_bytes()) {
            Some(token) if text.len() == TOKEN_LEN => Ok(token),
            _ => Err(Error::invalid(
                Argument::Token,
                format!("a token is {TOKEN_LEN} characters of [A-Za-z0-9_-]"),
            )),
        }
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", &self.as_str()[..4])
    }
}

/// Random bytes for tokens, drawn from the OS CSPRNG in batches: one `getrandom` call per
/// [`BATCH`](pool::BATCH) tokens instead of one per token, which is a good part of an
/// acquire's client CPU otherwise (a system call and the kernel's key schedule each time).
mod pool {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Once;

    use crate::error::Error;

    /// Tokens per `getrandom` call.
    pub(super) const BATCH: usize = 16;

    /// Bumped in the child after every `fork`: a forked child inherits its parent's
    /// unused random bytes and must never hand out the same tokens, so it draws afresh.
    static FORKS: AtomicU64 = AtomicU64::new(0);
    static WATCH_FORKS: Once = Once::new();

    extern "C" fn after_fork_in_child() {
        FORKS.fetch_add(1, Ordering::SeqCst);
    }

    struct Pool {
        bytes: [u8; 16 * BATCH],
        /// The next unused token; `BATCH` when empty.
        next: usize,
        /// [`FORKS`] when the bytes were drawn.
        forks: u64,
    }

    thread_local! {
        static POOL: RefCell<Pool> = const {
            RefCell::new(Pool { bytes: [0; 16 * BATCH], next: BATCH, forks: 0 })
        };
    }

    /// 16 bytes no other call (in this process or a forked one) returns.
    pub(super) fn draw() -> Result<[u8; 16], Error> {
        #[cfg(feature = "simulation")]
        if let Some(bytes) = crate::simulation::draw_16() {
            return Ok(bytes);
        }
        WATCH_FORKS.call_once(|| {
            // SAFETY: registers a handler that only increments an atomic, which is
            // async-signal-safe as a fork child handler must be. Registration failure
            // (ENOMEM) is checked for: then every token is drawn from the OS directly.
            if unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) } != 0 {
                FORKS.store(u64::MAX, Ordering::SeqCst);
            }
        });
        let forks = FORKS.load(Ordering::SeqCst);
        if forks == u64::MAX {
            let mut bytes = [0u8; 16];
            getrandom::fill(&mut bytes).map_err(random_error)?;
            return Ok(bytes);
        }
        POOL.with(|pool| {
            let mut pool = pool.borrow_mut();
            if pool.next == BATCH || pool.forks != forks {
                getrandom::fill(&mut pool.bytes).map_err(random_error)?;
                pool.next = 0;
                pool.forks = forks;
            }
            let range = pool.next * 16..pool.next * 16 + 16;
            let mut out = [0u8; 16];
            out.copy_from_slice(&pool.bytes[range.clone()]);
            // A token handed out is not kept around in the pool.
            pool.bytes[range].fill(0);
            pool.next += 1;
            Ok(out)
        })
    }

    fn random_error(e: getrandom::Error) -> Error {
        Error::Random(e.to_string())
    }
}

/// The flag byte of a value whose release nobody waits for.
const NOT_AWAITED: u8 = b'-';
/// The flag byte of a value whose release someone waits for, not in a line (its release
/// announces itself on the key's channel).
const AWAITED: u8 = b'w';
/// The flag byte of a value whose release lockers wait for in the key's line (its release
/// hands the key to the first, see `mutex.lua`).
const LINED: u8 = b'l';
/// The flag byte of a value whose release only observers wait for, without taking the key
/// (`Locker::wait_released`): announced as for [`AWAITED`], but nobody is said to wait.
const OBSERVED: u8 = b'o';
/// The flag byte of a value awaited both ways ([`AWAITED`] and [`LINED`]).
const LINED_AWAITED: u8 = b'L';
/// The flag byte of a value its owner released into a minimum hold: held until it expires,
/// and no longer the owner's (see `mutex.lua`).
const KEPT: u8 = b'k';
/// The flag byte of a key handed by its release to the waiters of one locker, whose id
/// stands where a token would (see `mutex.lua`).
const HANDED: u8 = b'r';

/// Every flag byte a redmutex value may carry after its token, by the name the scripts
/// give it too (`helpers.lua`; a test checks they agree); anything else is foreign.
pub(crate) const FLAG_NAMES: [(&str, u8); 7] = [
    ("NOT_AWAITED", NOT_AWAITED),
    ("AWAITED", AWAITED),
    ("OBSERVED", OBSERVED),
    ("LINED", LINED),
    ("LINED_AWAITED", LINED_AWAITED),
    ("KEPT", KEPT),
    ("HANDED", HANDED),
];

/// The bytes stored at a lock key: token, flag (not awaited), then metadata.
pub(crate) fn lock_value(token: &Token, metadata: Option<&str>) -> Vec<u8> {
    let metadata = metadata.unwrap_or_default();
    let mut value = Vec::with_capacity(TOKEN_LEN + 1 + metadata.len());
    value.extend_from_slice(token.as_bytes());
    value.push(NOT_AWAITED);
    value.extend_from_slice(metadata.as_bytes());
    value
}

/// Marks a value from [`lock_value`] as awaited (what a waiting acquire stores, unless its
/// locker waits in the key's line), or not.
pub(crate) fn set_awaited(value: &mut [u8], awaited: bool) {
    value[TOKEN_LEN] = if awaited { AWAITED } else { NOT_AWAITED };
}

/// How a claim's announcements travel, and so how its channels are named (as
/// `helpers.lua`'s and `sharded.lua`'s `announce_on` do it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channels {
    /// PUBLISH and SUBSCRIBE on channels named from the key (one node, Redlock).
    Plain,
    /// A cluster: SPUBLISH and SSUBSCRIBE on channels in the key's hash slot, so that an
    /// announcement stays on the key's shard instead of crossing the cluster bus to every
    /// node (Redis 6.2, without sharded Pub/Sub, gets PUBLISH and SUBSCRIBE instead).
    Sharded,
}

impl Channels {
    /// The channel of `key` named by `suffix` (empty for the key's own): the key and the
    /// suffix. Sharded, in the key's hash slot (as `sharded.lua` names it): an untagged key in
    /// braces (`job` → `{job}`, `{job}:~a`). A key with a `}` but no hash tag cannot be named
    /// so: its channels keep the plain name, and travel as plain ones ([`is_shard_channel`]).
    pub(crate) fn name(self, key: &[u8], suffix: &[u8]) -> Vec<u8> {
        let braced = self == Channels::Sharded
            && crate::fence::hash_tag(key).is_none()
            && !key.contains(&b'}');
        match braced {
            true => [b"{", key, b"}", suffix].concat(),
            false => [key, suffix].concat(),
        }
    }
}

/// Whether a channel named by [`Channels::Sharded`] is a shard channel (SPUBLISH,
/// SSUBSCRIBE): exactly those with a hash tag, which puts them in their key's slot.
#[cfg(feature = "cluster")]
pub(crate) fn is_shard_channel(channel: &[u8]) -> bool {
    crate::fence::hash_tag(channel).is_some()
}

/// The channel on which `id` — a fair lock waiter's token, or a locker's id — hears that
/// `key` is its turn: the key, `:~`, and the first 16 hex digits of the id's SHA-1 (as
/// `helpers.lua`'s `turn` names it). Public, and of no use for taking anyone's lock.
pub(crate) fn turn_channel(key: &[u8], id: &Token, channels: Channels) -> Vec<u8> {
    let digest = sha1_smol::Sha1::from(id.as_bytes()).digest().to_string();
    let mut suffix = [0u8; 18];
    suffix[..2].copy_from_slice(b":~");
    suffix[2..].copy_from_slice(&digest.as_bytes()[..16]);
    channels.name(key, &suffix)
}

/// The channel on which a request that `key`'s holders let go is announced (`listing.lua`'s
/// `ask`, `ASK_CHANNEL` there): the key and `:~a`. Only a prompt — a holder that hears it
/// renews at once, and its renewal, which reads the request where it is kept, says whether
/// it was asked — so a message on it from anyone else costs a renewal and nothing more.
pub(crate) fn ask_channel(key: &[u8], channels: Channels) -> Vec<u8> {
    channels.name(key, ASK_CHANNEL)
}

/// What [`ask_channel`] adds to the key.
pub(crate) const ASK_CHANNEL: &[u8] = b":~a";

/// Whether someone not in the key's line waits for the release of `value` (the flags 'w'
/// and 'L'): where the line's length is known, the rest of the waiters are counted there.
pub(crate) fn watched_outside_line(value: &[u8]) -> bool {
    matches!(value.get(TOKEN_LEN), Some(&(AWAITED | LINED_AWAITED)))
}

/// What a stored value says, read by someone who does not own it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StoredValue {
    /// A redmutex value; metadata is `None` when empty.
    Redmutex {
        token: Token,
        /// Someone waits for the release.
        awaited: bool,
        metadata: Option<String>,
    },
    /// A forced release's tombstone (see `listing.lua`): it keeps the holder's place until
    /// its TTL ends. `holder` stands in for the token it replaced (the same on every node
    /// the release reached), of no use for releasing anything.
    Tombstone {
        holder: Token,
        metadata: Option<String>,
    },
    /// Something redmutex did not write.
    Foreign,
}

/// How a forced release's tombstone begins: `~forced~<kind>~<metadata>` (see
/// `listing.lua`'s TOMBSTONE).
pub(crate) const TOMBSTONE: &[u8] = b"~forced~";

pub(crate) fn parse_value(value: &[u8]) -> StoredValue {
    if let Some(rest) = value.strip_prefix(TOMBSTONE) {
        let metadata = (rest.iter().position(|&b| b == b'~'))
            .map(|at| String::from_utf8_lossy(&rest[at + 1..]).into_owned())
            .filter(|metadata| !metadata.is_empty());
        let digest = sha1_smol::Sha1::from(value).digest().bytes();
        let stand_in: [u8; 16] = digest[..16].try_into().expect("20 bytes");
        return StoredValue::Tombstone {
            holder: Token(encode_base64url(&stand_in)),
            metadata,
        };
    }
    let flag = value.get(TOKEN_LEN).copied();
    match (Token::from_prefix(value), flag) {
        (Some(token), Some(flag)) if FLAG_NAMES.iter().any(|(_, known)| *known == flag) => {
            // A handed key holds the locker's id: no metadata of anyone's.
            let skip = if flag == HANDED { value.len() } else { 0 };
            let rest = value.get(TOKEN_LEN + 1 + skip..).unwrap_or_default();
            StoredValue::Redmutex {
                token,
                awaited: matches!(flag, AWAITED | LINED | LINED_AWAITED),
                metadata: (!rest.is_empty()).then(|| String::from_utf8_lossy(rest).into_owned()),
            }
        }
        _ => StoredValue::Foreign,
    }
}

fn encode_base64url(bytes: &[u8; 16]) -> [u8; TOKEN_LEN] {
    let mut out = [0u8; TOKEN_LEN];
    let mut o = 0;
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        // A full chunk makes 4 characters; the last, single byte makes 2 (no padding).
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out[o] = ALPHABET[(n >> (18 - 6 * i) & 63) as usize];
            o += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_reference_vectors() {
        // Reference values from a standard base64url encoder (no padding).
        let zeros = [0u8; 16];
        assert_eq!(&encode_base64url(&zeros), b"AAAAAAAAAAAAAAAAAAAAAA");
        let ones = [0xffu8; 16];
        assert_eq!(&encode_base64url(&ones), b"_____________________w");
        let seq: [u8; 16] = std::array::from_fn(|i| i as u8);
        assert_eq!(&encode_base64url(&seq), b"AAECAwQFBgcICQoLDA0ODw");
        let mixed = *b"redmutex-tokens!";
        assert_eq!(&encode_base64url(&mixed), b"cmVkbXV0ZXgtdG9rZW5zIQ");
    }

    #[test]
    fn values_are_read_whatever_waits_for_them() {
        let token = Token::generate().unwrap();
        let read = |flag: &str| parse_value(format!("{}{flag}host=a", token.as_str()).as_bytes());
        let expected = |awaited| StoredValue::Redmutex {
            token,
            awaited,
            metadata: Some("host=a".into()),
        };
        for (flag, awaited) in [
            ("-", false),
            ("w", true),
            ("o", false),
            ("l", true),
            ("L", true),
            ("k", false),
        ] {
            assert_eq!(read(flag), expected(awaited), "{flag}");
        }
        // A key handed to a locker holds its id only: no metadata.
        assert!(matches!(
            read("r"),
            StoredValue::Redmutex { metadata: None, .. }
        ));
        assert_eq!(read("W"), StoredValue::Foreign);
    }

    #[test]
    fn turn_channels_name_the_key_and_a_digest_of_the_id() {
        let id: Token = "AAAAAAAAAAAAAAAAAAAAAA".parse().unwrap();
        let digest = sha1_smol::Sha1::from(id.as_bytes()).digest().to_string();
        let channel = turn_channel(b"app:job", &id, Channels::Plain);
        assert_eq!(channel, format!("app:job:~{}", &digest[..16]).into_bytes());
        assert!(!String::from_utf8_lossy(&channel).contains(id.as_str()));
        let other = Token::generate().unwrap();
        assert_ne!(turn_channel(b"app:job", &other, Channels::Plain), channel);
        let sharded = turn_channel(b"app:job", &id, Channels::Sharded);
        assert_eq!(
            sharded,
            format!("{{app:job}}:~{}", &digest[..16]).into_bytes()
        );
    }

    #[test]
    #[cfg(feature = "cluster")]
    fn sharded_channels_are_in_their_keys_slot_or_plain() {
        use crate::fence::hash_slot;
        let suffixes: [&[u8]; 4] = [b"", b":~a", b":~e", b":~0123456789abcdef"];
        // Untagged, tagged, a tag with `}` after it, a lone `{`.
        for key in [&b"job"[..], b"{order-7}:pay", b"a{b}c}", b"a{b"] {
            for suffix in suffixes {
                let name = Channels::Sharded.name(key, suffix);
                assert_eq!(hash_slot(&name), hash_slot(key), "{:?}", name);
                assert!(is_shard_channel(&name));
                assert_eq!(Channels::Plain.name(key, suffix), [key, suffix].concat());
            }
        }
        assert_eq!(Channels::Sharded.name(b"job", b""), b"{job}");
        assert_eq!(Channels::Sharded.name(b"{o}:p", b":~a"), b"{o}:p:~a");
        // A `}` without a tag: no name in the key's slot can be made, so it stays plain.
        for key in [&b"a}b"[..], b"x{}y}", b"}{a"] {
            let name = Channels::Sharded.name(key, b":~a");
            assert_eq!(name, [key, b":~a"].concat());
            assert!(!is_shard_channel(&name));
        }
    }

    #[test]
    fn tokens_are_distinct_and_parse_back() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str().parse::<Token>().unwrap(), a);
        assert!(
            !format!("{a:?}").contains(a.as_str()),
            "Debug must not leak the token"
        );
    }

    #[test]
    fn pooled_tokens_never_repeat_across_batches() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..pool::BATCH * 8 {
            assert!(seen.insert(Token::generate().unwrap()), "a token repeated");
        }
    }

    /// A forked child must not hand out the tokens its parent still has in its pool.
    #[test]
    fn a_forked_child_draws_fresh_tokens() {
        // Leave most of a batch unused in this thread's pool, then fork.
        let _ = Token::generate().unwrap();
        let mut pipe = [0i32; 2];
        // SAFETY: plain pipe/fork/write/_exit; the child only generates tokens, writes
        // them and exits without running destructors or returning into the test harness.
        unsafe {
            assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                let mut out = Vec::new();
                for _ in 0..4 {
                    out.extend_from_slice(Token::generate().unwrap().as_bytes());
                }
                libc::write(pipe[1], out.as_ptr().cast(), out.len());
                libc::_exit(0);
            }
            libc::close(pipe[1]);
            let mut child = [0u8; 4 * TOKEN_LEN];
            let mut read = 0;
            while read < child.len() {
                let n = libc::read(
                    pipe[0],
                    child[read..].as_mut_ptr().cast(),
                    child.len() - read,
                );
                assert!(n > 0, "child wrote too little");
                read += n as usize;
            }
            libc::close(pipe[0]);
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            let parent: Vec<Token> = (0..4).map(|_| Token::generate().unwrap()).collect();
            for chunk in child.chunks(TOKEN_LEN) {
                assert!(
                    parent.iter().all(|t| t.as_bytes() != chunk),
                    "the child handed out one of the parent's tokens"
                );
            }
        }
    }

    #[test]
    fn malformed_tokens_are_rejected() {
        for bad in [
            "",
            "short",
            "AAAAAAAAAAAAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAA=",
        ] {
            let err = bad.parse::<Token>().unwrap_err();
            assert!(err.is_invalid_argument(), "{bad:?}: {err}");
        }
    }

    #[test]
    fn value_round_trip() {
        let token = Token::generate().unwrap();
        let mut value = lock_value(&token, Some("host=web-3 pid=4121 ✓"));
        assert_eq!(value[TOKEN_LEN], b'-');
        assert_eq!(
            parse_value(&value),
            StoredValue::Redmutex {
                token,
                awaited: false,
                metadata: Some("host=web-3 pid=4121 ✓".into())
            }
        );
        set_awaited(&mut value, true);
        assert_eq!(
            parse_value(&value),
            StoredValue::Redmutex {
                token,
                awaited: true,
                metadata: Some("host=web-3 pid=4121 ✓".into())
            }
        );
        assert_eq!(
            parse_value(&lock_value(&token, None)),
            StoredValue::Redmutex {
                token,
                awaited: false,
                metadata: None
            }
        );
        // A bare token, or a token followed by anything but a flag, is not ours.
        assert_eq!(parse_value(token.as_bytes()), StoredValue::Foreign);
        let mut other = token.as_bytes().to_vec();
        other.push(b'x');
        assert_eq!(parse_value(&other), StoredValue::Foreign);
        assert_eq!(parse_value(b"1700000000.123"), StoredValue::Foreign);
        assert_eq!(
            parse_value(b"a value with spaces in the first 22 bytes"),
            StoredValue::Foreign
        );
    }

    /// Properties over generated input: exact round trips, and no input that panics.
    #[test]
    fn a_tombstone_is_read_with_its_holders_metadata_and_a_stand_in_of_no_use() {
        let read = |value: &[u8]| match parse_value(value) {
            StoredValue::Tombstone { holder, metadata } => (holder, metadata),
            other => panic!("not a tombstone: {other:?}"),
        };
        let (a, metadata) = read(b"~forced~lock~host=web-3 pid=7");
        assert_eq!(metadata.as_deref(), Some("host=web-3 pid=7"));
        assert_eq!(
            read(b"~forced~lock~host=web-3 pid=7").0,
            a,
            "the same on every node"
        );
        let (b, none) = read(b"~forced~rw_lock_write~");
        assert_ne!(a, b);
        assert_eq!(none, None);
        assert_eq!(read(b"~forced~").1, None);
        // Not a token anyone holds: it is made of the whole value, prefix and all.
        assert!(a.as_bytes().iter().all(|c| ALPHABET.contains(c)));
        assert!(!b"~forced~lock~x".starts_with(a.as_bytes()));
        assert_eq!(parse_value(b"~forced"), StoredValue::Foreign);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// A reference base64url decoder, written independently of the encoder.
        fn decode(text: &[u8]) -> Option<Vec<u8>> {
            let mut bits: u32 = 0;
            let mut held = 0;
            let mut out = Vec::new();
            for &c in text {
                let v = ALPHABET.iter().position(|&a| a == c)? as u32;
                bits = bits << 6 | v;
                held += 6;
                if held >= 8 {
                    held -= 8;
                    out.push((bits >> held) as u8);
                    bits &= (1 << held) - 1;
                }
            }
            // Unpadded base64 leaves the unused low bits zero.
            (bits == 0).then_some(out)
        }

        fn flag() -> impl Strategy<Value = u8> {
            // Each flag a value may carry (spelled out, not taken from `FLAG_NAMES`, so that a
            // flag the reader forgets fails here), and any byte at all.
            prop_oneof![
                Just(b'-'),
                Just(b'w'),
                Just(b'o'),
                Just(b'l'),
                Just(b'L'),
                Just(b'k'),
                Just(b'r'),
                any::<u8>()
            ]
        }

        proptest! {
            #[test]
            fn the_encoding_is_exact_and_reversible(bytes in any::<[u8; 16]>()) {
                let encoded = encode_base64url(&bytes);
                prop_assert!(encoded.iter().all(|b| ALPHABET.contains(b)));
                prop_assert_eq!(decode(&encoded), Some(bytes.to_vec()));
                let text = std::str::from_utf8(&encoded).unwrap();
                let token: Token = text.parse().unwrap();
                prop_assert_eq!(token.as_bytes(), &encoded[..]);
                prop_assert_eq!(token.to_string(), text);
            }

            #[test]
            fn text_parses_as_a_token_exactly_when_it_is_one(
                text in prop_oneof![r"[A-Za-z0-9_-]{20,24}", r"\PC{0,30}", r"[A-Za-z0-9_+/=-]{22}"]
            ) {
                let valid = text.len() == TOKEN_LEN && text.bytes().all(|b| ALPHABET.contains(&b));
                match text.parse::<Token>() {
                    Ok(token) => {
                        prop_assert!(valid, "{text:?} accepted");
                        prop_assert_eq!(token.as_str(), text.as_str());
                    }
                    Err(e) => {
                        prop_assert!(!valid, "{text:?} refused");
                        prop_assert!(e.is_invalid_argument());
                    }
                }
            }

            #[test]
            fn stored_values_read_back_exactly(
                bytes in any::<[u8; 16]>(),
                awaited in any::<bool>(),
                metadata in proptest::option::of(r"\PC{0,40}|[\x00-\x7f]{0,40}"),
            ) {
                let token = Token(encode_base64url(&bytes));
                let mut value = lock_value(&token, metadata.as_deref());
                set_awaited(&mut value, awaited);
                // Empty metadata is no metadata.
                let metadata = metadata.filter(|m| !m.is_empty());
                prop_assert_eq!(
                    parse_value(&value),
                    StoredValue::Redmutex { token, awaited, metadata }
                );
            }

            #[test]
            fn any_stored_bytes_are_read_without_panic(
                bytes in any::<[u8; 16]>(),
                flag in flag(),
                tail in proptest::collection::vec(any::<u8>(), 0..48),
                cut in 0usize..30,
            ) {
                // Values that start like ours, with any flag byte and any (even invalid
                // UTF-8) tail, and the same bytes cut short anywhere.
                let mut value = encode_base64url(&bytes).to_vec();
                value.push(flag);
                value.extend_from_slice(&tail);
                for value in [&value[..], &value[..cut.min(value.len())], &tail[..]] {
                    let ours = value.len() > TOKEN_LEN
                        && value[..TOKEN_LEN].iter().all(|b| ALPHABET.contains(b))
                        && matches!(value[TOKEN_LEN], b'-' | b'w' | b'o' | b'l' | b'L' | b'k' | b'r');
                    match parse_value(value) {
                        StoredValue::Redmutex { token, awaited, metadata } => {
                            prop_assert!(ours);
                            prop_assert_eq!(token.as_bytes(), &value[..TOKEN_LEN]);
                            let flag = value[TOKEN_LEN];
                            prop_assert_eq!(awaited, matches!(flag, b'w' | b'l' | b'L'));
                            let skip = if flag == b'r' { value.len() } else { 0 };
                            let rest = value.get(TOKEN_LEN + 1 + skip..).unwrap_or_default();
                            prop_assert_eq!(
                                metadata,
                                (!rest.is_empty()).then(|| String::from_utf8_lossy(rest).into_owned())
                            );
                        }
                        StoredValue::Tombstone { .. } => prop_assert!(value.starts_with(TOMBSTONE)),
                        StoredValue::Foreign => prop_assert!(!ours),
                    }
                }
            }
        }
    }
}
