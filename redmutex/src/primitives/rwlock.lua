-- rwlock.lua: the read-write lock — many readers or one writer, writers first. One file,
-- one section per operation: each section (from its `--- op:` line to the next) is a script
-- of its own, run with helpers.lua, line.lua and this preamble before it (see
-- scripts/lua.rs). A reader's operations of one holder (refresh, renew, ttl, guarded,
-- fence, raise_fence) are holders.lua's, shared with a semaphore's holders: this preamble
-- says what they ask of the readers.
--
-- The lock key holds whoever holds the lock:
--   a writer:   a string, the writer's value (token, flag byte, metadata) with PX — a mutex
--               key, so refresh, renewal, TTL and fences of a writer are the mutex's own
--               operations, and a plain lock of the same name excludes readers and writers
--               and is excluded by them (any string at the key counts as a writer);
--   readers:    a sorted set, one member per reader token, scored by when it expires, in
--               milliseconds on the SERVER's clock (never a client's); beside it, in its
--               hash slot, the readers' details: a hash, reader token -> metadata. A crashed
--               reader is dropped by the next operation once its own expiry passes: live
--               readers never keep a dead one alive. Both keys expire with the last reader
--               (PEXPIREAT, same clock) and are deleted when the last reader leaves.
-- Writers first: beside it too, the intents: a sorted set, waiting writer token -> when its
-- heartbeat runs out (server clock, ms). A writer's every try while it waits renews its
-- intent; while any intent is live, no new reader is let in, so a stream of readers cannot
-- starve a writer. An intent ends when its writer takes the lock, gives up (through its
-- release), or stops trying (its heartbeat runs out).
--
-- Wake-ups: waiting writers take turns by the key's line, as a lock's waiters do (see
-- mutex.lua; plain lock waiters share it): a writer's try that finds the lock held puts
-- its locker in line and flags a writer's value (LINED); the release of a flagged value, and
-- the last reader's release while a writer waits, hands the key to the first locker in
-- line (its id, flag HANDED, for HANDOFF_MS) and tells that locker alone — one message and
-- one try per hand-off, however many processes wait. Where lockers do not line up (a
-- quorum), writers wait on the lock key's channel: the last reader's release announces
-- itself there when a writer waits (an intent is live), a writer's release when its value
-- was marked as awaited (AWAITED). Readers wait on the channel READERS (the key and ':~r'): a
-- writer's release, a downgrade, and the last intent's end announce themselves there, for
-- every reader at once.


-- What the lock key holds: 'free', 'writer' (a string: a writer, a plain lock, or data of
-- someone else's — it excludes readers either way), 'readers' (a reader set with its
-- details), or nil for anything else (another kind of data; a semaphore's holders).
local function holder_kind(lock, details)
  local kind = redis.call('type', lock)['ok']
  if kind == 'none' then
    return 'free'
  elseif kind == 'string' then
    return 'writer'
  elseif kind == 'zset' and redis.call('type', details)['ok'] == 'hash' then
    return 'readers'
  end
  return nil
end

-- Whether the intents key is a read-write lock's (or missing).
local function intents_ours(intents)
  local kind = redis.call('type', intents)['ok']
  return kind == 'zset' or kind == 'none'
end

-- Drops the intents whose heartbeat ran out by `now`; returns how many are live, and when
-- the last of them runs out (ms, server clock) unless renewed.
local function live_intents(intents, now)
  redis.call('zremrangebyscore', intents, '-inf', over_by(now))
  local last = redis.call('zrevrange', intents, 0, 0, 'withscores')
  if last[2] == nil then
    return 0, now
  end
  redis.call('pexpireat', intents, key_expiry(last[2]))
  return redis.call('zcard', intents), tonumber(last[2])
end

-- Registers (or renews) the intent of the writer `token`: its heartbeat ends `beat` ms
-- after `now`. The intents key lives at least as long (an intent whose heartbeat ran out
-- is dropped by the next count, see live_intents).
local function renew_intent(intents, token, now, beat)
  redis.call('zadd', intents, now + beat, token)
  if redis.call('pttl', intents) <= beat then
    redis.call('pexpireat', intents, key_expiry(now + beat))
  end
end

-- Drops the readers whose expiry passed by `now`; the keys go with the last of them.
local function reclaim(lock, details, now)
  if drop_expired(lock, details, now) then
    expire_with(lock, details)
  end
end

-- What the operations of one holder (holders.lua: refresh, renew, ttl, guarded, fence,
-- raise_fence) ask of the readers.

-- When the reader `token` expires, if it reads at `now`; nil when it does not (or the
-- lock key holds something other than readers).
local function holder_expiry(lock, details, token, now)
  if holder_kind(lock, details) ~= 'readers' then
    return nil
  end
  return live_expiry(lock, token, now)
end

-- For a change of the reader `token`'s expiry: the clock, and its expiry if it reads (nil
-- when it does not, or the lock key holds something other than readers), once the
-- readers expired by then are dropped.
local function holding(lock, details, token)
  if holder_kind(lock, details) ~= 'readers' then
    return nil
  end
  local now = now_ms()
  reclaim(lock, details, now)
  return now, live_expiry(lock, token, now)
end

-- A reader's new expiry: both keys expire with the last reader.
local keep_keys = expire_with

-- The fence a reader sees: the counter KEYS[i] as it stands, started from the clock (as a
-- first fence would be) when there is none, so a reader's fence is never 0 and every later
-- writer's is greater. Nil and an error for a counter that is someone else's value.
local function holder_fence(i, retention)
  local value, err = read_counter(KEYS[i])
  if value == nil then
    return nil, err
  end
  if value == false then
    value = next_fence(i, i)
  end
  store_fence(i, i, value, retention)
  return value
end

--- op: obtain_read
-- 'obtain_read': let the reader ARGV[1] in, unless a writer holds the lock or waits.
-- KEYS:    the lock key, the readers' details, the intents, then (fenced) the fence counter,
--          then (ARGV[6] = '1') the key's line.
-- ARGV[1]: the reader's token.  ARGV[2]: the TTL in ms.  ARGV[3]: metadata.
-- ARGV[4]: '1' when the caller waits: a holder's value is marked as awaited (AWAITED), so that
--          its release tells the readers' channel too (see tell_watchers).
-- ARGV[5]: fenced: how long the counter is kept after this use, in milliseconds.
-- ARGV[6]: '1' when the last key is the key's line: a live locker in it (a plain lock's
--          waiter, a writer) keeps new readers out as an intent does — a plain lock counts
--          as a writer — and the end of its line tells the readers (mutex.lua's release).
-- Returns: { 0, fence } when the reader now reads until now + TTL (fence: the current one,
--          see holder_fence; 0 when not fenced; a reader that already read — a retry after
--          a lost reply — stays); { 1, pttl } when a writer holds the lock (pttl: its TTL,
--          -1 none, -3 handed to a locker); { 1, ms } when writers wait (ms: until the last
--          intent runs out unless renewed, or until the readers' end, or HANDOFF_MS when a
--          locker in line is about to take the free key); { -2, 0 } when the keys hold
--          something else. Nothing is written but the mark.
local lock, details, intents = KEYS[1], KEYS[2], KEYS[3]
local kind = holder_kind(lock, details)
if kind == nil or not intents_ours(intents) then
  return { -2, 0 }
end
local token = ARGV[1]
local line = ARGV[6] == '1' and KEYS[#KEYS]
if kind == 'writer' then
  local value = redis.call('get', lock)
  if ARGV[4] == '1' then
    mark_waiter(lock, value, #token, AWAITED)
  end
  if flag_of(value, #token) == HANDED then
    return { 1, -3 }
  end
  return { 1, redis.call('pttl', lock) }
end
local now = now_ms()
if kind == 'readers' then
  reclaim(lock, details, now)
end
if not live_expiry(lock, token, now) then
  local waiting, last = live_intents(intents, now)
  local first = line and first_live(line, now)
  local readers = (waiting > 0 or first) and redis.call('zrange', lock, -1, -1, 'withscores')[2]
  if first and not readers then
    -- Free with a locker in line: the key ran out (nobody released it, so nobody told
    -- that locker), or the locker is on its way. It is told now.
    tell_turn(lock, first)
  end
  if waiting > 0 then
    return { 1, last - now }
  elseif first then
    return { 1, readers and (tonumber(readers) - now) or HANDOFF_MS }
  end
end
local fence = 0
if #KEYS > (line and 4 or 3) then
  local err
  fence, err = holder_fence(4, ARGV[5])
  if fence == nil then
    return redis.error_reply(err)
  end
end
redis.call('zadd', lock, now + tonumber(ARGV[2]), token)
redis.call('hset', details, token, ARGV[3])
expire_with(lock, details)
return { 0, fence }

--- op: obtain_write
-- 'obtain_write': take the lock for the writer, if nobody holds it; a writer that may wait
-- registers (or renews) its intent, which keeps new readers out.
-- KEYS:    the lock key, the readers' details, the intents, then (fenced) the fence counter,
--          then (ARGV[7] given) the key's line (see line.lua).
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.  ARGV[3]: the token's length.
-- ARGV[4]: '1' when the caller may wait: its intent is registered when the lock is held.
-- ARGV[5]: the heartbeat of an intent, in milliseconds.
-- ARGV[6]: fenced: how long the counter is kept after this use, in milliseconds.
-- ARGV[7]: (optional, waiting) the locker's id: a held lock puts it in the key's line (a
--          writer's value is flagged LINED), and a key handed to this locker counts as free.
-- Returns: { 0, fence } when the key now holds ARGV[1] with the TTL (fence as the mutex
--          hands it out, 0 when not fenced; our own value — a retry after a lost reply —
--          counts as free); its intent, if any, is gone. { 1, pttl } when held (by a writer
--          or readers; pttl: when the last of them expires, -1 none, -3 handed to another
--          locker, which takes it or lets it go within HANDOFF_MS); { -2, 0 } when the
--          keys hold something else. Nothing is written but the intent, the line and the
--          flag.
local lock, details, intents = KEYS[1], KEYS[2], KEYS[3]
local kind = holder_kind(lock, details)
if kind == nil or not intents_ours(intents) then
  return { -2, 0 }
end
local length = tonumber(ARGV[3])
local token = string.sub(ARGV[1], 1, length)
local locker = ARGV[7]
local line = locker and KEYS[#KEYS]
local fenced = #KEYS > (locker and 4 or 3)
local us = now_us()
local now = math.floor(us / 1000)
if kind == 'readers' then
  reclaim(lock, details, now)
  kind = holder_kind(lock, details)
end
local value = kind == 'writer' and redis.call('get', lock)
local handed = locker and value == locker .. HANDED
if kind == 'writer' and (handed or owned(value, token)) then
  kind = 'free'
end
if kind ~= 'free' then
  if ARGV[4] == '1' then
    renew_intent(intents, token, now, tonumber(ARGV[5]))
    if locker then
      join_line(line, locker, us)
    end
    if kind == 'writer' then
      mark_waiter(lock, value, length, locker and LINED or AWAITED)
    end
  end
  if kind == 'writer' and flag_of(value, length) == HANDED then
    return { 1, -3 }
  end
  return { 1, redis.call('pttl', lock) }
end
local fence, err = 0, nil
if fenced then
  fence, err = take_fence(4, 4, ARGV[6])
end
if fence == nil then
  return redis.error_reply(err)
end
local stored = ARGV[1]
if locker then
  if not handed then
    leave_line(line, locker)
  end
  -- Others still in line (or, for a key handed on, probably: see mutex.lua's obtain):
  -- the release hands the key on.
  if handed or redis.call('exists', line) == 1 then
    stored = token .. LINED .. metadata_of(ARGV[1], length)
  end
end
redis.call('set', lock, stored, 'px', ARGV[2])
-- (The intents key may now outlive its last intent by a heartbeat at most: harmless.)
redis.call('zrem', intents, token)
return { 0, fence }

--- op: release_write
-- 'release_write': the writer ARGV[1] lets go of the lock, and of its intent (a writer that
-- gives up leaves through this call).
-- KEYS:    the lock key, the readers' details, the intents, the key's line (lockers whose
--          waiters wait for the key: writers, plain locks; see line.lua).
-- ARGV[2]: (optional) keep: instead of deleting it, let the key expire in this many
--          milliseconds (a minimum hold time that has not passed yet); 0 for none.
-- ARGV[3]: (optional) 'keep-intent': this undoes one failed try of a quorum's acquire on
--          this node; the writer still waits, its intent stays, and nothing is announced
--          (as mutex.lua's undo: it freed nothing anyone could wait for).
-- Returns: 0 when it held the lock (now released); 1 when it did not.
-- A value flagged for lockers in line (LINED, LINED_AWAITED) is handed to the first of
-- them, as a lock's is (hand_key), rather than deleted; one watched (AWAITED,
-- LINED_AWAITED: writers that do not line up, on a quorum) is announced on the lock
-- key's channel. When no writer waits any more, waiting readers are told on theirs (every one of them may come in).
-- The same call, given a locker's id instead of a token, takes that locker out of the
-- line: a key handed to it goes on to the next. It releases nothing, and answers 1.
local lock, details, intents, line = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[1]
local keep = tonumber(ARGV[2] or '0')
local announce = ARGV[3] ~= 'keep-intent'
local now = now_ms()
local missing = 1
local value = redis.pcall('get', lock)
local ours_intents = intents_ours(intents)
local before = ours_intents and live_intents(intents, now) or 0
local after = before
if ours_intents and announce then
  after = before - redis.call('zrem', intents, token)
end
if owned(value, token) then
  missing = 0
  local flag = flag_of(value, #token)
  if keep > 0 then
    keep_held(lock, value, token, keep)
    if lined(flag) then
      tell_first(lock, line)
    end
  elseif not (lined(flag) and hand_key(lock, line)) then
    redis.call('del', lock)
  end
  if watched(flag) and announce then
    announce_on(lock, '', 'released')
  end
else
  -- A locker giving up: out of line, and a key handed to it goes on.
  withdraw(lock, line, token, value)
end
if announce and after == 0 and ((missing == 0 and keep == 0) or before > 0) then
  announce_on(lock, READERS, EVERYONE)
end
return missing

--- op: release_read
-- 'release_read': the reader ARGV[1] leaves.
-- KEYS:    the lock key, the readers' details, the intents, the key's line.
-- ARGV[2]: (optional) keep: instead of leaving now, stay until this many milliseconds from
--          now (a minimum hold time), no longer renewable.
-- Returns: 0 when it read (now gone); 1 when it did not.
-- When a writer waits, a reader whose leaving brings the readers' end forward (the last
-- reader leaving, or the one that would have stayed the longest) says so: the last reader
-- hands the key to the first locker in line (hand_key), one that leaves readers behind
-- tells that locker (it learns the earlier end); with nobody in line (writers on a
-- quorum), it is announced on the lock key's channel. Either way a writer tries at once.
-- (A reader kept for its minimum hold runs out unannounced.)
local lock, details, intents, line = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if holder_kind(lock, details) ~= 'readers' then
  return 1
end
local token = ARGV[1]
local keep = tonumber(ARGV[2] or '0')
local now = now_ms()
reclaim(lock, details, now)
if not live_expiry(lock, token, now) then
  return 1
end
local function latest()
  local last = redis.call('zrange', lock, -1, -1, 'withscores')
  return tonumber(last[2] or '0')
end
local ended = latest()
local metadata = redis.call('hget', details, token) or ''
redis.call('zrem', lock, token)
redis.call('hdel', details, token)
if keep > 0 then
  -- Kept under another name ('~' and the token): still reading until it expires, but no
  -- longer the owner's to renew or release — a renewal still in flight must not extend it.
  redis.call('zadd', lock, now + keep, '~' .. token)
  redis.call('hset', details, '~' .. token, metadata)
end
expire_with(lock, details)
if latest() < ended then
  local first = line and first_live(line, now)
  if first and latest() == 0 then
    hand_key(lock, line, first)
  elseif first then
    tell_turn(lock, first)
  elseif intents_ours(intents) and live_intents(intents, now) > 0 then
    announce_on(lock, '', 'released')
  end
end
return 0

--- op: downgrade
-- 'downgrade': the writer ARGV[1] becomes a reader, atomically: nobody can take the lock
-- in between.
-- KEYS:    the lock key, the readers' details, the intents.
-- ARGV[2]: the reader's TTL in ms.
-- Returns: 1 when done; 0 when the writer does not hold the lock (nothing changed).
local lock, details, intents = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
local value = redis.pcall('get', lock)
local details_kind = redis.call('type', details)['ok']
if not owned(value, token) or (details_kind ~= 'none' and details_kind ~= 'hash') then
  return 0
end
local now = now_ms()
redis.call('del', lock)
redis.call('zadd', lock, now + tonumber(ARGV[2]), token)
redis.call('hset', details, token, metadata_of(value, #token))
expire_with(lock, details)
if not intents_ours(intents) or live_intents(intents, now) == 0 then
  announce_on(lock, READERS, EVERYONE)
end
return 1
