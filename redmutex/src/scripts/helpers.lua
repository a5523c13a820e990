-- helpers.lua: the rules every primitive's script shares. Redis cannot include one script
-- in another, so the declarations below that an operation uses (directly or through one
-- another) are put before its own source (see scripts/lua.rs): each rule is written once, and
-- a script defines no function it does not call (Lua creates each on every call).

-- Whether `value`, a GET reply taken through pcall, belongs to the owner of `token`: a
-- string that starts with the token, held (flag byte '-', 'w', 'l' or 'L' after it). A
-- missing key (false) or a key of another type (an error table) is nobody's lock of ours;
-- nor is one its owner released into a minimum hold ('k': kept until it expires, it is no
-- longer the owner's to renew, refresh or release — a renewal still in flight must not
-- extend it), nor a key handed to a locker ('r': its id, which anyone can read, is not a
-- token).
local function owned(value, token)
  if type(value) ~= 'string' or string.sub(value, 1, #token) ~= token then
    return false
  end
  local flag = string.sub(value, #token + 1, #token + 1)
  return flag == '-' or flag == 'w' or flag == 'l' or flag == 'L' or flag == 'o'
end

-- The flag byte of a held value says who waits for its release: '-' nobody; 'w' waiters
-- not in a line (the release announces itself on the key's channel); 'o' only observers,
-- who wait for the release without taking the key (announced as for 'w', and nobody is
-- said to wait); 'l' lockers in the key's line (the release hands the key to the first,
-- see `hand_key`); 'L' lockers in line and the key's channel too.
local function watched(flag)
  return flag == 'w' or flag == 'L' or flag == 'o'
end

local function lined(flag)
  return flag == 'l' or flag == 'L'
end

-- The metadata of a redmutex value whose token is `length` bytes long.
local function metadata_of(value, length)
  return string.sub(value, length + 2)
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

-- Announces `message` on `key`'s channel named by `suffix` ('' for the key's own): the
-- key and the suffix. A hint (waiters also poll): a refusal (an ACL user without the
-- channel) must not fail the script, so it goes through pcall. On a cluster, scripts/lua.rs
-- puts sharded.lua's version in its place (shard channels).
local function announce_on(key, suffix, message)
  redis.pcall('publish', key .. suffix, message)
end

-- Tells the locker `id` that it is its turn at `key`, on a channel of its own: the lock
-- key, ':~', and 16 hex digits of its id's SHA-1 — public, and useless for taking anyone's
-- lock. A hint (waiters also try at least once per heartbeat interval).
local function turn(key, id)
  announce_on(key, ':~' .. string.sub(redis.sha1hex(id), 1, 16), 'turn')
end

-- A key's line: the lockers (processes) whose waiters wait for a mutex key, in arrival
-- order, in one sorted set beside it. Per locker L, the member L scored by its ticket (the
-- server's clock in microseconds when it joined) and the member beat_of(L) scored by minus
-- the end of its heartbeat (milliseconds on the server's clock). Negated, so that one
-- ZADD LT keeps a locker's first ticket and moves its heartbeat's end on; and the tickets,
-- from 0 up, are the line in order. Every try of a locker's waiters renews its heartbeat,
-- and they try at least every third of it: a locker that crashed or froze is passed over
-- once its heartbeat ended. The line expires a heartbeat after the latest join.
-- (A fair lock's queue has the same shape, its members waiters' tokens: see fair.lua.)

-- A locker's heartbeat in a line, in milliseconds (the engine's LINE_HEARTBEAT).
local LINE_BEAT_MS = 3000

-- The member that holds `member`'s heartbeat in a line or a fair lock's queue: its name,
-- then '~' up to 65 bytes. Longer than the 64 bytes up to which the server keeps a small
-- sorted set in its compact encoding (`zset-max-listpack-value`), where every ZSCORE, ZADD
-- and ZRANGEBYSCORE walks the whole set: with it a line is a skip list from its first
-- heartbeat on, and a hand-off costs the server the same with 64 processes waiting as
-- with 2 (docs/BENCHMARKS.md, "The herd").
local function beat_of(member)
  return member .. '~' .. string.rep('~', 64 - #member)
end

-- Puts `locker` in `line`, keeping its place if it has one, its heartbeat ending
-- LINE_BEAT_MS after the moment `us` (server microseconds).
local function join_line(line, locker, us)
  local ends = math.floor(us / 1000) + LINE_BEAT_MS
  redis.call('zadd', line, 'lt', string.format('%.0f', us), locker, string.format('%.0f', -ends), beat_of(locker))
  redis.call('pexpire', line, LINE_BEAT_MS + 1)
end

-- Takes `member` out of `line` (its ticket and its heartbeat).
local function leave_line(line, member)
  redis.call('zrem', line, member, beat_of(member))
end

-- When the heartbeat of `member` of `line` ends (ms on the server's clock), or nil when it
-- has none.
local function beat_end(line, member)
  local beat = redis.call('zscore', line, beat_of(member))
  return beat and -tonumber(beat)
end

-- The first member of `line` whose heartbeat is live at `now` (server ms), and when its
-- heartbeat ends; nil when there is none. Those before it, whose heartbeat ended (or is
-- missing), leave the line. A member whose ticket is less than `young` ms old is live
-- without a look at its heartbeat (its end is then not given): it joined since, with a
-- heartbeat at least that long. A line of another type (not redmutex's) has nobody.
local function first_live(line, now, young)
  while true do
    local first = redis.pcall('zrangebyscore', line, 0, '+inf', 'withscores', 'limit', 0, 1)
    if first.err or not first[1] then
      return nil
    end
    if now - math.floor(tonumber(first[2]) / 1000) < young then
      return first[1]
    end
    local ends = beat_end(line, first[1])
    if ends and live_at(ends, now) then
      return first[1], ends
    end
    leave_line(line, first[1])
  end
end

-- The first locker of a key's `line` whose heartbeat is live at `now` (server ms; the
-- clock is read when not given), or nil (see first_live).
local function first_in_line(line, now)
  return first_live(line, now or now_ms(), LINE_BEAT_MS)
end

-- Tells the member `member` of a line or a fair lock's queue that it is its turn at `key`,
-- on the turn channel its id names: a lock's line holds lockers' ids; a fair lock's queue
-- and a semaphore's line hold members named with something, '.', and that id.
local function tell_waiter(key, member)
  turn(key, string.match(member, '%.([^.]*)$') or member)
end

-- How long a released key (or a semaphore's freed permits) waits for the locker it was
-- handed to, in milliseconds: ample for a woken waiter's try (a round trip), short enough
-- that a locker gone in between costs the others little.
local HANDOFF_MS = 50

-- Whether `value` is in redmutex's format for a token of `length` bytes.
local function in_our_format(value, length)
  return type(value) == 'string' and string.find(string.sub(value, 1, length), '^[%w_%-]+$')
end

-- Sets the flag byte of the value at `key` (a redmutex value, held: '-', 'w', 'o', 'l' or
-- 'L') so that it says `watch` (a waiter not in line), `line` (lockers wait in line) and
-- `observe` (someone waits for the release without taking the key), on top of what it
-- says already. Other values are left as they are.
local function flag_waiters(key, value, length, watch, line, observe)
  if not in_our_format(value, length) then
    return
  end
  local flag = string.sub(value, length + 1, length + 1)
  if flag ~= '-' and flag ~= 'w' and flag ~= 'o' and flag ~= 'l' and flag ~= 'L' then
    return
  end
  local announce = watch or observe or watched(flag)
  line = line or lined(flag)
  local waits = watch or flag == 'w'
  local wanted = (line and (announce and 'L' or 'l')) or (waits and 'w') or (announce and 'o')
    or '-'
  if wanted ~= flag then
    redis.call('setrange', key, length, wanted)
  end
end

-- Hands `key` to the first locker of `line` whose heartbeat is live, which leaves the
-- line, and tells that locker: the key holds its id with the flag 'r' for HANDOFF_MS. (A
-- locker that lets the hand-off pass joins the line again at its end with its next try.)
-- Whether it did. (`first`, when given, is that locker, already read.)
local function hand_key(key, line, first)
  first = first or first_in_line(line)
  if not first then
    return false
  end
  leave_line(line, first)
  redis.call('set', key, first .. 'r', 'px', HANDOFF_MS)
  turn(key, first)
  return true
end

-- Tells the first live member of `line` that `key` was released (without handing it: a
-- release by another primitive, or kept for a minimum hold, or a semaphore's with no
-- agreed limit left), so that its waiter tries — takes the key, or learns until when it
-- is held.
local function tell_line(key, line)
  local first = first_in_line(line)
  if first then
    tell_waiter(key, first)
  end
end

-- The channel a read-write lock's readers wait on, and what a writer's release announces
-- there: how many readers may try — all of them.
local READERS = ':~r'
local EVERYONE = '1000000'

-- Tells those who watch `key` that its holder let go: on the key's own channel (waiters
-- not in a line, `wait_released`) and, when the key is now `free` (not kept, not handed
-- on), on the readers' channel: a read-write lock's readers of the same name wait there,
-- and any holder's key keeps them out. (They marked the holder, or found a locker in its
-- line.) Hints (see announce_on).
local function tell_watchers(key, free)
  announce_on(key, '', 'released')
  if free then
    announce_on(key, READERS, EVERYONE)
  end
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
