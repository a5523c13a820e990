//! How a primitive's Lua file becomes its operations' scripts: one script per operation,
//! holding the shared helpers and preamble declarations it uses and nothing more, in a
//! plain and a cluster (sharded) variant; every script known by its SHA-1 for
//! [`super::send`]'s `EVAL` fallback.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis::Script;

use crate::sync::lock;
use crate::token::Channels;

/// The rules every primitive's script shares (owner check, fence counters, the flag byte's
/// states).
const HELPERS: &str = include_str!("helpers.lua");

/// Waiting, for every primitive: lines, hand-offs, and telling waiters (after
/// [`HELPERS`], whose clock and flags it uses).
const LINE: &str = include_str!("line.lua");

/// A locker's heartbeat in a key's line (see [`super::Waits::lined`]; `LINE_BEAT_MS` in
/// `line.lua`): its waiters try at least every third of it, and a locker that crashed
/// or froze is passed over once it ends.
pub(crate) const LINE_HEARTBEAT: Duration = Duration::from_secs(3);

/// How long a key released to a locker in line waits for it (`HANDOFF_MS` in `line.lua`):
/// a try told the key is being handed to another locker looks again after it.
pub(crate) const HANDOFF: Duration = Duration::from_millis(50);

/// The line that starts an operation's section in a primitive's Lua file.
const SECTION: &str = "\n--- op: ";

/// The line that ends a section's head: code that runs before the declarations the
/// section uses are made — its common case, which may return before Lua creates any of
/// them (each function a script defines is created on every call).
const HEAD: &str = "\n--- then\n";

/// One operation of a primitive, compiled as a script of its own: the declarations of the
/// shared helpers and of the primitive file's preamble (what comes before its first
/// section) that the operation uses, then the operation's section (from its `--- op: NAME`
/// line to the next). A primitive may share another file's operations: a semaphore's
/// holders and a read-write lock's readers share those of `scripts/holders.lua`, whose
/// preamble comes after the primitive's (it calls what the primitive's defines: what
/// makes a holder live). One file per primitive keeps its rules together; one script per
/// operation, holding only what it uses, keeps each call as cheap as the operation (Lua
/// creates every function a script defines on every call: a script holding all
/// operations measured 30–80 % more server time for a release). A section may open with a
/// head, ended by a `--- then` line, that runs before those declarations: the lock's
/// release deletes an unwatched key there, at half the server time.
///
/// Each operation comes in two variants ([`Channels`]): the script as written, and, where it
/// announces anything, the same with `sharded.lua`'s `announce_on` in place of
/// `helpers.lua`'s, for a cluster.
pub(crate) struct Operation {
    source: String,
    script: Script,
    /// The sharded variant, when it differs.
    sharded: Option<(String, Script)>,
}

/// How a cluster's scripts announce: `sharded.lua`'s `announce_on`, which the sharded
/// variant of a script has in place of `helpers.lua`'s.
const SHARDED: &str = include_str!("sharded.lua");

/// The text of `source`'s `announce_on` function, from its `local function` line to its
/// closing `end` line.
fn announce_function(source: &str) -> Option<&str> {
    let start = source.find("local function announce_on(")?;
    let len = source[start..].find("\nend\n")? + "\nend".len();
    Some(&source[start..start + len])
}

/// Every script's source by its SHA-1, for [`super::ScriptConn`]'s `EVAL` in place of an
/// `EVALSHA` the server does not know.
static SOURCES: LazyLock<Mutex<HashMap<String, Arc<str>>>> = LazyLock::new(Default::default);

/// The script of `source`, known by its SHA-1 from now on (see [`SOURCES`]).
fn known(source: &str) -> Script {
    let script = Script::new(source);
    let mut sources = lock(&SOURCES);
    sources.insert(script.get_hash().to_owned(), Arc::from(source));
    script
}

/// The source of the script whose SHA-1 is `sha`, if it is one of ours.
pub(super) fn source_by_sha(sha: &str) -> Option<Arc<str>> {
    lock(&SOURCES).get(sha).cloned()
}

/// What every operation of the Lua files `files` may use: the helpers, waiting, then each
/// file's preamble (what comes before its first section), in order.
fn shared(files: &[&str]) -> String {
    let mut shared = format!("{HELPERS}\n{LINE}");
    for file in files {
        shared.push('\n');
        shared.push_str(file.split(SECTION).next().unwrap_or_default());
    }
    shared
}

/// The sections of the Lua files `files`, each from the line after its `--- op:` on.
fn sections<'a>(files: &[&'a str]) -> impl Iterator<Item = &'a str> {
    (files.iter()).flat_map(|file| file.split(SECTION).skip(1))
}

impl Operation {
    /// The operation `name` of the Lua files `files`: a primitive's, then any whose
    /// operations it shares.
    ///
    /// # Panics
    /// When no file has a section `name`: a mistake in the crate, found by any test that
    /// runs the operation.
    pub(crate) fn new(files: &[&str], name: &str) -> Operation {
        let section = sections(files)
            .find(|section| section.split('\n').next() == Some(name))
            .unwrap_or_else(|| panic!("redmutex: no Lua section `{name}`"));
        let used = used_declarations(&shared(files), section);
        let source = match section.split_once(HEAD) {
            Some((head, body)) => format!("-- {head}\n{used}{body}"),
            None => format!("{used}-- {section}"),
        };
        let script = known(&source);
        let sharded = announce_function(&source).map(|plain| {
            let by_shard = announce_function(SHARDED).expect("sharded.lua's announce_on");
            let sharded = source.replacen(plain, by_shard, 1);
            let script = known(&sharded);
            (sharded, script)
        });
        Operation {
            source,
            script,
            sharded,
        }
    }

    /// The script for claims whose announcements travel as `channels` say.
    pub(crate) fn script(&self, channels: Channels) -> &Script {
        match (channels, &self.sharded) {
            (Channels::Sharded, Some((_, script))) => script,
            _ => &self.script,
        }
    }

    /// The whole source, for [`super::eval_whole`].
    pub(crate) fn source(&self, channels: Channels) -> &str {
        match (channels, &self.sharded) {
            (Channels::Sharded, Some((source, _))) => source,
            _ => &self.source,
        }
    }
}

/// The top-level declarations of `shared` (Lua: `local function NAME`, `local NAME = …`,
/// each with the comment above it) that `code` uses, directly or through another, in
/// their order. Anything else at the top level of `shared` is kept whatever `code` uses.
/// A name counts as used wherever it appears as a word outside a comment (in a string
/// too: at worst a declaration too many).
fn used_declarations(shared: &str, code: &str) -> String {
    let blocks = top_level_blocks(shared);
    let mut used = vec![false; blocks.len()];
    let mut words: std::collections::HashSet<&str> = lua_words(code).collect();
    loop {
        let before = used.iter().filter(|u| **u).count();
        for (block, used) in blocks.iter().zip(used.iter_mut()) {
            let wanted = block.names.is_empty()
                || block.names.iter().any(|name| words.contains(name.as_str()));
            if !*used && wanted {
                *used = true;
                words.extend(lua_words(&block.text));
            }
        }
        if used.iter().filter(|u| **u).count() == before {
            break;
        }
    }
    (blocks.iter().zip(used))
        .filter(|(_, used)| *used)
        .map(|(block, _)| block.text.as_str())
        .collect()
}

/// A top-level declaration: its text (with the comment above it) and the names it
/// declares; no names for anything else at the top level, which is always kept.
struct Block {
    text: String,
    names: Vec<String>,
}

/// Splits Lua source into its top-level blocks. A comment or a `local` at the margin
/// starts one (the declaration right under a comment joins it); every other line (indented,
/// or a closing `end`, `}` or `)`) belongs to the block above; a blank line ends a block.
fn top_level_blocks(source: &str) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    let mut open = false;
    for line in source.lines() {
        if line.trim().is_empty() {
            open = false;
            continue;
        }
        let opens = line.starts_with("--") || line.starts_with("local ");
        // Under a comment: more comment, or what it describes.
        let under_comment =
            (blocks.last()).is_some_and(|block| block.names.is_empty() && is_comment(&block.text));
        if !open || (opens && !under_comment) {
            blocks.push(Block {
                text: String::new(),
                names: Vec::new(),
            });
        }
        let block = blocks.last_mut().expect("pushed above");
        block.text.push_str(line);
        block.text.push('\n');
        if let Some(declared) = line.strip_prefix("local ") {
            let declared = declared.strip_prefix("function ").unwrap_or(declared);
            let names = declared.split(['(', '=']).next().unwrap_or_default();
            (block.names).extend(names.split(',').map(|name| name.trim().to_string()));
        }
        open = true;
    }
    // A comment with no declaration under it (a file's header) is nobody's: dropped.
    blocks.retain(|block| !block.names.is_empty() || !is_comment(&block.text));
    blocks
}

/// Whether every line of `text` is a comment.
fn is_comment(text: &str) -> bool {
    text.lines().all(|line| line.starts_with("--"))
}

/// The words of Lua source, comments left out, that could be names.
fn lua_words(source: &str) -> impl Iterator<Item = &str> {
    (source.lines())
        .map(|line| line.split("--").next().unwrap_or_default())
        .flat_map(|code| code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| !word.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "-- preamble\nlocal function shared() return 1 end\n--- op: one\n-- one's header\nreturn shared()\n--- op: two\nreturn 2\n";

    #[test]
    fn a_cluster_variant_announces_on_shard_channels_and_only_where_a_script_announces() {
        let announcing =
            "-- preamble\n--- op: a\nannounce_on(KEYS[1], '', 'released')\n--- op: quiet\nreturn 1\n";
        let (a, quiet) = (
            Operation::new(&[announcing], "a"),
            Operation::new(&[announcing], "quiet"),
        );
        let (plain, sharded) = (a.source(Channels::Plain), a.source(Channels::Sharded));
        assert!(plain.contains("redis.pcall('publish', key .. suffix, message)"));
        assert!(!plain.contains("spublish"));
        assert!(sharded.contains("redis.pcall('spublish', channel, message)"));
        assert_eq!(sharded.matches("local function announce_on(").count(), 1);
        assert_eq!(
            plain.replace(announce_function(plain).unwrap(), ""),
            sharded.replace(announce_function(sharded).unwrap(), "")
        );
        assert_ne!(
            a.script(Channels::Plain).get_hash(),
            a.script(Channels::Sharded).get_hash()
        );
        // Nothing announced: one script serves both.
        assert_eq!(
            quiet.source(Channels::Sharded),
            quiet.source(Channels::Plain)
        );
        assert_eq!(
            quiet.script(Channels::Sharded).get_hash(),
            quiet.script(Channels::Plain).get_hash()
        );
    }

    #[test]
    fn an_operation_is_what_it_uses_of_the_helpers_and_preamble_then_its_section() {
        let one = Operation::new(&[FILE], "one");
        assert!(one
            .source(Channels::Plain)
            .starts_with("-- preamble\nlocal function shared() return 1 end\n-- one\n"));
        assert!(one
            .source(Channels::Plain)
            .ends_with("-- one\n-- one's header\nreturn shared()"));
        assert!(!one.source(Channels::Plain).contains("return 2"));
        let two = Operation::new(&[FILE], "two");
        assert_eq!(two.source(Channels::Plain), "-- two\nreturn 2\n");
        // A head runs before the declarations.
        let headed = "local function shared() return 1 end\n--- op: h\nif ARGV[1] then return 0 end\n--- then\nreturn shared()\n";
        assert_eq!(
            Operation::new(&[headed], "h").source(Channels::Plain),
            "-- h\nif ARGV[1] then return 0 end\nlocal function shared() return 1 end\nreturn shared()\n"
        );
        assert_ne!(
            one.script(Channels::Plain).get_hash(),
            two.script(Channels::Plain).get_hash()
        );
        // The helpers come along as used: `holds` calls `owned`.
        let three = Operation::new(&["\n--- op: three\nreturn holds(1, 1, ARGV[1])"], "three");
        let (owned, holds) = (
            three
                .source(Channels::Plain)
                .find("local function owned(")
                .expect("owned"),
            three
                .source(Channels::Plain)
                .find("local function holds(")
                .expect("holds"),
        );
        assert!(owned < holds, "in the helpers' order");
        assert!(three
            .source(Channels::Plain)
            .contains("-- Whether every key in KEYS[first..last]"));
        assert!(!three
            .source(Channels::Plain)
            .contains("local function now_ms("));
    }

    /// A file whose operations a primitive shares: its sections are the primitive's, and
    /// its preamble comes after the primitive's, whose declarations it may call.
    #[test]
    fn a_shared_file_adds_its_sections_and_preamble_after_the_primitives() {
        let primitive = "local function hook() return 1 end\n--- op: own\nreturn hook()\n";
        let common =
            "-- header\n\nlocal function both() return hook() end\n--- op: s\nreturn both()\n";
        assert_eq!(
            Operation::new(&[primitive, common], "s").source(Channels::Plain),
            "local function hook() return 1 end\nlocal function both() return hook() end\n-- s\nreturn both()\n"
        );
        assert_eq!(
            Operation::new(&[primitive, common], "own").source(Channels::Plain),
            "local function hook() return 1 end\n-- own\nreturn hook()\n"
        );
    }

    /// Declarations kept, with their comments, by name — used in code, or by another
    /// declaration kept — in their order; names in comments do not count; a header comment
    /// and anything unused go.
    #[test]
    fn only_the_declarations_used_are_kept() {
        let shared = "-- header\n\n-- a's comment\n-- on two lines\nlocal function a(x)\n  return x\nend\nlocal B, C = 1, 2\n\n-- d: calls a\nlocal function d()\n  return a(1) -- not e\nend\n\nlocal function e() return 0 end\n\nredis.setresp(2)\n";
        assert_eq!(
            used_declarations(shared, "return d() + C -- and e"),
            "-- a's comment\n-- on two lines\nlocal function a(x)\n  return x\nend\nlocal B, C = 1, 2\n-- d: calls a\nlocal function d()\n  return a(1) -- not e\nend\nredis.setresp(2)\n"
        );
        assert_eq!(used_declarations(shared, "return 1"), "redis.setresp(2)\n");
    }

    /// Every primitive's Lua files, as its `operations!` names them.
    #[cfg(feature = "memory")]
    const PRIMITIVES: [&[&str]; 6] = {
        use crate::primitives::{election, fair, mutex, rwlock, semaphore};
        [
            mutex::FILES,
            semaphore::FILES,
            rwlock::FILES,
            fair::FILES,
            election::FILES,
            crate::ops::listing::FILES,
        ]
    };

    /// Every operation of every primitive compiles, and declares every helper and
    /// preamble function it calls (Redis refuses a script's access to an undeclared
    /// global only when the call runs).
    #[cfg(feature = "memory")]
    #[test]
    fn every_operation_compiles_and_declares_what_it_uses() {
        let lua = mlua::Lua::new();
        let mut operations = 0;
        for files in PRIMITIVES {
            let shared = top_level_blocks(&shared(files));
            for section in sections(files) {
                let name = section.split('\n').next().unwrap_or_default();
                let operation = Operation::new(files, name);
                for channels in [Channels::Sharded, Channels::Plain] {
                    let source = operation.source(channels).to_string();
                    if let Err(e) = lua.load(&source).into_function() {
                        panic!("{name} ({channels:?}): {e}");
                    }
                }
                let source = operation.source(Channels::Plain).to_string();
                let declared: Vec<String> = (top_level_blocks(&source).into_iter())
                    .flat_map(|b| b.names)
                    .collect();
                for word in lua_words(&source) {
                    let shared_name = shared.iter().any(|b| b.names.iter().any(|n| n == word));
                    assert!(
                        !shared_name || declared.iter().any(|n| n == word),
                        "{name} uses {word} without declaring it"
                    );
                }
                operations += 1;
            }
        }
        assert!(operations >= 30, "{operations} operations");
    }

    /// The names Lua source calls (a word right before a `(`), comments left out.
    #[cfg(feature = "memory")]
    fn called(source: &str) -> Vec<&str> {
        let mut calls = Vec::new();
        for line in source.lines() {
            let code = line.split("--").next().unwrap_or_default();
            let mut start = None;
            for (i, c) in code.char_indices() {
                match (start, c.is_ascii_alphanumeric() || c == '_') {
                    (None, true) => start = Some(i),
                    (Some(from), false) => {
                        if c == '(' {
                            calls.push(&code[from..i]);
                        }
                        start = None;
                    }
                    _ => {}
                }
            }
        }
        calls
    }

    /// What a declaration of the helpers and preambles calls is declared above it: Lua
    /// reads a name declared only further down as a global, refused only when the call
    /// runs (`scripts/holders.lua` calls what the primitive's preamble, before it,
    /// declares). And no section is found in two files of one primitive.
    #[cfg(feature = "memory")]
    #[test]
    fn shared_declarations_come_before_their_use_and_sections_once() {
        for files in PRIMITIVES {
            let blocks = top_level_blocks(&shared(files));
            let declares = |block: &Block, name: &str| block.names.iter().any(|n| n == name);
            for (i, block) in blocks.iter().enumerate() {
                for name in called(&block.text) {
                    let above = blocks[..=i].iter().any(|b| declares(b, name));
                    let below = blocks[i + 1..].iter().any(|b| declares(b, name));
                    assert!(
                        above || !below,
                        "{name} is called above its declaration:\n{}",
                        block.text
                    );
                }
            }
            let mut names: Vec<&str> = sections(files)
                .map(|section| section.split('\n').next().unwrap_or_default())
                .collect();
            let count = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), count, "a section in two files: {names:?}");
        }
    }

    #[test]
    #[should_panic(expected = "no Lua section `three`")]
    fn a_missing_section_is_a_mistake_found_at_once() {
        Operation::new(&[FILE], "three");
    }

    #[test]
    fn the_scripts_read_stored_values_as_token_rs_writes_them() {
        let listing = include_str!("../ops/listing.lua");
        let token_len = format!("local TOKEN_LEN = {}\n", crate::token::TOKEN_LEN);
        assert!(
            listing.contains(&token_len),
            "listing.lua must say {token_len:?}"
        );
        for (name, flag) in crate::token::FLAG_NAMES {
            let line = format!("local {name} = '{}'\n", char::from(flag));
            assert!(HELPERS.contains(&line), "helpers.lua must say {line:?}");
        }
        let tombstone = String::from_utf8(crate::token::TOMBSTONE.to_vec()).unwrap();
        let tombstone = format!("local TOMBSTONE = '{tombstone}'\n");
        assert!(
            listing.contains(&tombstone),
            "listing.lua must say {tombstone:?}"
        );
        let ask = String::from_utf8(crate::token::ASK_CHANNEL.to_vec()).unwrap();
        let ask = format!("local ASK_CHANNEL = '{ask}'\n");
        assert!(listing.contains(&ask), "listing.lua must say {ask:?}");
    }

    #[test]
    fn the_line_heartbeat_and_the_hand_off_are_the_scripts_own() {
        let line = format!("local LINE_BEAT_MS = {}\n", LINE_HEARTBEAT.as_millis());
        assert!(LINE.contains(&line), "line.lua must say {line:?}");
        let line = format!("local HANDOFF_MS = {}\n", HANDOFF.as_millis());
        assert!(LINE.contains(&line), "line.lua must say {line:?}");
    }
}
