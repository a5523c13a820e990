-- mutex.lua: the mutex — one or more keys, each a string holding the owner's value (token,
-- flag byte, metadata) with a TTL. One file, one section per operation: each section (from
-- its `--- op:` line to the next) is a script of its own, run with helpers.lua and this
-- preamble before it (see scripts/lua.rs), so a call runs only what its operation needs.
--
-- A key that holds our own token counts as ours; a key of another type (pcall turns its
-- WRONGTYPE error into a table) counts as held by someone else, and only values in
-- redmutex's own format are ever flagged; anything else is left as it is.
--
-- Waiting processes take turns by the key's line (see line.lua): a waiter's try that
-- finds the key held puts its locker in the line and flags the holder's value (LINED).
-- The release of a flagged value hands the key to the first locker in line whose
-- heartbeat is live — the key holds the locker's id with the flag HANDED for HANDOFF_MS,
-- during which only that locker's waiters may take it — and tells that locker alone, on a
-- channel of its own (`tell_turn`): one message and one try per hand-off, however many
-- processes wait. The locker handed the key leaves the line, and flags its own value
-- when others are in line. (More of its waiters, which it wakes itself when it releases
-- the key, line it up again if the key goes to another.)
-- Unclaimed (its process died or froze, or the message was lost), a handed key is free
-- once HANDOFF_MS passes; the waiters' own tries, at least once per third of a heartbeat,
-- take it then, and pass over a locker whose heartbeat ended.

--- op: obtain
-- take every key, or none of them; for a fenced acquire, hand out the next
-- fence too.
-- KEYS:    the lock keys; then (fenced) the fence counter of each; then (ARGV[8] given)
--          the line of each (see line.lua), in the same order.
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the token's length; the owner check compares that many leading bytes.
-- ARGV[4]: '1' when the caller waits for a release: a held key is then flagged so that
--          its release tells the caller (AWAITED: announced on the key's channel).
-- ARGV[5]: the number of lock keys.
-- ARGV[6]: fenced: how long the counters are kept after this use, in milliseconds.
-- ARGV[7]: '1' when fenced.
-- ARGV[8]: (optional, waiting) the locker's id: a held key puts it in the key's line
--          (LINED), and a key handed to this locker counts as free.
-- ARGV[9]: (optional, with ARGV[8], several keys) per key, '1' where another waiter of
--          the locker waits for it (see below), else '0'.
-- Returns: { 0, fence } when every key now holds ARGV[1] with the TTL: fence is above
--          every counter (see next_fence), now stored in all of them (0 when not fenced);
--          otherwise { i, pttl }: i is the 1-based index of the first key held by another
--          owner, pttl its remaining TTL (-1: none; -3: handed to another locker, which
--          takes it or lets it go within HANDOFF_MS — but its pttl where this try holds
--          a hand-off of another key: see below), and nothing was written but the flag
--          and the line.
-- A key that already holds our own token counts as free: an earlier try whose reply was
-- lost may have set it, and the retry must be able to finish what that try started.
-- A key of another type (pcall turns its WRONGTYPE error into a table) counts as held, and
-- only values in redmutex's own format are ever flagged; anything else is left as it is.
-- A counter that is someone else's value stops the script before anything is written.
-- A try that finds a key held passes on the other keys handed to its locker, and steps
-- out of their lines, unless another waiter of the locker waits for them (see below).
local length = tonumber(ARGV[3])
local count = tonumber(ARGV[5])
local token = string.sub(ARGV[1], 1, length)
local fenced = ARGV[7] == '1'
local locker = ARGV[8]
local kept = ARGV[9] or ''
local handed = locker and locker .. HANDED
local lines = fenced and 2 * count or count
-- Which keys were handed to this locker (the hand-off took it out of their lines).
local was_handed = {}
for i = 1, count do
  local value = redis.pcall('get', KEYS[i])
  was_handed[i] = handed and value == handed
  if value ~= false and not owned(value, token) and value ~= handed then
    local in_flight = type(value) == 'string' and flag_of(value, length) == HANDED
    if locker then
      -- This waiter now waits for key i alone, and hears of that key's hand-offs only. Of
      -- the other keys, those another waiter of its locker waits for (ARGV[9]) keep the
      -- locker's place, and a key handed to it stays for that waiter; from the others'
      -- lines the locker steps out — a key handed to it goes on to the next, and where it
      -- led the line of a free key (told of its turn there: a release kept for a minimum
      -- hold, a forced release) the next is told — so that nothing is handed to a locker
      -- that does not listen, idle until the hand-off passes (simulator seeds 532,
      -- 22469). It joins again at the end with a try that finds that key held. While key
      -- i is itself being handed to another locker, it keeps what was handed to it (see
      -- below) — lockers waiting for the same keys would pass them round among themselves
      -- at once (simulator seed 33102) — but still leaves the other lines: a key handed
      -- there later would wait for it in vain (simulator seed 644).
      for j = 1, count do
        local line = KEYS[lines + j]
        if j ~= i and string.sub(kept, j, j) ~= '1' then
          -- (A key before i was free for this try, or its own, or handed to it.)
          local other = false
          if j > i then
            other = redis.pcall('get', KEYS[j])
          end
          if was_handed[j] or other == handed then
            if not in_flight then
              pass_key(KEYS[j], line)
            end
          else
            local led = first_live(line) == locker
            if leave_line(line, locker) and led and other == false then
              tell_first(KEYS[j], line)
            end
          end
        end
      end
      join_line(KEYS[lines + i], locker, now_us())
      mark_waiter(KEYS[i], value, length, LINED)
    elseif ARGV[4] == '1' then
      mark_waiter(KEYS[i], value, length, AWAITED)
    end
    if in_flight then
      -- A try that holds a hand-off of another key, which it cannot use while key i is
      -- being handed to another locker, may face that locker's waiter in its own place
      -- (two lockers waiting for the same keys in opposite orders): each keeps what the
      -- other needs until both hand-offs lapse, and nobody is told. It tries again once
      -- key i's hand-off settles (its pttl), and takes or passes on what it holds then.
      for j = 1, count do
        if j ~= i and (was_handed[j] or (j > i and redis.pcall('get', KEYS[j]) == handed)) then
          return { i, redis.call('pttl', KEYS[i]) }
        end
      end
      return { i, -3 }
    end
    return { i, redis.call('pttl', KEYS[i]) }
  end
end
local fence = 0
if fenced then
  local err
  fence, err = next_fence(count + 1, 2 * count)
  if fence == nil then
    return redis.error_reply(err)
  end
end
local flag = flag_of(ARGV[1], length)
for i = 1, count do
  local value = ARGV[1]
  if locker then
    local line = KEYS[lines + i]
    -- A key handed on was contended: its value is flagged for the line without a look
    -- (a release that then finds nobody in line deletes it, as an unflagged one would).
    if not was_handed[i] then
      leave_line(line, locker)
    end
    if was_handed[i] or redis.call('exists', line) == 1 then
      value = token .. ((flag == AWAITED) and LINED_AWAITED or LINED) .. metadata_of(ARGV[1], length)
    end
  end
  redis.call('set', KEYS[i], value, 'px', ARGV[2])
end
if fenced then
  store_fence(count + 1, 2 * count, fence, ARGV[6])
end
return { 0, fence }

--- op: obtain_one
-- the common fenced case of 'obtain', lean: one key, a first try that
-- does not wait (no own keys to recognise, no holder to mark).
-- KEYS[1]: the lock key.
-- KEYS[2]: its fence counter.
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: how long the counter is kept after this use, in milliseconds.
-- Returns: { 0, fence } when the key now holds ARGV[1] with the TTL, fence being the next
--          one (see next_fence), now stored in the counter; { 1, -3 } when the key exists
--          (nothing written; its TTL is not read on this path).
-- A counter that is someone else's value: the key just set is deleted again and the
-- script answers an error, so nothing is left behind.
if not redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  return { 1, -3 }
end
local fence, err = next_fence(2, 2)
if fence == nil then
  redis.call('del', KEYS[1])
  return redis.error_reply(err)
end
store_fence(2, 2, fence, ARGV[3])
return { 0, fence }

--- op: release
-- delete the keys this owner still holds.
-- KEYS:    the lock keys, then — where lockers line up (one node decides: not on a
--          cluster, not on Redlock) — the line of
--          each (see line.lua), in the same order. (A lock key is never named like a
--          line: the names `{…}:line` and `{…}:line:…` are refused as lock keys.)
-- ARGV[1]: the owner's token and the flag '-': the value of its key when nobody waits
--          for it and it carries no metadata, compared whole in the common case.
-- ARGV[2]: (optional) keep: instead of deleting them, let the keys expire in this many
--          milliseconds (a minimum hold time that has not passed yet).
-- ARGV[3]: (optional) 'undo': a quorum's failed try undone on this node — nothing is
--          announced (see below).
-- ARGV[4]: (optional, with a locker's id, several keys) per key, '1' where another waiter
--          of the locker still waits for it: the locker keeps its place in that line.
-- Returns: how many keys did NOT hold the token (0 means fully released).
-- A key held by someone else, or missing, is never touched; the keys that still hold our
-- token are deleted even when others are lost, so they do not block anyone until expiry.
-- A key whose value says lockers wait in line (LINED, LINED_AWAITED) is handed to the
-- first of them (see the top of this file) rather than deleted; one watched (AWAITED,
-- LINED_AWAITED: a waiter not in a line, or a wait for the release alone) is announced
-- on the channel named like the key, and a watched or lined key that is deleted (a line at its end: a reader that
-- found a lined locker waiting marks nothing) on the readers' channel too (see
-- tell_watchers). Unflagged keys publish nothing, so an uncontended release costs no
-- PUBLISH. The
-- announcements are hints (waiters also poll): a PUBLISH refused (an ACL user without the
-- channel) must not fail the release, so it goes through pcall. A key kept for a minimum
-- hold is handed to nobody; the first in line is told, and tries when it expires.
-- An undo announces nothing: the keys a failed Redlock try took on a minority of nodes
-- were never a lock anyone could wait for, and waiters count a release once a quorum of
-- nodes announced it — two processes each undoing a try on a node of its own made such a
-- quorum, and woke each other's waiters to try and undo again, without end (the
-- simulator found it: clients spinning while a majority was held).
-- The same call, given a locker's id instead of a token, takes that locker out of the
-- lines: a key handed to it goes on to the next (see the end of this section). It
-- releases nothing, and answers as for a token that holds nothing.
-- The common case first, before any helper is declared (Lua creates each on every call:
-- they doubled this script's server time), and without making a string (each one made
-- costs the server ~0.2 µs, here a quarter of the script's time): one key (and its
-- line), nothing kept, its value ARGV[1] as it is — deleted, nothing to announce.
local first = redis.pcall('get', KEYS[1])
if first == ARGV[1] and (ARGV[2] == nil or ARGV[2] == '0')
  and (#KEYS == 1 or (#KEYS == 2 and (string.find(KEYS[2], '^{[^}]+}:line$')
    or string.find(KEYS[2], '^{[^}]+}:line:')))) then
  redis.call('del', KEYS[1])
  return 0
end
--- then
local token = string.sub(ARGV[1], 1, -2)
local keep = tonumber(ARGV[2] or '0')
local announce = ARGV[3] ~= 'undo'
local kept = ARGV[4] or ''
local count = #KEYS
local half = KEYS[count / 2 + 1]
if count % 2 == 0 and (string.find(half, '^{[^}]+}:line$') or string.find(half, '^{[^}]+}:line:')) then
  count = count / 2
end
local missing = 0
for i = 1, count do
  local key, line = KEYS[i], KEYS[count + i]
  local value = first
  if i > 1 then
    value = redis.pcall('get', key)
  end
  if owned(value, token) then
    local flag = flag_of(value, #token)
    -- Deleted: free for anyone, a read-write lock's readers of the same name too.
    local freed = false
    if keep > 0 then
      keep_held(key, value, token, keep)
      if lined(flag) and line then
        tell_first(key, line)
      end
    elseif not lined(flag) or not line or not hand_key(key, line) then
      redis.call('del', key)
      freed = true
    end
    if announce and watched(flag) then
      tell_watchers(key, freed)
    elseif announce and freed and lined(flag) then
      -- The end of a line: readers refused while it lasted may come in.
      announce_on(key, READERS, EVERYONE)
    end
  else
    -- A locker giving up: out of line, and a key handed to it goes on. (Freed: the
    -- readers refused while it was handed may come in.)
    if line and string.sub(kept, i, i) ~= '1' and withdraw(key, line, token, value) then
      announce_on(key, READERS, EVERYONE)
    end
    missing = missing + 1
  end
end
return missing

--- op: refresh
-- set a new TTL on every key, only if this owner holds all of them.
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- ARGV[2]: the new TTL in milliseconds.
-- Returns: 1 when every key was extended; 0 when some key is not held (nothing changed).
if not holds(1, #KEYS, ARGV[1]) then
  return 0
end
for _, key in ipairs(KEYS) do
  redis.call('pexpire', key, ARGV[2])
end
return 1

--- op: renew
-- refresh many leases in one call (keep-alive), each owner-checked on its own, and say
-- which were asked to let go.
-- KEYS:    per lease in the batch, lease after lease: its keys, then the ask companion of
--          each (see `asked`), in the same order.
-- ARGV:    three values per lease, in the same order: its number of keys, its token, and
--          the TTL in milliseconds to set.
-- Returns: one answer per lease (see `renewed`): 1 when all its keys were extended;
--          { 1, ids... } when they were, and its holder was asked to release one of them
--          by those requests; 0 when some key is not held by its token (then none of that
--          lease's keys was changed).
local results = {}
local k = 1
for a = 1, #ARGV, 3 do
  local count = tonumber(ARGV[a])
  local last = k + count - 1
  local held = 0
  local requests = {}
  if holds(k, last, ARGV[a + 1]) then
    held = 1
    for i = k, last do
      redis.call('pexpire', KEYS[i], ARGV[a + 2])
      asked(KEYS[i + count], ARGV[a + 1], requests)
    end
  end
  results[#results + 1] = renewed(held, requests)
  k = k + 2 * count
end
return results

--- op: ttl
-- the remaining TTL of a lock, owner-checked.
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- Returns: the smallest remaining TTL in milliseconds over the keys; -2 when some key is
--          not held by this owner; -1 when no key has an expiry (removed by someone else).
if not holds(1, #KEYS, ARGV[1]) then
  return -2
end
local least = -1
for _, key in ipairs(KEYS) do
  local ttl = redis.call('pttl', key)
  if ttl >= 0 and (least < 0 or ttl < least) then
    least = ttl
  end
end
return least

--- op: guarded
-- the caller's commands, run only while this owner holds every lock key (a lock, a fair
-- lock's holder, a writer, a leader).
-- KEYS:    the lock keys (ARGV[2] of them), then the keys the commands touch.
-- ARGV[1]: the owner's token.  ARGV[2]: the number of lock keys.
-- ARGV[3…]: the commands (see run_guarded in helpers.lua).
-- Returns: { 0 } when some key is not held by this owner (nothing ran); otherwise
--          { 1, replies } (see run_guarded).
if not holds(1, tonumber(ARGV[2]), ARGV[1]) then
  return { 0 }
end
return { 1, run_guarded(3) }

--- op: await
-- what a key holds, and the latest fence handed out for it, read by anyone, atomically;
-- for a waiter that does not take the key, first mark its holder as observed (its release
-- is announced; nobody is said to wait to take it).
-- KEYS[1]: the key.  KEYS[2]: its fence counter.
-- ARGV[1]: '1' to mark the holder (the waiter hears of releases), '0' to only read.
-- ARGV[2]: the token's length.
-- Returns: as read_key.
if ARGV[1] == '1' then
  mark_waiter(KEYS[1], redis.pcall('get', KEYS[1]), tonumber(ARGV[2]), OBSERVED)
end
return read_key(KEYS[1], KEYS[2])

--- op: fence
-- the fence of a lock taken without one, handed out when its holder first asks.
-- KEYS:    the lock keys, then the fence counter of each, in the same order.
-- ARGV[1]: the owner's token.
-- ARGV[2]: how long the counters are kept after this use, in milliseconds.
-- Returns: the next fence (see next_fence), now stored in every counter, when this owner
--          holds every lock key; 0 when it does not (nothing changed: a fence is only ever
--          handed out while the lock is held, so a later holder's is always greater).
local count = #KEYS / 2
if not holds(1, count, ARGV[1]) then
  return 0
end
local fence, err = next_fence(count + 1, #KEYS)
if fence == nil then
  return redis.error_reply(err)
end
store_fence(count + 1, #KEYS, fence, ARGV[2])
return fence

--- op: raise_fence
-- Redlock's second step for fences: make a chosen fence durable on this node.
-- KEYS:    the lock keys, then the fence counter of each, in the same order.
-- ARGV[1]: the owner's token.  ARGV[2]: the fence chosen for this acquisition.
-- ARGV[3]: how long a raised counter is kept, in milliseconds.
-- Returns: 1 when this owner holds every lock key here and every counter is now at least
--          the fence (raised where lower, never lowered); 0 when some key is not held by
--          this owner (nothing changed: a raise for a lock we no longer hold must not count)
--          or a counter is someone else's value (left as it is: this node cannot make the
--          fence durable).
local count = #KEYS / 2
if not holds(1, count, ARGV[1]) then
  return 0
end
return raise_counters(count + 1, #KEYS, tonumber(ARGV[2]), ARGV[3])
