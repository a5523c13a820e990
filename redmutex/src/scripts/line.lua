-- line.lua: waiting, in one place — every script's way to line up, leave, find the first
-- live waiter, hand a key on, and tell. Put after helpers.lua (whose clock and flag names it
-- uses), before each primitive's preamble, as helpers.lua is (see scripts/lua.rs).
--
-- A line: one sorted set beside the key waited for, in its hash slot. Per waiter, its
-- member scored by its ticket (the server's clock in microseconds when it joined; see
-- ticket_of for a strict order), and the member
-- beat_of(member) scored by minus the end of its heartbeat (milliseconds on the server's
-- clock). Negated, so that one ZADD LT keeps a waiter's first ticket and moves its
-- heartbeat's end on, and the tickets, from 0 up, are the line in order. Every try of a
-- waiter renews its heartbeat, and it tries at least every third of it: a waiter that
-- crashed or froze is passed over once its heartbeat ended. The line lives as long as its
-- longest heartbeat (see join_line), and is gone with its last waiter.
--
-- Who waits in a line (DEVELOPMENT.md, "Waiting"): a key's lockers (a lock's, a leader's,
-- writers'), a member per locker, its id; a fair lock's waiters, a member per waiter, its
-- token, '.', the id its turn is told on; a semaphore's places, a member per locker and
-- count of permits wanted, the count, '.', the locker's id.
--
-- Telling: announce_on publishes on one of a key's channels (on a cluster, sharded.lua's
-- takes its place); tell_turn tells one waiter of its turn, on a channel its id names;
-- tell_first tells a line's first live waiter; tell_watchers tells those who wait on the
-- key's own channel and the readers' channel. Handing: hand_key gives a released key to
-- the first live locker of its line for HANDOFF_MS (a semaphore hands permits the same
-- way, semaphore.lua's hand_permits).

-- A locker's heartbeat in a key's line, in milliseconds (the engine's LINE_HEARTBEAT). A
-- fair lock's waiters have their own (fair.lua).
local LINE_BEAT_MS = 3000

-- The member that holds `member`'s heartbeat in a line: its name, then '~' up to 65
-- bytes. Longer than the 64 bytes up to which the server keeps a small sorted set in its
-- compact encoding (`zset-max-listpack-value`), where every ZSCORE, ZADD and ZRANGEBYSCORE
-- walks the whole set: with it a line is a skip list from its first heartbeat on, and a
-- hand-off costs the server the same with 64 processes waiting as with 2
-- (docs/BENCHMARKS.md, "The herd").
local function beat_of(member)
  return member .. '~' .. string.rep('~', 64 - #member)
end

-- The ticket of `member` in `line`: its own when it has one; a newcomer's at the moment
-- `us` (server microseconds) otherwise — `us`, or one above the last ticket when that is
-- later: arrival order, never repeated, even when the server's clock stepped back (a
-- failover to a host whose clock is behind). A fair lock's waiters take it (its promise
-- is arrival order, SAFETY.md 8); a key's lockers take the clock as it is (their order is
-- the hand-off's, and it costs two reads less). Nil when the line holds data of another
-- kind.
local function ticket_of(line, member, us)
  local own = redis.pcall('zscore', line, member)
  if type(own) == 'string' then
    return tonumber(own)
  elseif type(own) == 'table' then
    return nil
  end
  local last = redis.call('zrevrange', line, 0, 0, 'withscores')
  if last[2] and tonumber(last[2]) >= us then
    return tonumber(last[2]) + 1
  end
  return us
end

-- Puts `member` at the end of `line` with the ticket `ticket` (the moment `us`, server
-- microseconds, when not given; see ticket_of), keeping its place if it has one, its
-- heartbeat ending `beat` ms after `us` — a waiter's own (a fair lock's), or, not given,
-- LINE_BEAT_MS (a locker's). The line lives as long as its longest heartbeat: where every
-- member's is LINE_BEAT_MS, until this one ends (one command); where each has its own, at
-- least this one, at most two. False, with nothing written, when the line holds data of
-- another kind.
local function join_line(line, member, us, beat, ticket)
  local own = beat ~= nil
  beat = beat or LINE_BEAT_MS
  local ends = math.floor(us / 1000) + beat
  local joined = redis.pcall('zadd', line, 'lt', string.format('%.0f', ticket or us), member, string.format('%.0f', -ends), beat_of(member))
  if type(joined) ~= 'number' then
    return false
  end
  if not own then
    redis.call('pexpire', line, beat + 1)
  elseif redis.call('pttl', line) < beat then
    redis.call('pexpire', line, 2 * beat)
  end
  return true
end

-- Takes `member` out of `line` (its ticket and its heartbeat). Whether it was in it. (A
-- line of another kind is left alone.)
local function leave_line(line, member)
  local left = redis.pcall('zrem', line, member, beat_of(member))
  return type(left) == 'number' and left > 0
end

-- How many wait ahead of `member` in `line`; -1 when it is not in it (or the line holds
-- data of another kind). A waiter whose heartbeat ended counts until it is passed over.
local function ahead_of(line, member)
  local ticket = redis.pcall('zscore', line, member)
  if type(ticket) ~= 'string' then
    return -1
  end
  return redis.call('zcount', line, 0, '(' .. ticket)
end

-- When the heartbeat of `member` of `line` ends (ms on the server's clock), or nil when it
-- has none.
local function beat_end(line, member)
  local beat = redis.call('zscore', line, beat_of(member))
  return beat and -tonumber(beat)
end

-- The first member of `line` whose heartbeat is live at `now` (server ms; read when not
-- given), and when its heartbeat ends; nil when there is none. Those before it, whose
-- heartbeat ended (or is missing), leave the line. A member whose ticket is less than
-- `young` ms old (LINE_BEAT_MS when not given: a locker's) is live without a look at its
-- heartbeat (its end is then not given): it joined since, with a heartbeat at least that
-- long. A line of another kind has nobody.
local function first_live(line, now, young)
  now, young = now or now_ms(), young or LINE_BEAT_MS
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

-- How many wait in `line` with a live heartbeat at `now`; -1 when there is no line (where
-- waiters do not line up, nobody is known to wait) or it holds data of another kind.
local function waiting_in(line, now)
  if redis.call('type', line)['ok'] ~= 'zset' then
    return -1
  end
  return redis.call('zcount', line, '-inf', string.format('%.0f', -live_from(now)))
end

-- Announces `message` on `key`'s channel named by `suffix` ('' for the key's own): the
-- key and the suffix. A hint (waiters also poll): a refusal (an ACL user without the
-- channel) must not fail the script, so it goes through pcall. On a cluster, scripts/lua.rs
-- puts sharded.lua's version in its place (shard channels).
local function announce_on(key, suffix, message)
  redis.pcall('publish', key .. suffix, message)
end

-- Tells `member` of a line waiting at `key` that it is its turn, on a channel its id
-- names: the key, ':~', and 16 hex digits of the id's SHA-1 — public, and useless for
-- taking anyone's lock. The id is the member's part after its last '.' (a fair lock's
-- waiter, a semaphore's place), or the whole member (a locker). A hint (waiters also try
-- at least once per third of a heartbeat).
local function tell_turn(key, member)
  local id = string.match(member, '%.([^.]*)$') or member
  announce_on(key, ':~' .. string.sub(redis.sha1hex(id), 1, 16), 'turn')
end

-- Tells the first live member of `line` (see first_live: `young`) that `key` was released
-- without being handed to it (a release by another primitive, or kept for a minimum hold,
-- or a semaphore's with no agreed limit left, or a fair lock's), so that its waiter tries:
-- takes the key, or learns until when it is held.
local function tell_first(key, line, young)
  local first = first_live(line, nil, young)
  if first then
    tell_turn(key, first)
  end
end

-- How long a released key (or a semaphore's freed permits) waits for the locker it was
-- handed to, in milliseconds: ample for a woken waiter's try (a round trip), short enough
-- that a locker gone in between costs the others little.
local HANDOFF_MS = 50

-- Hands `key` to the first locker of `line` whose heartbeat is live, which leaves the
-- line, and tells that locker: the key holds its id with the flag HANDED for HANDOFF_MS.
-- (A locker that lets the hand-off pass joins the line again at its end with its next
-- try.) Whether it did. (`first`, when given, is that locker, already read.)
local function hand_key(key, line, first)
  first = first or first_live(line)
  if not first then
    return false
  end
  leave_line(line, first)
  redis.call('set', key, first .. HANDED, 'px', HANDOFF_MS)
  tell_turn(key, first)
  return true
end

-- Hands `key`, let go of by the locker it was handed to or by its holder, to the first
-- live locker of `line` (hand_key), or deletes it when nobody is in line. Whether it is
-- free now.
local function pass_key(key, line)
  if hand_key(key, line) then
    return false
  end
  redis.call('del', key)
  return true
end

-- The locker `locker` gives up waiting for `key`, whose value is `value`: it leaves
-- `line`, and a key handed to it goes on (pass_key). Whether the key is free now.
local function withdraw(key, line, locker, value)
  leave_line(line, locker)
  return value == locker .. HANDED and pass_key(key, line)
end

-- Whether a held value's `flag` says that its release is announced on the key's channel
-- (waiters not in a line, or observers), and that lockers wait in its line.
local function watched(flag)
  return flag == AWAITED or flag == LINED_AWAITED or flag == OBSERVED
end

local function lined(flag)
  return flag == LINED or flag == LINED_AWAITED
end

-- Marks the held value `value` at `key` (a redmutex value, `length` the token's) with a
-- waiter's way of waiting, `way`: AWAITED (on the key's channel), LINED (its locker in the
-- key's line) or OBSERVED (for the release, without taking the key), on top of the ways
-- its flag says already. Values of any other kind or state are left as they are.
local function mark_waiter(key, value, length, way)
  if type(value) ~= 'string' or not string.find(string.sub(value, 1, length), '^[%w_%-]+$') then
    return
  end
  local flag = flag_of(value, length)
  if not (flag == NOT_AWAITED or watched(flag) or lined(flag)) then
    return
  end
  local announce = way ~= LINED or watched(flag)
  local line = way == LINED or lined(flag)
  local waits = way == AWAITED or flag == AWAITED
  local wanted = (line and (announce and LINED_AWAITED or LINED)) or (waits and AWAITED)
    or (announce and OBSERVED) or NOT_AWAITED
  if wanted ~= flag then
    redis.call('setrange', key, length, wanted)
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
