-- helpers.lua: the rules every primitive's script shares. Redis cannot include one script
-- in another, so the declarations below that an operation uses (directly or through one
-- another) are put before its own source (see scripts/lua.rs): each rule is written once, and
-- a script defines no function it does not call (Lua creates each on every call).

-- The flag byte after a held value's token: who waits for the key's release, or what the
-- value has become. Named here once for every script (token.rs names the same states; a
-- test checks that they agree); line.lua says how waiters set them.
-- Held, nobody waits.
local NOT_AWAITED = '-'
-- Held; waiters that are not in a line wait on the key's channel (the release announces
-- itself there).
local AWAITED = 'w'
-- Held; only observers wait, for the release without taking the key (announced as for
-- AWAITED; nobody is said to wait to take it).
local OBSERVED = 'o'
-- Held; lockers wait in the key's line (the release hands the key to the first).
local LINED = 'l'
-- Held; lockers wait in line, and others on the key's channel.
local LINED_AWAITED = 'L'
-- Released into a minimum hold: kept until it expires, no longer the owner's to renew,
-- refresh or release (a renewal still in flight must not extend it).
local KEPT = 'k'
-- Handed to a locker in line (the value is its id, which anyone can read: not a token).
local HANDED = 'r'

-- The flag byte of a redmutex value whose token is `length` bytes long.
local function flag_of(value, length)
  return string.sub(value, length + 1, length + 1)
end

-- Whether `value`, a GET reply taken through pcall, belongs to the owner of `token`: a
-- string that starts with the token, held (any flag but KEPT and HANDED after it). A
-- missing key (false) or a key of another type (an error table) is nobody's lock of ours.
local function owned(value, token)
  if type(value) ~= 'string' or string.sub(value, 1, #token) ~= token then
    return false
  end
  local flag = flag_of(value, #token)
  return flag == NOT_AWAITED or flag == AWAITED or flag == LINED or flag == LINED_AWAITED
    or flag == OBSERVED
end

-- The metadata of a redmutex value whose token is `length` bytes long.
local function metadata_of(value, length)
  return string.sub(value, length + 2)
end

-- Releases the key `key`, held by `token` with `value`, into a minimum hold: the owner's
-- value flagged KEPT, expiring in `keep` ms — held until then, handed to nobody, and no
-- longer the owner's.
local function keep_held(key, value, token, keep)
  redis.call('set', key, token .. KEPT .. metadata_of(value, #token), 'px', keep)
end

-- Whether every key in KEYS[first..last] holds the owner's token.
local function holds(first, last, token)
  for i = first, last do
    if not owned(redis.pcall('get', KEYS[i]), token) then
      return false
    end
  end
  return true
end

-- The requests that the holder `token` let its key go (`Locker::request_release`), added
-- to `into`: the ids of those stored in `asks`, the key's ask companion (see listing.lua's
-- `ask`), a sorted set of members `token:id`, all scored 0 so that one ZRANGEBYLEX reads a
-- token's. Each request has an id of its own, the same on every node, so that Redlock
-- counts each request on its own: a request heard from a quorum of nodes, not requests
-- that each failed on a minority added up. What is not a sorted set there asks nothing
-- (pcall: its WRONGTYPE error is no request).
local function asked(asks, token, into)
  local found = redis.pcall('zrangebylex', asks, '[' .. token .. ':', '(' .. token .. ';')
  if type(found) == 'table' and not found.err then
    for _, member in ipairs(found) do
      into[#into + 1] = string.sub(member, #token + 2)
    end
  end
  return into
end

-- A renewal's answer for one holder: 0 not held; 1 extended; or, when it was asked to
-- let go, { 1, the requests' ids... }.
local function renewed(held, requests)
  if held ~= 1 or #requests == 0 then
    return held
  end
  local answer = { 1 }
  for _, id in ipairs(requests) do
    answer[#answer + 1] = id
  end
  return answer
end

-- Fences stay below 2^53 - 1: beyond it they are no longer exact as Lua numbers or in JSON.
local FENCE_LIMIT = 9007199254740991

-- The fence counter at `key`: false when there is none (never used, or expired after its
-- retention period); its number when it holds digits only (no sign, exponent or hex, which
-- tonumber would take) below the limit; otherwise nil and an error message: the value is
-- someone else's, and is never overwritten.
local function read_counter(key)
  local stored = redis.pcall('get', key)
  if stored == false then
    return false
  end
  if type(stored) ~= 'string' or not string.find(stored, '^%d+$') then
    return nil, 'redmutex: the fence counter ' .. key .. ' does not hold a whole number'
  end
  local value = tonumber(stored)
  if value >= FENCE_LIMIT then
    return nil, 'redmutex: the fence counter ' .. key .. ' is at 2^53 - 1 or above'
  end
  return value
end

-- The server's clock, in microseconds.
local function now_us()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The next fence for the counters KEYS[first..last]: above every one of them, and never
-- below the server's clock in microseconds. A counter gone with its node's data — expired
-- after its retention period, a restart without persistence — or set back, as a failover
-- to a replica that had not received the last increments sets it, is passed by the clock,
-- which has passed every fence handed out before (as long as the clock was not set back
-- in between: docs/SAFETY.md). Nil and an error message for a counter that is someone
-- else's value.
local function next_fence(first, last)
  local fence = now_us()
  for i = first, last do
    local value, err = read_counter(KEYS[i])
    if value == nil then
      return nil, err
    end
    if value and value + 1 > fence then
      fence = value + 1
    end
  end
  return fence
end

-- Stores `fence` in the counters KEYS[first..last], each kept for `retention` ms after this
-- use. Written as digits: a Lua number would be formatted by Redis, possibly as a float.
local function store_fence(first, last, fence, retention)
  local digits = string.format('%.0f', fence)
  for i = first, last do
    redis.call('set', KEYS[i], digits, 'px', retention)
  end
end

-- Takes the next fence for the counters KEYS[first..last] and stores it there, kept for
-- `retention` ms (next_fence, then store_fence): for a script that writes its claim at
-- once. Nil and an error message, with nothing written, as next_fence.
local function take_fence(first, last, retention)
  local fence, err = next_fence(first, last)
  if fence ~= nil then
    store_fence(first, last, fence, retention)
  end
  return fence, err
end

-- Raises the counters KEYS[first..last] to `fence` where lower (never lowers one), each kept
-- for `retention` ms after this use. Returns 1; or 0, changing nothing, when a counter is
-- someone else's value (this node cannot make the fence durable).
local function raise_counters(first, last, fence, retention)
  local raise = {}
  for i = first, last do
    local value = read_counter(KEYS[i])
    if value == nil then
      return 0
    end
    if value == false or value < fence then
      raise[#raise + 1] = i
    end
  end
  for _, i in ipairs(raise) do
    store_fence(i, i, fence, retention)
  end
  return 1
end

-- The server's clock, in milliseconds.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Expiries scored in sorted sets (a semaphore's holders, readers, a fair line's
-- heartbeats, writers' intents: milliseconds on the server's clock) end as Redis's own key
-- expiry does: an expiry is live through its last millisecond — while now_ms() <= it —
-- and over once the clock is past it. (The clock in whole milliseconds is the time
-- rounded down, so a claim scored now_ms() + ttl lasts longer than ttl: never shorter
-- than the holder's validity.) Every comparison of an expiry with the clock is one of
-- these three.
local function live_at(expiry, now)
  return tonumber(expiry) >= now
end

-- The ZRANGEBYSCORE / ZREMRANGEBYSCORE / ZCOUNT bounds of the expiries over by `now`
-- (-inf to OVER_BY(now)), and of those still live (LIVE_FROM(now) to +inf).
local function over_by(now)
  return '(' .. now
end

local function live_from(now)
  return now
end

-- How many members of `set`, a sorted set scored by expiries (holders, readers, intents),
-- are live at `now`; 0 when it is missing or of another kind.
local function live_in(set, now)
  local count = redis.pcall('zcount', set, live_from(now), '+inf')
  return type(count) == 'number' and count or 0
end

-- The PEXPIREAT that keeps a key as long as its latest expiry `expiry` is live. (One
-- millisecond on: PEXPIREAT at the current millisecond deletes the key at once, while an
-- expiry lives through it.)
local function key_expiry(expiry)
  return tonumber(expiry) + 1
end

-- The expiry of `member` in `scores`, a sorted set scored by expiries, when it is live at
-- `now` (a semaphore's holder, a reader); nil when it is not — expired or absent — or
-- `scores` is a key of another kind.
local function live_expiry(scores, member, now)
  local score = redis.pcall('zscore', scores, member)
  if type(score) ~= 'string' or not live_at(score, now) then
    return nil
  end
  return tonumber(score)
end

-- Deletes `scores`, a sorted set scored by expiries (ms on the server's clock), and
-- `other`, the key that goes with it, when the set is empty; otherwise both expire at its
-- highest score: a semaphore's holders and details.
local function expire_with(scores, other)
  local last = redis.call('zrevrange', scores, 0, 0, 'withscores')
  if last[2] == nil then
    redis.call('del', scores, other)
    return
  end
  redis.call('pexpireat', scores, key_expiry(last[2]))
  redis.call('pexpireat', other, key_expiry(last[2]))
end

-- A semaphore's holders and its line (semaphore.lua) name permits: the permits a place in
-- line wants (its name: the number, '.', the locker's id).
local function wanted_by(place)
  return tonumber(string.match(place, '^(%d+)%.'))
end

-- The permits the member `member` of a semaphore's holders counts, `entry` its details
-- entry (false: none): a reservation's place names them; otherwise the entry, or one.
local function permits_in(member, entry)
  if entry then
    return tonumber(string.match(entry, '^(%d+)')) or 0
  end
  if string.sub(member, 1, 1) == '>' then
    return wanted_by(string.sub(member, 2)) or 0
  end
  return 1
end

-- Goes through `members` of a holder set (a semaphore's holders, readers) with `details`,
-- the hash of their entries beside it: with `weigh` (a function of a member and its entry,
-- false when it has none: permits_in, for a semaphore's holders), returns the sum of their
-- weights (0 without); with `forget`, their entries are deleted as they are read (the
-- members are leaving).
local function in_slices(details, members, weigh, forget)
  local sum = 0
  -- In slices: Lua's unpack has a bounded stack.
  for i = 1, #members, 1000 do
    local slice = { unpack(members, i, math.min(i + 999, #members)) }
    if weigh then
      local entries = redis.call('hmget', details, unpack(slice))
      for j, member in ipairs(slice) do
        sum = sum + weigh(member, entries[j])
      end
    end
    if forget then
      redis.call('hdel', details, unpack(slice))
    end
  end
  return sum
end

-- Drops the members of the holder set `set` whose expiry passed by `now`, and their
-- entries in `details`. Returns nil when none had; otherwise the sum of their weights by
-- `weigh`, if given (see in_slices: the permits a semaphore's holders counted).
local function drop_expired(set, details, now, weigh)
  local expired = redis.call('zrangebyscore', set, '-inf', over_by(now))
  if #expired == 0 then
    return nil
  end
  local sum = in_slices(details, expired, weigh, true)
  redis.call('zremrangebyscore', set, '-inf', over_by(now))
  return sum
end

-- What `key` holds, and the latest fence of its counter `counter`: { pttl, type, fence,
-- value }. pttl is -2 for a missing key and -1 for a key without expiry; fence is the
-- counter as stored (false when there is none, or it is not a string); value is the key's
-- value when its type is 'string', otherwise false.
local function read_key(key, counter)
  local kind = redis.call('type', key)['ok']
  local ttl = redis.call('pttl', key)
  local fence = redis.pcall('get', counter)
  if type(fence) ~= 'string' then
    fence = false
  end
  if kind == 'string' then
    return { ttl, kind, fence, redis.call('get', key) }
  end
  return { ttl, kind, fence, false }
end

-- The caller's commands of a guarded write, run in order once the operation checked that
-- its owner holds the claim (see each primitive's `guarded`): ARGV from `from` on holds, per
-- command, its number of words and then the words. Their replies, in order, each as
-- { 1, reply } — or { 0, message } for a command that failed: the rest still run (the
-- commands before it stay done, as in MULTI/EXEC), and an error reply inside the reply
-- would fail the whole call on the client.
local function run_guarded(from)
  local replies = {}
  local a = from
  while a <= #ARGV do
    local words = tonumber(ARGV[a])
    local reply = redis.pcall(unpack(ARGV, a + 1, a + words))
    if type(reply) == 'table' and reply.err then
      replies[#replies + 1] = { 0, reply.err }
    else
      replies[#replies + 1] = { 1, reply }
    end
    a = a + words + 1
  end
  return replies
end
