-- semaphore.lua: the counting semaphore — at most `limit` permits held at once. One file,
-- one section per operation: each section (from its `--- op:` line to the next) is a script
-- of its own, run with helpers.lua (now_ms, next_fence, store_fence, the holder set's
-- permits), line.lua and this preamble before it (see scripts/lua.rs). The operations of one
-- holder (refresh, renew, ttl, guarded, fence, raise_fence) are holders.lua's, shared with
-- a read-write lock's readers: this preamble says what they ask of a semaphore.
--
-- A semaphore lives in two keys of one hash slot:
--   the holders: a sorted set, one member per holder token, scored by when its permits
--                expire, in milliseconds on the SERVER's clock (TIME; never a client's);
--   the details: a hash of the counts — '#used' (permits counted: held, kept or
--                reserved), '#limit' (the limit its holders agreed on), '#until' (when
--                both keys expire) and '#awaited' (some acquire waited while the
--                semaphore was busy: releases announce themselves until nobody holds a
--                permit any more) — and, for a holder of more than one permit or with
--                metadata only, holder token -> '<permits>:<metadata>' (a holder without
--                an entry holds one permit: the common holder costs no write of its own).
-- A holder whose expiry passed no longer counts: the first try that finds the earliest
-- expiry past reclaims every such holder's permits, so a crashed holder's permits come
-- back within its TTL without anyone's help. Both keys expire together at '#until',
-- never before the latest holder's expiry and moved on by UNTIL_SLACK_MS more (at most a
-- TTL) when they must be, so that holders after it rarely pay for it, and brought back
-- when the latest holder leaves or a refresh shortens it; they are deleted when the last
-- permit goes: the limit is agreed among the holders of the moment.
--
-- Waiting processes take turns by the key's line (line.lua), as a lock's do: a waiter's
-- try that finds too few permits free puts its place in line — its member: the permits
-- it wants, '.', its locker's id. A release hands the permits it frees to the first
-- places in line whose heartbeat is live, as many as they cover: each is reserved for
-- HANDOFF_MS as a holder named '>' and the place (counted, as any holder), and its locker
-- alone is told on its turn channel — one message and one try per place served, however
-- many processes wait. A permit handed on stays counted: the release and the try that
-- takes the reservation leave '#used' as it is. A reservation its locker lets pass
-- expires as any holder does. Where nobody lines up (a cluster), waiters mark the details
-- '#awaited' instead, and releases announce on the holders key's channel how many permits
-- came back.
--
-- Each operation reads the counts in one HMGET and a sorted set's data only where it
-- must: a key of another kind answers those reads with an error (through pcall), before
-- anything is written — the holders key is a read-write lock's readers, or a lock, of the
-- same name — and a sorted set with holders but no counts is someone else's (readers keep
-- their details under another name).

-- How far beyond the latest holder's expiry both keys' expiry is moved when it must move:
-- one move serves the holders of the next quarter second, and the keys are gone that soon
-- after the latest expiry any holder had.
local UNTIL_SLACK_MS = 250

-- The counts in `details` (see the top of this file): { used, limit (nil: none agreed),
-- till (when both keys expire; 0: unknown), awaited }; nil when `details` is not a hash.
local function counts_of(details)
  local got = redis.pcall('hmget', details, '#used', '#limit', '#until', '#awaited')
  if got.err then
    return nil
  end
  return { used = tonumber(got[1]) or 0, limit = tonumber(got[2]), till = tonumber(got[3]) or 0,
    awaited = got[4] }
end

-- Stores `used` as the permits counted, or — none left — deletes both keys: nobody holds
-- a permit, and no limit is agreed any more. A count of none while the holders key still
-- has members is wrong (never deleted on it: the members would go uncounted), and is
-- counted again from the members.
local function count(holders, details, state, used)
  if used <= 0 and redis.call('zcard', holders) > 0 then
    used = in_slices(details, redis.call('zrange', holders, 0, -1), permits_in)
  end
  state.used = used
  if used > 0 then
    redis.call('hset', details, '#used', used)
    return
  end
  redis.call('del', holders, details)
  state.limit, state.till = nil, 0
end

-- Drops the holders whose expiry has passed by `now`; returns how many permits came back
-- (and counts them out of `state`).
local function reclaim(holders, details, state, now)
  local freed = drop_expired(holders, details, now, permits_in)
  if not freed then
    return 0
  end
  if redis.call('zcard', holders) == 0 then
    count(holders, details, state, 0)
  else
    count(holders, details, state, state.used - freed)
  end
  return freed
end

-- The expiry both keys need for a holder expiring at `expiry`: nil when '#until' already
-- covers it, else up to `slack` ms later (see UNTIL_SLACK_MS).
local function needs_until(state, expiry, slack)
  if key_expiry(expiry) <= state.till then
    return nil
  end
  return key_expiry(expiry) + math.min(slack, UNTIL_SLACK_MS)
end

-- Moves both keys' expiry to `at` (from needs_until; nothing when nil). The caller stores
-- '#until' = `at` with the details it writes, or lets this write it.
local function expire_at(holders, details, state, at, store)
  if not at then
    return
  end
  if store then
    redis.call('hset', details, '#until', at)
  end
  redis.call('pexpireat', holders, at)
  redis.call('pexpireat', details, at)
  state.till = at
end

-- Reserves the permits `place`, the first in `line`, wants, for HANDOFF_MS; the place
-- leaves the line, and its locker is told (see the top of this file). Whether they are
-- newly reserved: a place reserved for already (its locker's next waiter put it back in
-- line before taking the reservation) keeps its one reservation, its end moved on, and
-- the permits in hand go on to the next.
local function reserve(holders, line, place, now)
  leave_line(line, place)
  local added = redis.call('zadd', holders, now + HANDOFF_MS, '>' .. place)
  tell_turn(holders, place)
  return added == 1
end

-- Hands the permits free at `now` to the first places of `line` whose heartbeat is live,
-- in order, while they cover the next one's; those served leave the line. `state`: the
-- counts, with the agreed limit.
local function hand_permits(holders, details, line, state, now)
  local used = state.used
  while used < state.limit do
    local place = first_live(line, now)
    if not place then
      break
    end
    local wanted = wanted_by(place) or state.limit + 1
    if used + wanted > state.limit then
      break
    end
    if reserve(holders, line, place, now) then
      used = used + wanted
    end
  end
  if used ~= state.used then
    count(holders, details, state, used)
  end
end

-- Takes back the permits reserved for `place` (a locker giving up), if any; how many.
local function unreserve(holders, details, state, place)
  if redis.call('zrem', holders, '>' .. place) == 0 then
    return 0
  end
  local permits = wanted_by(place)
  count(holders, details, state, state.used - permits)
  return permits
end

-- Permits came back (`freed`, already counted out of `state`): they go to the first
-- places in `line`, or — nobody holding any more, no limit agreed — the first place
-- tries; and waiters that marked the details hear how many.
local function permits_back(holders, details, line, state, now, freed)
  if line and state.limit then
    hand_permits(holders, details, line, state, now)
  elseif line then
    tell_first(holders, line)
  end
  if state.awaited then
    announce_on(holders, '', tostring(freed))
  end
end

-- When the holder that expired at `was` was the latest to expire (the counts say when
-- the keys expire: the check costs no command), the keys follow the latest expiry left,
-- `slack` ms on, when that is sooner: rather than outlive the holders by as long as this
-- one would have held. Whether it was the latest.
local function follow_latest(holders, details, state, was, slack)
  if key_expiry(was) + UNTIL_SLACK_MS < state.till then
    return false
  end
  local last = redis.call('zrevrange', holders, 0, 0, 'withscores')
  local at = key_expiry(last[2]) + slack
  if at < state.till then
    expire_at(holders, details, state, at, true)
  end
  return true
end

-- What the operations of one holder (holders.lua: refresh, renew, ttl, guarded, fence,
-- raise_fence) ask of a semaphore's holders.

-- When the holder `token` expires, if it holds permits at `now`; nil when it does not.
local function holder_expiry(holders, _, token, now)
  return live_expiry(holders, token, now)
end

-- For a change of the holder `token`'s expiry: the clock, its expiry if it holds permits
-- (nil when not), and the counts. (Without its counts — the details key evicted — the
-- semaphore is nobody's to keep: its holders are lost, and its keys expire.)
local function holding(holders, details, token)
  local state = counts_of(details)
  local now = now_ms()
  return now, state and state.limit and live_expiry(holders, token, now), state
end

-- Both keys' expiry once the holder that expired at `was` expires at `expiry`, `ttl` ms
-- from now: moved on as far as it needs (see needs_until); or — it was the latest to
-- expire and now expires sooner (a renewal never does, a refresh may) — following the
-- latest expiry left, rather than keeping the longer one.
local function keep_keys(holders, details, state, was, expiry, ttl)
  local slack = math.min(ttl, UNTIL_SLACK_MS)
  if expiry < was and follow_latest(holders, details, state, was, slack) then
    return
  end
  expire_at(holders, details, state, needs_until(state, expiry, ttl), true)
end

-- A holder's fence: the next one, stored (see take_fence).
local function holder_fence(i, retention)
  return take_fence(i, i, retention)
end

-- Milliseconds from `now` until the earliest of `first` (ZRANGE WITHSCORES of the first
-- holders) expires, looking past reservations when `past` (-1: nothing seen).
local function wait_for(first, now, past)
  local i = 1
  while past and first[i] and string.sub(first[i], 1, 1) == '>' do
    i = i + 2
  end
  return first[i + 1] and (tonumber(first[i + 1]) - now) or -1
end

-- Takes the permits reserved for the caller's place, if there are: they become the
-- holder's, still counted (its ZADD comes before the reservation's ZREM: the holders key,
-- and its expiry, stay). Returns whether it did; nil when the holders key is of another
-- kind. A holder that already held them (a retry after a lost reply) keeps its own and
-- gives the reservation back; one not served is taken out again, and tries as any does.
local function take_reservation(holders, details, state, place, expiry)
  local token, wanted = ARGV[1], tonumber(ARGV[2])
  local added = redis.pcall('zadd', holders, expiry, token)
  if type(added) ~= 'number' then
    return nil
  end
  if redis.call('zrem', holders, '>' .. place) == 0 then
    if added == 1 then
      redis.call('zrem', holders, token)
    end
    return false
  end
  if added == 0 then
    count(holders, details, state, state.used - wanted)
  elseif wanted > 1 or ARGV[5] ~= '' then
    redis.call('hset', details, token, wanted .. ':' .. ARGV[5])
  end
  return true
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
-- ARGV[10]: (with ARGV[8]) '1' when the caller may hold already (a retry after a lost
--          reply) or its place may be in line (an earlier try, or another waiter of its
--          locker): only then are its token and a reservation looked for (without a
--          locker, its token always is).
-- Returns: { 0, fence } when the holder now holds its permits until now + TTL (fence 0 when
--          not fenced; a holder that already held them — a retry after a lost reply — keeps
--          them); { 1, ms } when too few are free: ms until the earliest holder's permits
--          expire (-1: none); { -1, limit } when the holders agreed on another limit;
--          { -2, 0 } when the keys hold something else. Nothing is written but the mark
--          and the line (and expired holders reclaimed).
local holders, details = KEYS[1], KEYS[2]
local state = counts_of(details)
if not state then
  return { -2, 0 }
end
local token, wanted, limit, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local line = ARGV[8] and KEYS[#KEYS]
local place = ARGV[8] and (wanted .. '.' .. ARGV[8])
local known = not place or ARGV[10] == '1'
local us = now_us()
local now = math.floor(us / 1000)
-- The fence is read before anything is written: a counter that is someone else's value
-- stops the script with nothing written (a script's writes are not undone by its error).
local fence = 0
if #KEYS > (line and 3 or 2) then
  local err
  fence, err = next_fence(3, 3)
  if fence == nil then
    return redis.error_reply(err)
  end
end
-- Permits reserved for the caller's place: its own, counted already.
local reserved = false
if place and known and state.limit == limit then
  reserved = take_reservation(holders, details, state, place, now + ttl)
  if reserved == nil then
    return { -2, 0 }
  end
end
local first = {}
local mine = false
if not reserved then
  first = redis.pcall('zrange', holders, 0, 3, 'withscores')
  if first.err then
    return { -2, 0 }
  end
  if not first[1] then
    -- No holder: counts left without one (none should be) are nobody's.
    if state.limit or state.used > 0 then
      redis.call('del', details)
    end
    state = { used = 0, till = 0 }
  elseif not state.limit then
    return { -2, 0 }
  elseif not live_at(first[2], now) then
    reclaim(holders, details, state, now)
    first = nil
  end
  if state.limit and state.limit ~= limit then
    return { -1, state.limit }
  end
  mine = known and redis.call('zscore', holders, token)
  if not mine and state.used + wanted > limit then
    if place then
      join_line(line, place, us)
    elseif ARGV[6] == '1' and not state.awaited then
      redis.call('hset', details, '#awaited', '1')
    end
    -- Until the first holder's permits expire. A place in line looks past reservations
    -- (-1 when it sees nothing else): one taken up frees nothing, and the release of what
    -- it became hands permits on; one let pass (its locker died) is found by the places'
    -- tries on their heartbeat, as a lock's key handed to a dead locker is. (Waking at a
    -- reservation's end instead made every waiter that saw it try once more per
    -- hand-off: 4.5 script calls per permit at 64 processes, against 3.)
    first = first or redis.call('zrange', holders, 0, 3, 'withscores')
    return { 1, wait_for(first, now, place) }
  end
end
if fence > 0 then
  store_fence(3, 3, fence, ARGV[7])
end
local until_at = needs_until(state, now + ttl, ttl)
if reserved then
  expire_at(holders, details, state, until_at, true)
  if ARGV[9] == '1' then
    join_line(line, place, us)
  end
  state.limit = limit
  hand_permits(holders, details, line, state, now)
  return { 0, fence }
end
local fields = {}
if not mine then
  state.used = state.used + wanted
  fields = { '#used', state.used, '#limit', limit }
  if wanted > 1 or ARGV[5] ~= '' then
    fields[#fields + 1], fields[#fields + 2] = token, wanted .. ':' .. ARGV[5]
  end
end
if ARGV[6] == '1' and not state.awaited then
  fields[#fields + 1], fields[#fields + 2] = '#awaited', '1'
end
if until_at then
  fields[#fields + 1], fields[#fields + 2] = '#until', until_at
end
if #fields > 0 then
  redis.call('hset', details, unpack(fields))
end
redis.call('zadd', holders, now + ttl, token)
expire_at(holders, details, state, until_at, false)
if place then
  -- Served: out of line — or, for more of its locker's waiters, back in at the end; and
  -- permits still free go on to whoever is first now.
  if known then
    leave_line(line, place)
  end
  if ARGV[9] == '1' then
    join_line(line, place, us)
  end
  state.limit = limit
  hand_permits(holders, details, line, state, now)
end
return { 0, fence }

--- op: release
-- 'release': give back the permits of the holder ARGV[1].
-- KEYS:    holders, details, then (where waiters line up: not on a cluster) the line.
-- ARGV[2]: keep: instead of giving them back now, let them expire in this many
--          milliseconds (a minimum hold time that has not passed yet); 0: none.
-- ARGV[3]: the permits the holder took (or, giving up, wanted); '0': unknown (a release
--          by the token alone), as many as the holder's entry says.
-- ARGV[4]: '1' when the holder has a details entry (more than one permit, or metadata).
-- The same call, given a locker's id instead of a token, takes that locker's place out of
-- the line (a waiter giving up), and permits reserved for it go on to the next.
-- Returns: 0 when it held them (now free); 1 when it held none (expired, or never): the
--          number of parts no longer held, as every primitive's release answers.
-- The permits that came back go to the places in line first (see the top of this file):
-- handed on, they stay counted. When a waiter marked the details, the release announces
-- on the holders key's channel how many permits came back. The mark stays while anyone
-- holds a permit: holders release independently, and a mark cleared by one release would
-- leave the next unannounced while a waiter is still on its way to mark again. The
-- announcement is a hint (waiters also poll): a PUBLISH refused must not fail the
-- release, so it goes through pcall.
local holders, details, line = KEYS[1], KEYS[2], KEYS[3]
local token, keep, permits = ARGV[1], tonumber(ARGV[2] or '0'), tonumber(ARGV[3] or '1')
local now = now_ms()
local expiry = live_expiry(holders, token, now)
if not expiry then
  -- Not held: expired (its permits, and any others expired, come back now), never, or a
  -- locker giving up (out of line, and what was reserved for it goes on).
  local place = permits .. '.' .. token
  if line then
    leave_line(line, place)
  end
  local state = counts_of(details)
  if not state or not state.limit then
    return 1
  end
  local freed = reclaim(holders, details, state, now)
  if line then
    freed = freed + unreserve(holders, details, state, place)
  end
  if freed > 0 then
    permits_back(holders, details, line, state, now, freed)
  end
  return 1
end
local detailed = ARGV[4] == '1'
if permits == 0 then
  local entry = redis.call('hget', details, token)
  permits, detailed = permits_in(token, entry), entry ~= false
end
local state = keep > 0 and counts_of(details)
if state and state.limit then
  -- Kept under another name ('~' and the token): still counted until it expires, but no
  -- longer the owner's to renew or release — a renewal still in flight must not extend it.
  local entry = detailed and redis.call('hget', details, token)
  redis.call('zadd', holders, now + keep, '~' .. token)
  redis.call('zrem', holders, token)
  if entry then
    redis.call('hset', details, '~' .. token, entry)
    redis.call('hdel', details, token)
  end
  expire_at(holders, details, state, needs_until(state, now + keep, 0), true)
  return 0
end
-- Its permits go to the first places in line that they cover, as reservations (added
-- before the holder leaves: the holders key never empties in between, and keeps its
-- expiry); the rest come back.
local left = permits
local stopped = 'empty'
while line and left > 0 do
  local place = first_live(line, now)
  if not place then
    break
  end
  local wanted = wanted_by(place)
  if not wanted or wanted > left then
    stopped = 'more'
    break
  end
  if reserve(holders, line, place, now) then
    left = left - wanted
  end
end
redis.call('zrem', holders, token)
if detailed then
  redis.call('hdel', details, token)
end
if left == 0 then
  return 0
end
state = counts_of(details)
if not state or not state.limit then
  -- The counts are gone (the details key evicted): only the holder's own member went.
  -- The holders left are uncounted, so tries refuse the keys until they expire — never
  -- admitting past a limit nobody knows any more.
  return 0
end
local used = state.used - left
state.used = used
if used > 0 then
  redis.call('hset', details, '#used', used)
end
-- Others still counted: a holder of them that crashed has expired unreclaimed when the
-- earliest expiry is past (then its permits come back now, and the keys go with the
-- last of them).
local first = used > 0 and redis.call('zrange', holders, 0, 0, 'withscores') or {}
local expired = first[2] ~= nil and not live_at(first[2], now)
if used > 0 and stopped == 'empty' and not expired then
  follow_latest(holders, details, state, expiry, UNTIL_SLACK_MS)
  if state.awaited then
    announce_on(holders, '', tostring(left))
  end
  return 0
end
local freed = left
if used <= 0 then
  count(holders, details, state, used)
elseif expired then
  freed = freed + reclaim(holders, details, state, now)
end
permits_back(holders, details, line, state, now, freed)
return 0
