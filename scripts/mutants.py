#!/usr/bin/env python3
"""Plants one known bug (a mutant) in a copy of the tree, for scripts/mutants.sh: the
simulator's rules must catch each of them in at least 1 % of the CI budget's seeds
(docs/RELIABILITY.md, "What the rules catch").

    python3 scripts/mutants.py TREE NAME    # plant NAME in TREE (a copy, never the checkout)
    python3 scripts/mutants.py --list       # the mutants, one per line

Each mutant is a small textual change; it fails loudly when its text is not found (the
code it targets has moved: update the mutant with it).
"""
import sys

LUA = "redmutex/src/primitives/"
HELPERS = "redmutex/src/scripts/helpers.lua"


class Tree:
    def __init__(self, root):
        self.root = root

    def sub(self, path, old, new):
        """Replaces `old`, which must occur exactly once in the file, by `new`."""
        full = f"{self.root}/{path}"
        text = open(full).read()
        if text.count(old) != 1:
            sys.exit(f"{path}: {text.count(old)} occurrences of {old!r}")
        open(full, "w").write(text.replace(old, new))

    def sub_in(self, path, op, old, new):
        """Replaces `old` within the section of the operation `op` of a Lua file."""
        full = f"{self.root}/{path}"
        text = open(full).read()
        start = text.index(f"--- op: {op}\n")
        end = text.find("\n--- op:", start + 1)
        end = len(text) if end < 0 else end
        section = text[start:end]
        if old not in section:
            sys.exit(f"{path} ({op}): {old!r} not found")
        open(full, "w").write(text[:start] + section.replace(old, new) + text[end:])


def a_lock(t):
    "A mutex release (locks, leaders) tells nobody: no hand-off, no announcement."
    t.sub_in(LUA + "mutex.lua", "release", "local announce = ARGV[3] ~= 'undo'", "local announce = false")
    t.sub_in(LUA + "mutex.lua", "release",
             "elseif not lined(flag) or not line or not hand_key(key, line) then", "else")
    t.sub_in(LUA + "mutex.lua", "release", "if lined(flag) and line then\n        tell_first(key, line)",
             "if false then\n        tell_first(key, line)")


def a_fair(t):
    "A fair lock's release tells nobody: not its queue, not the key's watchers or line."
    t.sub_in(LUA + "fair.lua", "release", "  tell = true\n", "  tell = false\n")
    t.sub_in(LUA + "fair.lua", "release",
             "  if watched(flag) then\n    tell_watchers(key, keep == 0)\n  end\n"
             "  if lined(flag) then\n    tell_first(key, KEYS[3])\n  end\n", "")


def a_permit(t):
    "A semaphore's release tells nobody: no permit handed to its line, no announcement."
    t.sub_in(LUA + "semaphore.lua", "release", "while line and left > 0 do", "while false and left > 0 do")
    t.sub_in(LUA + "semaphore.lua", "release", "permits_back(holders, details, line, state, now, freed)\nreturn 0",
             "return 0")
    t.sub_in(LUA + "semaphore.lua", "release",
             "  if state.awaited then\n    announce_on(holders, '', tostring(left))\n  end\n  return 0",
             "  return 0")


def a_write(t):
    "A writer's release tells nobody: no hand-off to the line, no announcement to anyone."
    t.sub_in(LUA + "rwlock.lua", "release_write", "local announce = ARGV[3] ~= 'keep-intent'",
             "local announce = false")
    t.sub_in(LUA + "rwlock.lua", "release_write",
             "  elseif not (lined(flag) and hand_key(lock, line)) then", "  else")
    t.sub_in(LUA + "rwlock.lua", "release_write", "    if lined(flag) then\n      tell_first(lock, line)",
             "    if false then\n      tell_first(lock, line)")
    t.sub_in(LUA + "rwlock.lua", "release_write", "if ours_intents and announce then",
             "if ours_intents and ARGV[3] ~= 'keep-intent' then")


def a_read(t):
    "A reader's release tells nobody that the readers' end came forward."
    t.sub_in(LUA + "rwlock.lua", "release_read", "if latest() < ended then", "if false then")


def b_lock(t):
    "A mutex release skips the line: it frees the key for anyone (watchers still told)."
    t.sub_in(LUA + "mutex.lua", "release",
             "elseif not lined(flag) or not line or not hand_key(key, line) then", "else")


def b_fair(t):
    "A fair lock's release skips its queue (the key's watchers and line still told)."
    t.sub_in(LUA + "fair.lua", "release", "  tell = true\n", "  tell = false\n")


def b_permit(t):
    "A semaphore's release skips its line: permits come back free, waiters that marked told."
    t.sub_in(LUA + "semaphore.lua", "release", "while line and left > 0 do", "while false and left > 0 do")
    t.sub_in(LUA + "semaphore.lua", "release", "permits_back(holders, details, line, state, now, freed)\nreturn 0",
             "if state.awaited then announce_on(holders, '', tostring(freed)) end\nreturn 0")


def b_write(t):
    "A writer's release skips the line: it frees the key (announcements still made)."
    t.sub_in(LUA + "rwlock.lua", "release_write",
             "  elseif not (lined(flag) and hand_key(lock, line)) then", "  else")


def b_read(t):
    "The last reader's release skips the line: announced on the key's channel only."
    t.sub_in(LUA + "rwlock.lua", "release_read",
             "  if first and latest() == 0 then\n    hand_key(lock, line, first)\n  elseif first then\n"
             "    tell_turn(lock, first)\n  elseif", "  if")


def c_lock(t):
    "A mutex renewal (locks, fair locks, writers, leaders) renews keys it no longer owns."
    t.sub_in(LUA + "mutex.lua", "renew", "  if holds(k, last, ARGV[a + 1]) then", "  if true then")


def c_permit(t):
    "A semaphore's renewal (and refresh) says 'extended' for a holder it no longer has."
    t.sub(LUA + "semaphore.lua", "  return now, state and state.limit and live_expiry(holders, token, now), state",
          "  return now, state and state.limit and (live_expiry(holders, token, now) or now), state")


def c_read(t):
    "A reader's renewal (and refresh) says 'extended' for a reader that is gone."
    t.sub(LUA + "rwlock.lua", "  reclaim(lock, details, now)\n  return now, live_expiry(lock, token, now)",
          "  reclaim(lock, details, now)\n  return now, live_expiry(lock, token, now) or now")


def d_drift(t):
    "No clock-drift allowance: a validity as long as the TTL."
    t.sub("redmutex/src/quorum.rs",
          "        let proportional =\n            Duration::try_from_secs_f64(ttl.as_secs_f64() * self.factor)"
          ".unwrap_or(Duration::MAX);\n        proportional.saturating_add(self.fixed)",
          "        let _ = ttl;\n        Duration::ZERO")


def e_limit(t):
    "A semaphore admits one over its limit."
    t.sub(LUA + "semaphore.lua", "  if not mine and state.used + wanted > limit then",
          "  if not mine and state.used + wanted > limit + 1 then")


def f_fence(t):
    "A fence counter at or above the clock hands its own value out again."
    t.sub(HELPERS, "    if value and value + 1 > fence then\n      fence = value + 1",
          "    if value and value >= fence then\n      fence = value")


def g_forced(t):
    "A forced release tells its holder nothing: no 'forced' on the key's ask channel."
    path = "redmutex/src/ops/listing.lua"
    full = f"{t.root}/{path}"
    text = open(full).read()
    if text.count("announce_on(KEYS[1], ASK_CHANNEL, 'forced')") != 3:
        sys.exit(f"{path}: the three announcements of a forced release moved")
    open(full, "w").write(text.replace("announce_on(KEYS[1], ASK_CHANNEL, 'forced')", "local _ = 0"))


def h_held(t):
    "A holder that ends sooner (released, shortened) tells only its own claim's waiters."
    t.sub("redmutex/src/engine/context.rs",
          "            hub.held_until(&channels.name(key, b\"\"), until);\n"
          "            // (No id yet: no waiter of this locker ever lined up.)\n"
          "            if let (true, Some(id)) = (lines, self.id.get()) {",
          "            // (No id yet: no waiter of this locker ever lined up.)\n"
          "            if !lines {\n                hub.held_until(&channels.name(key, b\"\"), until);\n"
          "            } else if let Some(id) = self.id.get() {")


def i_multi(t):
    "A waiter for several keys that finds one held keeps its place in every other line."
    t.sub_in(LUA + "mutex.lua", "obtain",
             "if j ~= i and string.sub(kept, j, j) ~= '1' then", "if false then")


def j_in_flight(t):
    "A try for several keys passes the others on while its key is being handed elsewhere."
    t.sub_in(LUA + "mutex.lua", "obtain",
             "            if not in_flight then\n              pass_key(KEYS[j], line)",
             "            if true then\n              pass_key(KEYS[j], line)")


def k_kept(t):
    "A try for several keys passes on a key handed to its locker that another waiter wants."
    t.sub_in(LUA + "mutex.lua", "obtain",
             "if j ~= i and string.sub(kept, j, j) ~= '1' then",
             "if j ~= i then")


def l_asked(t):
    "A lease already asked to let go ignores prompts: a forced release is heard late."
    t.sub("redmutex/src/engine/renewer.rs", "        if !self.renewing {\n            return;",
          "        if !self.renewing || self.entry.state.release_requested() {\n            return;")


def m_opposite(t):
    "A multi-key try holding a hand-off it cannot use waits for no settling (opposite orders)."
    t.sub_in(LUA + "mutex.lua", "obtain",
             "if j ~= i and (was_handed[j] or (j > i and redis.pcall('get', KEYS[j]) == handed)) then",
             "if false then")


def n_missed(t):
    "A waiter for several keys that moves to another key's wake-ups never re-checks there."
    t.sub("redmutex/src/engine/wakeup.rs",
          "if state.members == 1 && (missed || !moved) && self.subscribed(&state) {",
          "if state.members == 1 && !moved && self.subscribed(&state) {")


def o_withdraw(t):
    "A waiter for several keys that gives up withdraws its locker from every line of them."
    t.sub("redmutex/src/primitives/mutex.rs", "        if kept.contains(&b'1') {",
          "        if kept.contains(&b'1') && kept.is_empty() {")


def p_unkept(t):
    "A waiter listening on one key withdraws nothing from the line its last try joined."
    t.sub("redmutex/src/engine/acquire.rs", "        (last || unkept).then_some(kept)",
          "        (last || unkept && false).then_some(kept)")


def q_handed(t):
    "A try told the key is being handed elsewhere waits for its heartbeat, not the hand-off."
    t.sub("redmutex/src/scripts/claim.rs", "                    HANDED_ELSEWHERE => Some(HANDOFF),",
          "                    HANDED_ELSEWHERE => None.filter(|_: &Duration| HANDOFF.is_zero()),")


def r_seen(t):
    "A newcomer queued behind its locker's waiters ignores the expiry their latest try saw."
    t.sub("redmutex/src/engine/wakeup.rs",
          "        let seen = (state.seen_until).filter(|_| state.members > 0);",
          "        let seen = (state.seen_until).filter(|_| false);")


def s_passed(t):
    "A multi-key try that found a key free (another held) wakes nobody waiting for it."
    t.sub("redmutex/src/engine/wakeup.rs",
          "            if outcome == (Outcome::HeldElsewhere { passed: true }) && state.members > 1 {",
          "            if false && state.members > 1 {")


MUTANTS = {
    "A-lock": a_lock, "A-fair": a_fair, "A-permit": a_permit, "A-write": a_write, "A-read": a_read,
    "B-lock": b_lock, "B-fair": b_fair, "B-permit": b_permit, "B-write": b_write, "B-read": b_read,
    "C-lock": c_lock, "C-permit": c_permit, "C-read": c_read,
    "D-drift": d_drift, "E-limit": e_limit, "F-fence": f_fence,
    "G-forced": g_forced, "H-held": h_held, "I-multi": i_multi, "J-in-flight": j_in_flight,
    "K-kept": k_kept, "L-asked": l_asked,
    "M-opposite": m_opposite, "N-missed": n_missed, "O-withdraw": o_withdraw,
    "P-unkept": p_unkept, "Q-handed": q_handed, "R-seen": r_seen, "S-passed": s_passed,
}

if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        for name, plant in MUTANTS.items():
            print(f"{name}\t{plant.__doc__}")
    elif len(sys.argv) == 3 and sys.argv[2] in MUTANTS:
        MUTANTS[sys.argv[2]](Tree(sys.argv[1]))
    else:
        sys.exit(__doc__)
