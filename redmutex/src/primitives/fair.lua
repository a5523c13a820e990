-- fair.lua: the fair lock — a mutex key taken in arrival order by the waiters queued beside
-- it. One file, one section per operation: each section (from its `--- op:` line to the
-- next) is a script of its own, run with helpers.lua (owned, now_ms, now_us,
-- expire_with, next_fence, store_fence, read_key) and this preamble before it (see scripts.rs).
--
-- The lock key is a mutex key — the owner's value (token, flag byte, metadata) with PX —
-- so refresh, renewal, TTL and fences are the mutex's own operations, and a plain acquire
-- of the same key excludes a fair holder as it excludes any holder. Beside it, in its hash
-- slot:
--   the queue: a sorted set, waiter token -> ticket. A ticket is the server's clock in
--              microseconds at arrival, or one above the last ticket when that is later:
--              arrival order, never repeated.
--   the beats: a sorted set, waiter token -> when its heartbeat runs out, in milliseconds
--              on the SERVER's clock. A waiter's every try renews it; a waiter whose
--              heartbeat ran out (a crashed or frozen process) is dropped from the queue by
--              the next operation, so it never holds the line for longer than that.
-- Only the live head of the queue may take a free key. Both queue keys expire with the
-- last heartbeat (PEXPIREAT, same clock) and are deleted when the last waiter leaves.
--
-- A waiter hears of its turn on a channel of its own (see `turn`): the lock key, ':~', and
-- 16 hex digits of its token's SHA-1 — public, and useless for taking anyone's lock.

-- Whether the queue keys are a fair lock's (or missing).
local function queue_ours(queue, beats)
  local a = redis.call('type', queue)['ok']
  local b = redis.call('type', beats)['ok']
  return (a == 'zset' or a == 'none') and (b == 'zset' or b == 'none')
end

-- The first waiter in line, or nil.
local function head(queue)
  return redis.call('zrange', queue, 0, 0)[1]
end

-- Drops the waiters whose heartbeat ran out by `now`, and, once it is first in line, a
-- waiter with no heartbeat at all (its entry lost with the beats key, deleted or evicted).
local function reclaim(queue, beats, now)
  local dead = redis.call('zrangebyscore', beats, '-inf', over_by(now))
  for _, token in ipairs(dead) do
    redis.call('zrem', queue, token)
  end
  if #dead > 0 then
    redis.call('zremrangebyscore', beats, '-inf', over_by(now))
  end
  local first = head(queue)
  while first and not redis.call('zscore', beats, first) do
    redis.call('zrem', queue, first)
    first = head(queue)
  end
end

-- Queues `token` (at the end, unless it is queued already) and renews its heartbeat until
-- now + `beat` ms.
local function join(queue, beats, token, now, beat)
  if not redis.call('zscore', queue, token) then
    local ticket = now_us()
    local last = redis.call('zrevrange', queue, 0, 0, 'withscores')
    if last[2] and tonumber(last[2]) >= ticket then
      ticket = tonumber(last[2]) + 1
    end
    redis.call('zadd', queue, ticket, token)
  end
  redis.call('zadd', beats, now + beat, token)
end

-- Takes `token` out of the queue, if it is in it.
local function leave(queue, beats, token)
  redis.call('zrem', queue, token)
  redis.call('zrem', beats, token)
end

--- op: obtain
-- 'obtain': take the key if it is free and this waiter is first in line (or nobody waits).
-- KEYS:    the lock key, the queue, the beats, then (fenced) the key's fence counter.
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.       ARGV[3]: the token's length.
-- ARGV[4]: '1' when the caller waits if it is not its turn: it is queued (or stays queued)
--          and its heartbeat renewed.     ARGV[5]: the heartbeat, in milliseconds.
-- ARGV[6]: fenced: how long the counter is kept after this use, in milliseconds.
-- Returns: { 0, fence } when the key now holds ARGV[1] with the TTL (fence 0 when not
--          fenced) and the caller left the queue; { 1, ms, ahead } when it is not the
--          caller's turn: ms until the holder's key expires (-1: no expiry), or, with the
--          key free and another waiter first in line, until that waiter's heartbeat runs
--          out; ahead: how many wait ahead of the caller in line (-1 when not in it);
--          { -2, 0 } when the queue keys hold data of another kind (nothing written).
-- A key that already holds our own token counts as free (a retry after a lost reply).
-- When the try finds the waiter first in line gone (its heartbeat ran out) and the key
-- free, the new first waiter is told that it is its turn; when it takes the key and others
-- wait, the next in line is told too (see below).
local key, queue, beats = KEYS[1], KEYS[2], KEYS[3]
if not queue_ours(queue, beats) then
  return { -2, 0 }
end
local token = string.sub(ARGV[1], 1, tonumber(ARGV[3]))
local now = now_ms()
local first = head(queue)
reclaim(queue, beats, now)
local value = redis.pcall('get', key)
local wait
if value ~= false and not owned(value, token) then
  wait = redis.call('pttl', key)
elseif value == false then
  local next = head(queue)
  if next and next ~= token then
    wait = tonumber(redis.call('zscore', beats, next)) - now
    if next ~= first then
      turn(key, next)
    end
  end
end
if wait then
  if ARGV[4] == '1' then
    join(queue, beats, token, now, tonumber(ARGV[5]))
  end
  expire_with(beats, queue)
  return { 1, wait, redis.call('zrank', queue, token) or -1 }
end
-- The fence before any write: a counter that is someone else's value stops the script
-- with nothing written but the reclaimed waiters.
local fence = 0
if #KEYS > 3 then
  local err
  fence, err = next_fence(4, 4)
  if fence == nil then
    expire_with(beats, queue)
    return redis.error_reply(err)
  end
  store_fence(4, 4, fence, ARGV[6])
end
redis.call('set', key, ARGV[1], 'px', ARGV[2])
leave(queue, beats, token)
-- The next waiter last heard that the key was free and someone else's turn: it does not
-- know until when it is held now. Told, it tries once and learns it, so that it is first
-- to try when this holder's key runs out unreleased (a holder that died), not at its
-- next heartbeat's try.
local next = head(queue)
if next then
  turn(key, next)
end
expire_with(beats, queue)
return { 0, fence }

--- op: release
-- 'release': free the key this owner holds, and leave the queue: the way out of a holder,
-- and of a waiter that gave up or was cancelled.
-- KEYS:    the lock key, the queue, the beats, the key's line (see helpers.lua).
-- ARGV[1]: the owner's token.
-- ARGV[2]: (optional) keep: instead of deleting it, let the key expire in this many
--          milliseconds (a minimum hold time that has not passed yet).
-- Returns: 0 when it held the key (now free, or kept); 1 when it did not — the number of
--          parts no longer held, as every primitive's release answers.
-- A freed key is the first waiter's turn: it is told on its channel. A key plain waiters
-- flagged is also announced to them, as mutex.lua's release does: on the key's own
-- channel when watched ('w', 'L'); to the first locker in its line (KEYS[4]) when lockers
-- wait in line ('l', 'L').
local key, queue, beats = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
local keep = tonumber(ARGV[2] or '0')
local queued = queue_ours(queue, beats)
local was_first = queued and head(queue) == token
if queued then
  leave(queue, beats, token)
end
local value = redis.pcall('get', key)
local missing = 1
-- The first in line leaving makes the next the first: told, it tries — takes a free key,
-- or learns until when the key is held (it last heard another's place, not that).
local freed = was_first
if owned(value, token) then
  missing = 0
  local flag = string.sub(value, #token + 1, #token + 1)
  if keep > 0 then
    redis.call('set', key, token .. 'k' .. metadata_of(value, #token), 'px', keep)
  else
    redis.call('del', key)
    freed = true
  end
  if watched(flag) then
    redis.pcall('publish', key, 'released')
  end
  if lined(flag) then
    tell_line(key, KEYS[4])
  end
end
if queued then
  reclaim(queue, beats, now_ms())
  local next = head(queue)
  if freed and next then
    turn(key, next)
  end
  expire_with(beats, queue)
end
return missing

--- op: inspect
-- 'inspect': the lock and its queue as anyone sees them, without changing them (waiters
-- whose heartbeat ran out are left out, not reclaimed).
-- KEYS:    the lock key, the queue, the beats, the key's fence counter.
-- Returns: read_key's { pttl, type, fence, value }, then, per live waiter in arrival
--          order, ms until its heartbeat runs out; with the queue keys of another kind,
--          a fifth element -1 and no waiters.
local key, queue, beats = KEYS[1], KEYS[2], KEYS[3]
local reply = read_key(key, KEYS[4])
if not queue_ours(queue, beats) then
  reply[5] = -1
  return reply
end
local now = now_ms()
for _, token in ipairs(redis.call('zrange', queue, 0, -1)) do
  local beat = redis.call('zscore', beats, token)
  if beat and live_at(beat, now) then
    reply[#reply + 1] = tonumber(beat) - now
  end
end
return reply
