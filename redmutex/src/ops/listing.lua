-- listing.lua: what the keys a listing found hold, read by anyone, for `Locker::list`; and
-- an operator's forced release, for `Locker::force_release`. One file, one section per
-- operation, each run with helpers.lua, line.lua and this preamble before it (see
-- scripts/lua.rs).
--
-- Each primitive's keys, as its own file describes them: a lock, a fair lock's holder and
-- a read-write lock's writer are a string (the owner's value) at the key; a semaphore's
-- holders and a read-write lock's readers are a sorted set at the key, scored by each
-- holder's expiry, with the holders' details in a hash beside it. Tokens never leave the
-- script: whoever knows one can release the lock.

-- How many holders of a semaphore or readers of a read-write lock are described (the
-- soonest to expire first); the count is always complete.
local SAMPLE = 8

-- A value redmutex wrote: a token (TOKEN_LEN base64url characters), then a flag byte
-- (one of FLAGS, helpers.lua's), then the metadata. (As token.rs says; a test checks they
-- agree.)
local TOKEN_LEN = 22
local FLAGS = NOT_AWAITED .. AWAITED .. OBSERVED .. LINED .. LINED_AWAITED .. KEPT .. HANDED
local FLAG_AT = TOKEN_LEN + 1
local METADATA_AT = TOKEN_LEN + 2
local REDMUTEX_VALUE = '^' .. string.rep('[%w_%-]', TOKEN_LEN) .. '[' .. string.gsub(FLAGS, '%-', '%%-') .. ']'
-- One whose lockers wait in the key's line (LINED; LINED_AWAITED: some watch the key's
-- channel too).
local LINED_VALUE = '^' .. string.rep('[%w_%-]', TOKEN_LEN) .. '[' .. LINED .. LINED_AWAITED .. ']'

-- A forced release's tombstone (see `force`): at a string key, TOMBSTONE, the kind of lock
-- it held, '~', and its holder's metadata; among a semaphore's holders or readers, a
-- member named GRAVE and the holder's token, with the holder's details entry.
local TOMBSTONE = '~forced~'
local GRAVE = '~'

-- A request that a key's holders let go, and a forced release, are announced on the key's
-- name and ASK_CHANNEL (see `ask`, `force`; token.rs's ask_channel, which listens there).
local ASK_CHANNEL = ':~a'

local function is_tombstone(value)
  return string.sub(value, 1, #TOMBSTONE) == TOMBSTONE
end

local function kind_of(key)
  return redis.call('type', key)['ok']
end

-- The details of the holder `member` of a semaphore or readers (`kind`) in `details`:
-- '<permits>:<metadata>'. A semaphore's holder of one permit without metadata has no entry
-- of its own, and a reservation's place names its permits (permits_in).
local function details_of(kind, details, member)
  local entry = redis.call('hget', details, member)
  if entry or kind ~= 'semaphore' then
    return entry or ''
  end
  return permits_in(member, false) .. ':'
end

-- The live members of the sorted set `holders` that are tombstones (see GRAVE).
local function graves_of(holders, live)
  local graves = {}
  for _, member in ipairs(redis.call('zrangebyscore', holders, live, '+inf')) do
    if string.sub(member, 1, 1) == GRAVE then
      graves[#graves + 1] = member
    end
  end
  return graves
end

-- An entry's fields (see `describe`): read_key's four, then what a listing adds.
local PTTL, TYPE, FENCE, VALUE = 1, 2, 3, 4
local KIND, HOLDERS, WAITERS, AWAITED, SAMPLED, USED, LIMIT, FORCED = 5, 6, 7, 8, 9, 10, 11, 12

-- How many wait for the key at KEYS[i], of the kind `kind`, at `now`: one count per kind,
-- where its waiters are — a fair lock's queue (a line), a writer's and readers' intents
-- (writers waiting), a lock's and a semaphore's line (the processes in it; -1 with no
-- line, see waiting_in).
local function waiters_of(kind, i, now)
  if kind == 'fair_lock' then
    return math.max(waiting_in(KEYS[i + 2], now), 0)
  elseif kind == 'rw_lock_write' or kind == 'rw_lock_read' then
    return live_in(KEYS[i + 5], now)
  end
  return waiting_in(KEYS[i + 6], now)
end

-- The entry of the key at KEYS[i] and its six companions after it (see `describe`).
local function describe_at(i, now)
  local key, counter, queue = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  local permits, readers, intents = KEYS[i + 3], KEYS[i + 4], KEYS[i + 5]
  -- Live as the primitives' own scripts count it (see live_from in helpers.lua).
  local live = live_from(now)
  local entry = read_key(key, counter)
  local ttl, kind, value = entry[PTTL], entry[TYPE], entry[VALUE]
  for field, default in ipairs({ 'foreign', 0, -1, 0, {}, 0, 0, 0 }) do
    entry[KIND + field - 1] = default
  end
  if kind == 'none' then
    entry[KIND] = 'none'
  elseif kind == 'string' then
    entry[HOLDERS] = 1
    entry[KIND] = 'lock'
    if ttl == -1 then
      -- redmutex writes no key without a TTL: a value without one (written by hand, or
      -- copied by a tool) is someone else's, whatever it looks like, and nobody holds it.
      entry[KIND], entry[HOLDERS], entry[VALUE] = 'foreign', 0, false
    elseif is_tombstone(value) then
      entry[KIND] = string.match(value, '^' .. TOMBSTONE .. '([%w_]+)~') or 'lock'
      entry[FORCED] = 1
      entry[WAITERS] = waiters_of(entry[KIND], i, now)
    elseif not string.match(value, REDMUTEX_VALUE) then
      -- (Its value, someone else's data of any size, stays here.)
      entry[KIND], entry[HOLDERS], entry[VALUE] = 'foreign', 0, false
    else
      if kind_of(queue) == 'zset' then
        entry[KIND] = 'fair_lock'
      elseif kind_of(intents) == 'zset' then
        entry[KIND] = 'rw_lock_write'
      end
      entry[WAITERS] = waiters_of(entry[KIND], i, now)
      -- A value flagged for a line that is gone: its lockers all left it.
      if entry[WAITERS] < 0 and string.match(value, LINED_VALUE) then
        entry[WAITERS] = 0
      end
    end
  elseif kind == 'zset' then
    local details = false
    if ttl == -1 then
      -- As for a string: redmutex keeps a semaphore's holders and the readers with an
      -- expiry; a set without one is someone else's (a copy), however it looks.
      details = false
    elseif kind_of(permits) == 'hash' then
      entry[KIND], details = 'semaphore', permits
      -- The live holders' permits: its count ('#used') also counts holders expired but
      -- not yet reclaimed (semaphore.lua).
      entry[USED] = in_slices(permits, redis.call('zrangebyscore', key, live, '+inf'), permits_in)
      entry[LIMIT] = tonumber(redis.call('hget', permits, '#limit') or '0')
      entry[WAITERS] = waiters_of('semaphore', i, now)
      if entry[WAITERS] > 0 or redis.call('hget', permits, '#awaited') then
        entry[AWAITED] = 1
      end
    elseif kind_of(readers) == 'hash' then
      entry[KIND], details = 'rw_lock_read', readers
      entry[WAITERS] = waiters_of('rw_lock_read', i, now)
    end
    if details then
      entry[HOLDERS] = live_in(key, now)
      local members = redis.call('zrangebyscore', key, live, '+inf', 'withscores', 'limit', 0, SAMPLE)
      local sample = {}
      for j = 1, #members, 2 do
        local grave = string.sub(members[j], 1, 1) == GRAVE and 1 or 0
        sample[#sample + 1] = { tonumber(members[j + 1]) - now, details_of(entry[KIND], details, members[j]), grave }
      end
      entry[SAMPLED] = sample
      entry[FORCED] = #graves_of(key, live)
      -- A semaphore's keys outlive their last holder by a little (semaphore.lua): with
      -- none live, nobody holds it.
      if entry[KIND] == 'semaphore' and entry[HOLDERS] == 0 then
        entry = { -2, 'none', entry[FENCE], false, 'none', 0, -1, 0, {}, 0, 0, 0 }
      end
    end
  end
  return entry
end

--- op: describe
-- what each of a page of listed keys holds, atomically per call.
-- KEYS:    per key, seven: the key, its fence counter, its fair lock's queue, its
--          semaphore's details, its read-write lock's readers, its writers' intents, its
--          line (a lock's or a semaphore's, see helpers.lua).
-- Returns: per key, read_key's { pttl, type, fence, value } (the caller parses them as it
--          parses every read of a key, and keeps only a value's metadata; the value is
--          false where the kind is 'foreign': someone else's data stays here), then { kind,
--          holders, waiters, awaited, sample, used, limit, forced }: kind is 'none' (gone
--          since it was found), 'lock', 'fair_lock', 'rw_lock_write', 'rw_lock_read',
--          'semaphore' or 'foreign'; holders the live holders' count; waiters the live
--          waiters' count where the server keeps it (a fair lock's queue, a read-write
--          lock's waiting writers; a lock's or a semaphore's line: the processes in it),
--          else -1; awaited 1 when a semaphore's waiters asked to hear of releases or
--          stand in its line (a string's value says it for itself); sample
--          { ms left, details, 1 when a tombstone } per sampled holder; used and limit a
--          semaphore's permits; forced how many holders are tombstones of a forced release
--          (a string key's: its value is one, and reads as the kind it held). A semaphore
--          with no live holder left reads as 'none', as a missing key.
local now = now_ms()
local described = {}
for i = 1, #KEYS, 7 do
  described[#described + 1] = describe_at(i, now)
end
return described

--- op: force
-- an operator's release of whatever redmutex holds at a key, whoever holds it. The holders
-- find out at their next renewal or refresh, and until then may go on working; those
-- kept alive by a locker with wake-up renew at once, told on the key's ASK_CHANNEL as of
-- a request to let go (the renewal, not the message, finds them gone), and so do their
-- lockers' other waiters, woken as the lease is lost. Something redmutex did not write
-- is left alone.
-- By default (lock-delay) the holders' places are kept as tombstones until their TTLs
-- end — a lock's value becomes TOMBSTONE (its TTL kept), a semaphore's holders and
-- readers become GRAVE members (their expiry and permits kept) — so that nobody else is
-- let in while a holder may still believe it holds (its validity ends before its TTL on
-- the server), while each holder's next renewal, refresh or release finds itself gone.
-- Waiters take the key as it frees by itself: their waits are bounded by the TTL they
-- were told. A tombstone stays as it is.
-- With ARGV[1] 'now', the key goes at once (tombstones too), breaking mutual exclusion
-- while a holder has not noticed: the key, and the holders' details beside it (a
-- semaphore's, readers'); a line of waiters and the fence counter stay. Waiters hear of it
-- as of a release: a plain lock's and writers' on the key's channel, and the first live
-- locker in its line on that locker's (whoever held the key: writers wait in it for
-- readers too), a fair lock's first live waiter on its own, readers on theirs, a
-- semaphore's on its channel and the first places in its line, as many as its limit, on
-- theirs.
-- KEYS:    the key and its six companions, as for `describe` (the seventh, its line, is
--          told).
-- ARGV[1]: 'now' for the release at once; 'delay' for tombstones.
-- Returns: { entry }: the key's entry as `describe` reads it, before the release.
local now = now_ms()
local entry = describe_at(1, now)
local kind = entry[KIND]
if ARGV[1] ~= 'now' then
  if kind == 'lock' or kind == 'fair_lock' or kind == 'rw_lock_write' then
    if entry[FORCED] == 0 then
      local value = entry[VALUE]
      local metadata = ''
      -- (A key handed to a locker holds its id, no metadata.)
      if string.sub(value, FLAG_AT, FLAG_AT) ~= HANDED then
        metadata = string.sub(value, METADATA_AT)
      end
      redis.call('set', KEYS[1], TOMBSTONE .. kind .. '~' .. metadata, 'keepttl')
      announce_on(KEYS[1], ASK_CHANNEL, 'forced')
    end
  elseif kind == 'semaphore' or kind == 'rw_lock_read' then
    local details = (kind == 'semaphore') and KEYS[4] or KEYS[5]
    local members = redis.call('zrangebyscore', KEYS[1], live_from(now), '+inf', 'withscores')
    for j = 1, #members, 2 do
      local member = members[j]
      if string.sub(member, 1, 1) ~= GRAVE then
        local grave = GRAVE .. member
        redis.call('hset', details, grave, details_of(kind, details, member))
        redis.call('hdel', details, member)
        redis.call('zadd', KEYS[1], members[j + 1], grave)
        redis.call('zrem', KEYS[1], member)
      end
    end
    if entry[HOLDERS] > 0 then
      announce_on(KEYS[1], ASK_CHANNEL, 'forced')
    end
  end
  return { entry }
end
local freed = true
if kind == 'lock' or kind == 'fair_lock' or kind == 'rw_lock_write' then
  redis.call('del', KEYS[1])
  announce_on(KEYS[1], '', 'released')
  -- An election's observers listen on their own channel (election.lua).
  announce_on(KEYS[1], ':~e', 'released')
  tell_first(KEYS[1], KEYS[7])
  -- Any holder's key keeps readers out: with no writer waiting, they may come in. (A fair
  -- lock's entry counts its own waiters; the intents are read here.)
  local writers = entry[WAITERS]
  if kind == 'fair_lock' then
    writers = live_in(KEYS[6], now)
  end
  if writers <= 0 then
    announce_on(KEYS[1], READERS, EVERYONE)
  end
elseif kind == 'semaphore' then
  redis.call('del', KEYS[1], KEYS[4])
  announce_on(KEYS[1], '', tostring(entry[USED]))
  -- Every permit is free: the first places in its line, as many as the limit, try.
  local places = redis.pcall('zrangebyscore', KEYS[7], 0, '+inf', 'limit', 0, entry[LIMIT])
  if not places.err then
    for _, place in ipairs(places) do
      tell_turn(KEYS[1], place)
    end
  end
elseif kind == 'rw_lock_read' then
  redis.call('del', KEYS[1], KEYS[5])
  announce_on(KEYS[1], '', 'released')
  tell_first(KEYS[1], KEYS[7])
else
  freed = false
end
if freed then
  announce_on(KEYS[1], ASK_CHANNEL, 'forced')
end
-- Whatever held the key, a fair line waiting for it hears of its turn: the first live
-- waiter, on its own channel.
if freed and kind_of(KEYS[3]) == 'zset' then
  tell_first(KEYS[1], KEYS[3], 0)
end
return { entry }

--- op: ask
-- a request that whoever holds a key let it go (polite revocation): each live holder's
-- token joins the key's ask companion, a sorted set kept as long as the longest of their TTLs,
-- where each holder's next renewal finds it (the renewal scripts' `asked`). Nothing else
-- changes: a holder that ignores the request keeps the key. A lock's, fair lock's or
-- writer's holder is asked; every holder of a semaphore and every reader (which of them
-- should yield is the application's to say, and a writer needs them all gone). A
-- tombstone, a key released into a minimum hold or handed to a waiting locker, and
-- something redmutex did not write have no holder to ask. When someone was asked, it is
-- announced on the key's ASK_CHANNEL, where holders kept alive by a locker with wake-up
-- listen: they renew at once rather than at their next renewal (the renewal, not the
-- message, tells them they were asked).
-- Each asked holder's token joins the companion as the member `token:id` (ARGV[1], the
-- request's id: the same on every node, see helpers.lua's `asked`).
-- KEYS:    the key and its six companions, as for `describe`, then its ask companion.
-- ARGV[1]: the request's id.
-- Returns: { entry }: the key's entry as `describe` reads it.
local now = now_ms()
local entry = describe_at(1, now)
local kind, asks, request = entry[KIND], KEYS[8], ':' .. ARGV[1]
local found = kind_of(asks)
if found ~= 'none' and found ~= 'zset' then
  return redis.error_reply('ERR ' .. asks .. ' holds data of another kind, where requests to release ' .. KEYS[1] .. ' are kept')
end
local longest = 0
if (kind == 'lock' or kind == 'fair_lock' or kind == 'rw_lock_write') and entry[FORCED] == 0 then
  local flag = string.sub(entry[VALUE], FLAG_AT, FLAG_AT)
  if flag ~= KEPT and flag ~= HANDED and entry[PTTL] > 0 then
    redis.call('zadd', asks, 0, string.sub(entry[VALUE], 1, TOKEN_LEN) .. request)
    longest = entry[PTTL]
  end
elseif kind == 'semaphore' or kind == 'rw_lock_read' then
  local members = redis.call('zrangebyscore', KEYS[1], live_from(now), '+inf', 'withscores')
  for j = 1, #members, 2 do
    local first = string.sub(members[j], 1, 1)
    -- (Not a tombstone, nor a semaphore's reserved place: '>' holds no token.)
    if first ~= GRAVE and first ~= '>' then
      redis.call('zadd', asks, 0, members[j] .. request)
      -- (A holder is live through the millisecond its expiry is scored at: the request
      -- lasts at least one more, never 0 — which would leave it without an expiry.)
      longest = math.max(longest, key_expiry(members[j + 1]) - now)
    end
  end
end
if longest > 0 then
  local kept = redis.pcall('pttl', asks)
  if type(kept) ~= 'number' or kept < longest then
    redis.call('pexpire', asks, string.format('%.0f', longest))
  end
  announce_on(KEYS[1], ASK_CHANNEL, 'ask')
end
return { entry }
