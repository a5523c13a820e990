-- mutex.lua: the mutex — one or more keys, each a string holding the owner's value (token,
-- flag byte, metadata) with a TTL. One file, one section per operation: each section (from
-- its `--- op:` line to the next) is a script of its own, run with helpers.lua and this
-- preamble before it (see scripts.rs), so a call runs only what its operation needs.
--
-- A key that holds our own token counts as ours; a key of another type (pcall turns its
-- WRONGTYPE error into a table) counts as held by someone else, and only values in
-- redmutex's own format are ever marked; anything else is left as it is.
--
-- No locker starves. A waiter's try that finds a key held names its locker in the holder's
-- value as next in line — unless a locker whose waiter began to wait earlier, and still
-- waits, is named already — by the locker's id, when the waiter began to wait and until
-- when it waits at most: on the server's clock, from the waiter's own account of how long
-- it has waited and may still wait, so that no two clients' clocks are compared. The
-- value's flag becomes 'W', and NEXT_LEN bytes follow it before the metadata: the id, then
-- the two moments in 15 digits each. The release hands such a key to that locker if its
-- waiter still waits: the key holds the locker's id with the flag 'r' for HANDOFF_MS,
-- during which only that locker's waiters may take it — not the releaser coming straight
-- back, nor a newcomer. Unclaimed (the waiter was cancelled, its process died), it is free
-- once that passes.
-- After each release every locker's woken waiter tries again and names itself on the new
-- holder, so the locker that has waited longest is always next.

-- How long a released key waits for the locker it was handed to, in milliseconds: ample
-- for a woken waiter's try (a round trip), short enough that a locker gone in between
-- costs the others little.
local HANDOFF_MS = 50

-- Whether `value` is in redmutex's format for a token of `length` bytes.
local function ours(value, length)
  return type(value) == 'string' and string.find(string.sub(value, 1, length), '^[%w_%-]+$')
end

-- Marks the value at `key` as awaited — its flag byte, right after the token of `length`
-- bytes, becomes 'w' — so that its owner's release announces itself on the key's channel.
-- Only a redmutex value not marked yet is changed.
local function mark_awaited(key, value, length)
  if ours(value, length) and string.sub(value, length + 1, length + 1) == '-' then
    redis.call('setrange', key, length, 'w')
  end
end

-- Marks the value at `key` as awaited and names `locker`, whose waiter has waited `waited`
-- ms and waits `left` ms more at most, as next in line — unless a locker waiting since
-- earlier, and still waiting, is named already. Only redmutex values that are held (flag
-- '-', 'w' or 'W') or handed ('r') are changed; the TTL is kept. A key handed to a locker
-- carries the name after its 'r', and the locker that takes it names it in its own value.
local function line_up(key, value, length, locker, waited, left)
  if not ours(value, length) then
    return
  end
  local flag = string.sub(value, length + 1, length + 1)
  if flag ~= '-' and flag ~= 'w' and flag ~= 'W' and flag ~= 'r' then
    return
  end
  local now = now_ms()
  local since = now - tonumber(waited)
  local named = tonumber(string.sub(value, length + 24, length + 38))
  local until_ = tonumber(string.sub(value, length + 39, length + 1 + NEXT_LEN))
  if (flag == 'W' or flag == 'r') and named and until_ and named <= since and live_at(until_, now) then
    return
  end
  local next = locker .. string.format('%015d%015d', since, now + tonumber(left))
  if flag == 'r' then
    redis.call('set', key, string.sub(value, 1, length + 1) .. next, 'keepttl')
  else
    local metadata = metadata_of(value, length)
    redis.call('set', key, string.sub(value, 1, length) .. 'W' .. next .. metadata, 'keepttl')
  end
end

-- Hands `key` to the locker named in `next` (NEXT_LEN bytes: its id, since, until) if its
-- waiter still waits: the key holds the id with the flag 'r' for HANDOFF_MS. Whether it did.
local function hand_over(key, next)
  local id_len = NEXT_LEN - 30
  if #next < NEXT_LEN or not live_at(tonumber(string.sub(next, id_len + 16, NEXT_LEN)) or 0, now_ms()) then
    return false
  end
  redis.call('set', key, string.sub(next, 1, id_len) .. 'r', 'px', HANDOFF_MS)
  return true
end

-- A waiter of the locker `locker` gave up, and no other waiter of that locker waits for
-- `key`: the locker's name comes off the value (the holder's 'W' becomes 'w', still
-- awaited; a handed key's carried name is dropped), and a key handed to it goes to the
-- locker it carries, or is free — announced, so that the waiters left try at once.
local function withdraw(key, value, locker)
  if not ours(value, #locker) then
    return
  end
  local length = #locker
  local flag = string.sub(value, length + 1, length + 1)
  local named = string.sub(value, length + 2, length + 1 + length)
  if flag == 'r' and string.sub(value, 1, length) == locker then
    if not hand_over(key, string.sub(value, length + 2, length + 1 + NEXT_LEN)) then
      redis.call('del', key)
    end
    redis.pcall('publish', key, 'released')
  elseif flag == 'W' and named == locker then
    redis.call('set', key, string.sub(value, 1, length) .. 'w' .. metadata_of(value, length), 'keepttl')
  elseif flag == 'r' and named == locker then
    redis.call('set', key, string.sub(value, 1, length + 1), 'keepttl')
  end
end

--- op: obtain
-- take every key, or none of them; for a fenced acquire, hand out the next
-- fence too.
-- KEYS:    the lock keys, then (fenced) the fence counter of each, in the same order.
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the token's length; the owner check compares that many leading bytes.
-- ARGV[4]: '1' when the caller waits for a release: a held key is then marked as awaited
--          (its flag byte, right after the token, becomes 'w'), so that its owner's
--          release announces itself on the key's channel.
-- ARGV[5]: the number of lock keys; when KEYS holds more, the rest are fence counters.
-- ARGV[6]: fenced: how long the counters are kept after this use, in milliseconds.
-- ARGV[7]: (optional, waiting) the locker's id, to name in line: a key handed to this
--          locker counts as free.
-- ARGV[8]: with ARGV[7]: how long this acquire has waited so far, in milliseconds; a held
--          key names the locker next in line by it (see the top of this file).
-- ARGV[9]: with ARGV[7]: how long it waits at most from now, in milliseconds.
-- Returns: { 0, fence } when every key now holds ARGV[1] with the TTL: fence is above
--          every counter (see next_fence), now stored in all of them (0 when not fenced);
--          otherwise { i, pttl }: i is the 1-based index of the first key held by another
--          owner, pttl its remaining TTL (-1: none), and nothing was written but the mark.
-- A key that already holds our own token counts as free: an earlier try whose reply was
-- lost may have set it, and the retry must be able to finish what that try started.
-- A key of another type (pcall turns its WRONGTYPE error into a table) counts as held, and
-- only values in redmutex's own format are ever marked; anything else is left as it is.
-- A counter that is someone else's value stops the script before anything is written.
local length = tonumber(ARGV[3])
local count = tonumber(ARGV[5])
local token = string.sub(ARGV[1], 1, length)
local waiting = ARGV[4] == '1'
local handed = waiting and ARGV[7] and ARGV[7] .. 'r'
-- Per key handed to this locker, the locker named next on it, to name on our value.
local carried = {}
for i = 1, count do
  local value = redis.pcall('get', KEYS[i])
  local ours_now = handed and type(value) == 'string' and string.sub(value, 1, #handed) == handed
  if ours_now and #value >= #handed + NEXT_LEN then
    carried[i] = string.sub(value, #handed + 1, #handed + NEXT_LEN)
  end
  if value ~= false and not owned(value, token) and not ours_now then
    if handed then
      line_up(KEYS[i], value, length, ARGV[7], ARGV[8], ARGV[9])
    elseif waiting then
      mark_awaited(KEYS[i], value, length)
    end
    return { i, redis.call('pttl', KEYS[i]) }
  end
end
local fenced = #KEYS > count
local fence = 0
if fenced then
  local err
  fence, err = next_fence(count + 1, #KEYS)
  if fence == nil then
    return redis.error_reply(err)
  end
end
for i = 1, count do
  local value = ARGV[1]
  if carried[i] then
    value = token .. 'W' .. carried[i] .. string.sub(ARGV[1], length + 2)
  end
  redis.call('set', KEYS[i], value, 'px', ARGV[2])
end
if fenced then
  store_fence(count + 1, #KEYS, fence, ARGV[6])
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
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- ARGV[2]: (optional) keep: instead of deleting them, let the keys expire in this many
--          milliseconds (a minimum hold time that has not passed yet).
-- Returns: how many keys did NOT hold the token (0 means fully released).
-- A key held by someone else, or missing, is never touched; the keys that still hold our
-- token are deleted even when others are lost, so they do not block anyone until expiry.
-- A key marked as awaited (flag byte 'w' or 'W' right after the token, set by a waiter's
-- try) is announced on the channel named like the key, so waiters wake at once instead of
-- polling; unmarked keys publish nothing, so an uncontended release costs no PUBLISH. The
-- announcement is a hint (waiters also poll): a PUBLISH refused (an ACL user without the
-- channel) must not fail the release, so it goes through pcall. A key that names a locker
-- next in line ('W') is handed to it (see the top of this file) rather than deleted.
-- The same call, given a locker's id instead of a token, withdraws that locker from line
-- (see withdraw): it releases nothing, and answers as for a token that holds nothing.
local token = ARGV[1]
local keep = tonumber(ARGV[2] or '0')
local missing = 0
for _, key in ipairs(KEYS) do
  local value = redis.pcall('get', key)
  if owned(value, token) then
    local flag = string.sub(value, #token + 1, #token + 1)
    if keep > 0 then
      -- Kept as the owner's value without anyone named next: it expires on its own.
      redis.call('set', key, token .. 'k' .. metadata_of(value, #token), 'px', keep)
    elseif flag ~= 'W' or not hand_over(key, string.sub(value, #token + 2, #token + 1 + NEXT_LEN)) then
      redis.call('del', key)
    end
    if flag == 'w' or flag == 'W' then
      redis.pcall('publish', key, 'released')
    end
  else
    withdraw(key, value, token)
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
-- refresh many leases in one call (keep-alive), each owner-checked on its own.
-- KEYS:    the keys of every lease in the batch, lease after lease.
-- ARGV:    three values per lease, in the same order: its number of keys, its token, and
--          the TTL in milliseconds to set.
-- Returns: one integer per lease: 1 when all its keys were extended; 0 when some key is not
--          held by its token (then none of that lease's keys was changed).
local results = {}
local k = 1
for a = 1, #ARGV, 3 do
  local count = tonumber(ARGV[a])
  local last = k + count - 1
  local held = 0
  if holds(k, last, ARGV[a + 1]) then
    held = 1
    for i = k, last do
      redis.call('pexpire', KEYS[i], ARGV[a + 2])
    end
  end
  results[#results + 1] = held
  k = k + count
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

--- op: inspect
-- what a key holds, and the latest fence handed out for it, read by anyone, atomically.
-- KEYS[1]: the key.  KEYS[2]: its fence counter.
-- Returns: as read_key.
return read_key(KEYS[1], KEYS[2])

--- op: await
-- for a waiter that does not take the key: mark its holder as awaited, then read it.
-- KEYS[1]: the key.  KEYS[2]: its fence counter.
-- ARGV[1]: '1' to mark the holder (the waiter hears of releases), '0' to only read.
-- ARGV[2]: the token's length.
-- Returns: as read_key.
if ARGV[1] == '1' then
  mark_awaited(KEYS[1], redis.pcall('get', KEYS[1]), tonumber(ARGV[2]))
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
