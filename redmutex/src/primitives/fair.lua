-- fair.lua: the fair lock — a mutex key taken in arrival order by the waiters queued beside
-- it. One file, one section per operation: each section (from its `--- op:` line to the
-- next) is a script of its own, run with helpers.lua, line.lua and this preamble before it
-- (see scripts/lua.rs).
--
-- The lock key is a mutex key — the owner's value (token, flag byte, metadata) with PX —
-- so refresh, renewal, TTL and fences are the mutex's own operations, and a plain acquire
-- of the same key excludes a fair holder as it excludes any holder. Beside it, in its hash
-- slot, the queue: a line (line.lua) whose members are waiters — each its token, '.', and
-- the id its turn is told on (see `tell_turn`) — with a heartbeat of the waiters' choosing.
-- A waiter's every try renews its heartbeat; a waiter whose heartbeat ran out (a crashed
-- or frozen process) is passed over once it is first in line, so it never holds the line
-- for longer than that. Only the first live waiter may take a free key.
--
-- A waiter hears of its turn on the turn channel its id names: its locker's id, while no
-- other waiter of its locker waits at the key — so that the channel stays subscribed from
-- one acquire to the next — or an id of its own (fair.rs).
-- Every command a hand-off runs is counted (docs/BENCHMARKS.md): the release reads the
-- first waiter and its heartbeat, the next waiter's try takes the key and leaves, and
-- nothing scans the queue.

--- op: obtain
-- 'obtain': take the key if it is free and this waiter is first in line (or nobody waits).
-- KEYS:    the lock key, the queue, then (fenced) the key's fence counter.
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.       ARGV[3]: the token's length.
-- ARGV[4]: '1' when the caller waits if it is not its turn: it is queued (or stays queued)
--          and its heartbeat renewed.     ARGV[5]: the heartbeat, in milliseconds.
-- ARGV[6]: fenced: how long the counter is kept after this use, in milliseconds.
-- ARGV[7]: the waiter's id for its turns (its locker's, or its own).
-- Returns: { 0, fence } when the key now holds ARGV[1] with the TTL (fence 0 when not
--          fenced) and the caller left the queue; { 1, ms, ahead } when it is not the
--          caller's turn: ms until the holder's key expires (-1: no expiry), or, with the
--          key free and another waiter first in line, until that waiter's heartbeat runs
--          out; ahead: how many wait ahead of the caller in line (-1 when not in it; a
--          waiter whose process died counts until it is passed over); { -2, 0 } when the
--          queue holds data of another kind (nothing written).
-- A key that already holds our own token counts as free (a retry after a lost reply).
-- When the try finds the waiter first in line gone (its heartbeat ran out) and the key
-- free, the new first waiter is told that it is its turn; when it takes the key, the next
-- waiter may be told to try (see the end).
local key, queue = KEYS[1], KEYS[2]
local token = string.sub(ARGV[1], 1, tonumber(ARGV[3]))
local member = token .. '.' .. ARGV[7]
local value = redis.pcall('get', key)
local wait
-- The server's clock, once read.
local us
-- The waiter after the caller, when the caller takes the key (see the end).
local after = false
if value ~= false and not owned(value, token) then
  wait = redis.call('pttl', key)
elseif value == false then
  local first = redis.pcall('zrangebyscore', queue, 0, '+inf', 'limit', 0, 2)
  if first.err then
    return { -2, 0 }
  end
  after = first[2] or false
  if first[1] and first[1] ~= member then
    us = now_us()
    local now = math.floor(us / 1000)
    local next, ends = first[1], beat_end(queue, first[1])
    if not (ends and live_at(ends, now)) then
      next, ends = first_live(queue, now, 0)
      if next and next ~= member then
        tell_turn(key, next)
      end
    end
    if next and next ~= member then
      wait = ends - now
    end
    after = nil
  end
end
if wait then
  if ARGV[4] ~= '1' then
    return { 1, wait, ahead_of(queue, member) }
  end
  us = us or now_us()
  local ticket = ticket_of(queue, member, us)
  if not ticket or not join_line(queue, member, us, tonumber(ARGV[5]), ticket) then
    return { -2, 0 }
  end
  return { 1, wait, redis.call('zcount', queue, 0, '(' .. string.format('%.0f', ticket)) }
end
-- The fence before any write: a counter that is someone else's value stops the script
-- with nothing written but the passed-over waiters.
local fence, err = 0, nil
if #KEYS > 2 then
  fence, err = take_fence(3, 3, ARGV[6])
end
if fence == nil then
  return redis.error_reply(err)
end
redis.call('set', key, ARGV[1], 'px', ARGV[2])
-- Out of the queue. (A retry that found its own value read no queue: see leave_line.)
leave_line(queue, member)
-- The next waiter last learned when the previous holder's key would run out, or that the
-- key was another's turn; it tries again before its heartbeat ends. When this key may run
-- out before that (its holder dies, and nobody releases it), it is told now, tries once,
-- and learns until when the key is held: it is first to try then. (A retry of a try whose
-- reply was lost read no queue: that try told it.)
if after == nil then
  after = redis.call('zrangebyscore', queue, 0, '+inf', 'limit', 0, 1)[1]
end
if after then
  local ends = beat_end(queue, after)
  if ends and ends > now_ms() + tonumber(ARGV[2]) then
    tell_turn(key, after)
  end
end
return { 0, fence }

--- op: release
-- 'release': free the key this owner holds, and leave the queue: the way out of a holder,
-- and of a waiter that gave up or was cancelled.
-- KEYS:    the lock key, the queue, the key's line (see line.lua).
-- ARGV[1]: the owner's token.
-- ARGV[2]: keep: instead of deleting it, let the key expire in this many milliseconds (a
--          minimum hold time that has not passed yet); 0: delete it.
-- ARGV[3]: the waiter's id for its turns, as the obtain was given it.
-- Returns: 0 when it held the key (now free, or kept); 1 when it did not — the number of
--          parts no longer held, as every primitive's release answers.
-- A freed key is the first live waiter's turn: it is told on its channel. So is a key
-- kept for a minimum hold (the first waiter learns until when, and tries then), and the
-- next waiter when the first leaves (or any waiter leaves a free key). A key plain waiters
-- flagged is also announced to them, as mutex.lua's release does: on the key's own
-- channel when watched (AWAITED, LINED_AWAITED); to the first locker in its line
-- (KEYS[3]) when lockers wait in line (LINED, LINED_AWAITED). A queue of another kind is
-- left alone.
local key, queue = KEYS[1], KEYS[2]
local token = ARGV[1]
local keep = tonumber(ARGV[2])
local value = redis.pcall('get', key)
local missing = 1
-- Whether the first live waiter is told: it may try now, or must learn until when the
-- key is held.
local tell = false
if not owned(value, token) then
  -- A holder left the queue when it took the key; a waiter that gives up leaves it now.
  -- (A queue of another kind is left alone.)
  local member = token .. '.' .. ARGV[3]
  local first = redis.pcall('zrangebyscore', queue, 0, '+inf', 'limit', 0, 1)
  if leave_line(queue, member) then
    tell = value == false or first[1] == member
  end
else
  missing = 0
  tell = true
  local flag = flag_of(value, #token)
  if keep > 0 then
    keep_held(key, value, token, keep)
  else
    redis.call('del', key)
  end
  if watched(flag) then
    tell_watchers(key, keep == 0)
  end
  if lined(flag) then
    tell_first(key, KEYS[3])
  end
end
if tell then
  tell_first(key, queue, 0)
end
return missing
