-- semaphore.lua: the counting semaphore — at most `limit` permits held at once. One file,
-- one section per operation: each section (from its `--- op:` line to the next) is a script
-- of its own, run with helpers.lua (now_ms, expire_with, next_fence, store_fence,
-- raise_counters) and this preamble before it (see scripts.rs).
--
-- A semaphore lives in two keys of one hash slot:
--   the holders: a sorted set, one member per holder token, scored by when its permits
--                expire, in milliseconds on the SERVER's clock (TIME; never a client's);
--   the details: a hash, holder token -> '<permits>:<metadata>', plus '#used' (permits
--                held), '#limit' (the limit its holders agreed on) and '#awaited' (some
--                acquire waited while the semaphore was busy: releases announce
--                themselves until nobody holds a permit any more).
-- Every operation first reclaims the permits of holders whose expiry passed, so a crashed
-- holder's permits come back within its TTL without anyone's help. Both keys expire when
-- the last holder does (PEXPIREAT, same clock), and are deleted when the last holder leaves:
-- the limit is agreed among the holders of the moment.
--
-- Waiting processes take turns by the key's line (helpers.lua), as a lock's do: a waiter's
-- try that finds too few permits free puts its place in line — its member: the permits
-- it wants, '.', its locker's id. A release hands the permits it frees to the first
-- places in line whose heartbeat is live, as many as they cover: each is reserved for
-- HANDOFF_MS as a holder named '>' and the place (counted, as any holder), and its locker
-- alone is told on its turn channel — one message and one try per place served, however
-- many processes wait. A reservation its locker lets pass expires as any holder does.
-- Where nobody lines up (a cluster), waiters mark the details '#awaited' instead, and
-- releases announce on the holders key's channel how many permits came back.

local TYPE_ERROR = 'redmutex: the semaphore keys hold data of another kind; choose another name'

-- Whether the holders and details keys are a semaphore's (or missing). Holders come with
-- their details (they expire together): a sorted set without them is someone else's — a
-- read-write lock's readers, whose details live under another name.
local function ours(holders, details)
  local a = redis.call('type', holders)['ok']
  local b = redis.call('type', details)['ok']
  if a == 'none' then
    return b == 'hash' or b == 'none'
  end
  return a == 'zset' and b == 'hash'
end

-- The permits a holder's details entry says it holds.
local function permits_of(details, token)
  local entry = redis.call('hget', details, token)
  if not entry then
    return 0
  end
  return tonumber(string.match(entry, '^(%d+)'))
end

-- Drops the holders whose expiry has passed by `now`; returns how many permits came back.
-- When none is left, the details go too (the limit with them), as when the keys expire.
local function reclaim(holders, details, now)
  local expired = redis.call('zrangebyscore', holders, '-inf', over_by(now))
  if #expired == 0 then
    return 0
  end
  local freed = 0
  for _, token in ipairs(expired) do
    freed = freed + permits_of(details, token)
    redis.call('hdel', details, token)
  end
  redis.call('zremrangebyscore', holders, '-inf', over_by(now))
  if redis.call('zcard', holders) == 0 then
    redis.call('del', details)
  else
    redis.call('hincrby', details, '#used', -freed)
  end
  return freed
end

-- Whether `token` holds permits (unexpired by `now`).
local function holding(holders, token, now)
  local score = redis.call('zscore', holders, token)
  return score ~= false and live_at(score, now)
end

-- The permits a place in line wants (its name: the number, '.', the locker's id).
local function wanted_by(place)
  return tonumber(string.match(place, '^(%d+)%.'))
end

-- Takes back the permits reserved for `place` (see hand_on), if any; how many.
local function unreserve(holders, details, place)
  if redis.call('zrem', holders, '>' .. place) == 0 then
    return 0
  end
  local permits = wanted_by(place)
  redis.call('hdel', details, '>' .. place)
  redis.call('hincrby', details, '#used', -permits)
  return permits
end

-- Hands the permits free at `now` to the first places of `line` whose heartbeat is live,
-- in order, while they cover the next one's (see the top of this file); those served
-- leave the line, and each one's locker is told. After a release, and after a try served
-- from the line (others of its locker may be next): `limit` is the agreed limit.
local function hand_on(holders, details, line, limit, now)
  while true do
    local used = tonumber(redis.call('hget', details, '#used') or '0')
    if used >= limit then
      return
    end
    local place = first_in_line(line)
    if not place then
      return
    end
    local wanted = wanted_by(place) or limit + 1
    if used + wanted > limit then
      return
    end
    leave_line(line, place)
    redis.call('zadd', holders, now + HANDOFF_MS, '>' .. place)
    redis.call('hset', details, '>' .. place, wanted .. ':')
    redis.call('hincrby', details, '#used', wanted)
    tell_waiter(holders, place)
  end
end

-- Sets the expiry of the holder `token` to now + `ttl` ms if it holds permits; never adds a
-- member that was reclaimed (ZADD XX). Returns 1 when extended, 0 when not held.
local function extend(holders, details, token, ttl)
  if not ours(holders, details) then
    return 0
  end
  local now = now_ms()
  reclaim(holders, details, now)
  if not holding(holders, token, now) then
    return 0
  end
  redis.call('zadd', holders, 'xx', now + tonumber(ttl), token)
  expire_with(holders, details)
  return 1
end

--- op: obtain
-- 'obtain': take ARGV[2] permits for the holder ARGV[1], if that many are free.
-- KEYS:    holders, details, then (fenced) the fence counter, then (ARGV[8] given) the
--          line.
-- ARGV[1]: the holder's token.      ARGV[2]: permits wanted.     ARGV[3]: the limit.
-- ARGV[4]: the TTL in ms.           ARGV[5]: metadata.
-- ARGV[6]: '1' when the caller waits (and gives no locker): the details are marked
--          '#awaited', so that the next release announces itself on the holders key's
--          channel.
-- ARGV[7]: fenced: how long the counter is kept after this use, in milliseconds.
-- ARGV[8]: (optional, waiting) the locker's id: too few permits free put its place in
--          line, and permits reserved for that place count as free.
-- ARGV[9]: (with ARGV[8]) '1' when more of the locker's waiters want as many: a place
--          served keeps its locker in line, at the end.
-- Returns: { 0, fence } when the holder now holds its permits until now + TTL (fence 0 when
--          not fenced; a holder that already held them — a retry after a lost reply — keeps
--          them); { 1, ms } when too few are free: ms until the earliest holder's permits
--          expire (-1: none); { -1, limit } when the holders agreed on another limit;
--          { -2, 0 } when the keys hold something else. Nothing is written but the mark
--          and the line (and a reservation taken back).
local holders, details = KEYS[1], KEYS[2]
if not ours(holders, details) then
  return { -2, 0 }
end
local token, wanted, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local line = ARGV[8] and KEYS[#KEYS]
local place = ARGV[8] and (wanted .. '.' .. ARGV[8])
local now = now_ms()
reclaim(holders, details, now)
local agreed = redis.call('hget', details, '#limit')
if agreed and tonumber(agreed) ~= limit then
  return { -1, tonumber(agreed) }
end
local mine = redis.call('zscore', holders, token)
-- Permits reserved for the caller's place: free for it.
if place and not mine then
  unreserve(holders, details, place)
end
if not mine then
  local used = tonumber(redis.call('hget', details, '#used') or '0')
  if used + wanted > limit then
    if place then
      join_line(line, place, now_us())
    elseif ARGV[6] == '1' then
      redis.call('hset', details, '#awaited', '1')
    end
    -- Until the first holder's permits expire. A place in line looks past reservations
    -- (-1 when it sees nothing else): one taken up frees nothing, and the release of what
    -- it became hands permits on; one let pass (its locker died) is found by the places'
    -- tries on their heartbeat, as a lock's key handed to a dead locker is. (Waking at a
    -- reservation's end instead made every waiter that saw it try once more per
    -- hand-off: 4.5 script calls per permit at 64 processes, against 3.)
    local first = redis.call('zrange', holders, 0, 3, 'withscores')
    local i = 1
    while place and first[i] and string.sub(first[i], 1, 1) == '>' do
      i = i + 2
    end
    return { 1, first[i + 1] and (tonumber(first[i + 1]) - now) or -1 }
  end
end
-- The fence before any write: a counter that is someone else's value stops the script
-- with nothing written (a script's writes are not undone by its error).
local fence = 0
if #KEYS > (line and 3 or 2) then
  local err
  fence, err = next_fence(3, 3)
  if fence == nil then
    return redis.error_reply(err)
  end
end
if not mine then
  redis.call('hincrby', details, '#used', wanted)
  redis.call('hset', details, token, wanted .. ':' .. ARGV[5], '#limit', limit)
end
if fence > 0 then
  store_fence(3, 3, fence, ARGV[7])
end
if place then
  -- Served: out of line — or, for more of its locker's waiters, back in at the end; and
  -- permits still free go on to whoever is first now.
  leave_line(line, place)
  if ARGV[9] == '1' then
    join_line(line, place, now_us())
  end
  hand_on(holders, details, line, limit, now)
end
redis.call('zadd', holders, now + tonumber(ARGV[4]), token)
if ARGV[6] == '1' then
  redis.call('hset', details, '#awaited', '1')
end
expire_with(holders, details)
return { 0, fence }

--- op: release
-- 'release': give back the permits of the holder ARGV[1].
-- KEYS:    holders, details, then (where waiters line up: not on a cluster) the line.
-- ARGV[2]: (optional) keep: instead of giving them back now, let them expire in this many
--          milliseconds (a minimum hold time that has not passed yet); 0: none.
-- ARGV[3]: (with the line) the permits the holder took or wanted.
-- The same call, given a locker's id instead of a token, takes that locker's place out of
-- the line (a waiter giving up), and permits reserved for it go on to the next.
-- Returns: 0 when it held them (now free); 1 when it held none (expired, or never): the
--          number of parts no longer held, as every primitive's release answers.
-- The permits that came back (its own and any reclaimed) go to the places in line first
-- (see the top of this file). When a waiter marked the details, the release announces on
-- the holders key's channel how many permits came back. The mark stays while anyone holds a
-- permit: holders release independently, and a mark cleared by one release would leave
-- the next unannounced while a waiter is still on its way to mark again. The announcement
-- is a hint (waiters also poll): a PUBLISH refused must not fail the release, so it goes
-- through pcall.
local holders, details = KEYS[1], KEYS[2]
if not ours(holders, details) then
  return 1
end
local token = ARGV[1]
local now = now_ms()
local freed = reclaim(holders, details, now)
local missing = 1
local keep = tonumber(ARGV[2] or '0')
if keep > 0 and redis.call('zscore', holders, token) then
  -- Kept under another name ('~' and the token): still counted until it expires, but no
  -- longer the owner's to renew or release — a renewal still in flight must not extend it.
  local entry = redis.call('hget', details, token)
  redis.call('zrem', holders, token)
  redis.call('hdel', details, token)
  redis.call('zadd', holders, now + keep, '~' .. token)
  redis.call('hset', details, '~' .. token, entry)
  expire_with(holders, details)
  return 0
end
if redis.call('zscore', holders, token) then
  local permits = permits_of(details, token)
  redis.call('zrem', holders, token)
  redis.call('hdel', details, token)
  redis.call('hincrby', details, '#used', -permits)
  freed = freed + permits
  missing = 0
elseif KEYS[3] then
  -- A locker giving up: out of line, and what was reserved for it goes on.
  local place = ARGV[3] .. '.' .. token
  leave_line(KEYS[3], place)
  freed = freed + unreserve(holders, details, place)
end
if freed > 0 and KEYS[3] then
  local limit = redis.call('hget', details, '#limit')
  if limit then
    hand_on(holders, details, KEYS[3], tonumber(limit), now)
  else
    -- Nobody holds a permit any more, so no limit is agreed: the first in line tries.
    tell_line(holders, KEYS[3])
  end
end
if freed > 0 and redis.call('hexists', details, '#awaited') == 1 then
  redis.pcall('publish', holders, tostring(freed))
end
expire_with(holders, details)
return missing

--- op: refresh
-- 'refresh': KEYS holders, details; ARGV[1] the token, ARGV[2] the new TTL in ms.
-- Returns: 1 when extended; 0 when not held (nothing changed).
return extend(KEYS[1], KEYS[2], ARGV[1], ARGV[2])

--- op: renew
-- 'renew': refresh many holders in one call (keep-alive), each on its own.
-- KEYS:    holders, details of each holder in the batch, holder after holder.
-- ARGV:    two values per holder, in the same order: its token and the TTL in ms to set.
-- Returns: one integer per holder: 1 when extended, 0 when not held.
local results = {}
local k = 1
for a = 1, #ARGV, 2 do
  results[#results + 1] = extend(KEYS[k], KEYS[k + 1], ARGV[a], ARGV[a + 1])
  k = k + 2
end
return results

--- op: ttl
-- 'ttl': KEYS holders, details; ARGV[1] the token.
-- Returns: milliseconds until the holder's permits expire; -2 when it holds none.
if not ours(KEYS[1], KEYS[2]) then
  return -2
end
local now = now_ms()
local score = redis.call('zscore', KEYS[1], ARGV[1])
if score == false or not live_at(score, now) then
  return -2
end
return tonumber(score) - now

--- op: fence
-- 'fence': the fence of permits taken without one.
-- KEYS:    holders, details, the fence counter.  ARGV[1]: the token.  ARGV[2]: retention.
-- Returns: the next fence, now stored, when the holder holds permits; 0 when it does not.
if not ours(KEYS[1], KEYS[2]) or not holding(KEYS[1], ARGV[1], now_ms()) then
  return 0
end
local next, err = next_fence(3, 3)
if next == nil then
  return redis.error_reply(err)
end
store_fence(3, 3, next, ARGV[2])
return next

--- op: raise_fence
-- 'raise_fence': KEYS holders, details, the counter; ARGV[1] the token, ARGV[2] the fence,
-- ARGV[3] the retention. Returns 1 when the holder holds permits and the counter is now
-- at least the fence; 0 otherwise (nothing changed).
if not ours(KEYS[1], KEYS[2]) or not holding(KEYS[1], ARGV[1], now_ms()) then
  return 0
end
return raise_counters(3, 3, tonumber(ARGV[2]), ARGV[3])

--- op: inspect
-- 'inspect': the semaphore as anyone sees it, without changing it (expired holders are
-- left out, not reclaimed).
-- KEYS:    holders, details, the fence counter.
-- Returns: { kind_ok, limit or false, fence or false, awaited, then three values per live
--          holder: ms left, permits, metadata }.
local holders, details = KEYS[1], KEYS[2]
local fence = redis.pcall('get', KEYS[3])
if type(fence) ~= 'string' then
  fence = false
end
if not ours(holders, details) then
  return { 0, false, fence, 0 }
end
local now = now_ms()
local reply = { 1, redis.call('hget', details, '#limit'), fence,
  redis.call('hexists', details, '#awaited') }
local live = redis.call('zrangebyscore', holders, live_from(now), '+inf', 'withscores')
for i = 1, #live, 2 do
  local entry = redis.call('hget', details, live[i]) or '0:'
  local permits, metadata = string.match(entry, '^(%d+):(.*)$')
  reply[#reply + 1] = tonumber(live[i + 1]) - now
  reply[#reply + 1] = tonumber(permits)
  reply[#reply + 1] = metadata
end
return reply
