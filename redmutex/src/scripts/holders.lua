-- holders.lua: the operations of one holder of a holder set, written once for a semaphore's
-- holders (semaphore.lua) and a read-write lock's readers (rwlock.lua). Each section is a
-- script of its own, run with helpers.lua, the primitive's preamble and this preamble
-- before it (see scripts/lua.rs): the same text makes two scripts, one per primitive.
--
-- A holder set: a sorted set, one member per holder token, scored by when it expires (ms
-- on the server's clock), with its details beside it (a hash, in its hash slot); each
-- primitive's file says what they hold. Every section's KEYS start with the set and the
-- details.
--
-- What differs between the two is what makes a holder live, and how the keys follow a
-- holder's new expiry. The primitive's preamble says it in four declarations:
--   holder_expiry(set, details, token, now): when the holder `token` expires, if it holds
--     at `now` (ms, server clock); nil when it does not. Writes nothing.
--   holding(set, details, token): the same for a change of its expiry: the clock (now_ms),
--     the holder's expiry (nil: not held), and what the primitive read on the way (its
--     state), having dropped the holders that expired if it does.
--   keep_keys(set, details, state, was, expiry, ttl): the keys' expiry once the holder
--     that expired at `was` expires at `expiry`, `ttl` ms from now.
--   holder_fence(i, retention): the fence a holder takes from the counter KEYS[i], kept
--     `retention` ms after this use; nil and an error message for a counter that is
--     someone else's value.

-- Sets the expiry of the holder `token` to now + `ttl` ms if it holds; never adds a member
-- that was dropped (ZADD XX). Returns 1 when extended, 0 when not held.
local function extend(set, details, token, ttl)
  local now, was, state = holding(set, details, token)
  if not was then
    return 0
  end
  ttl = tonumber(ttl)
  redis.call('zadd', set, 'xx', now + ttl, token)
  keep_keys(set, details, state, was, now + ttl, ttl)
  return 1
end

--- op: refresh
-- 'refresh': KEYS the set, the details; ARGV[1] the token, ARGV[2] the new TTL in ms.
-- Returns: 1 when extended; 0 when not held (nothing changed).
return extend(KEYS[1], KEYS[2], ARGV[1], ARGV[2])

--- op: renew
-- 'renew': refresh many holders in one call (keep-alive), each on its own, and say which
-- were asked to let go.
-- KEYS:    per holder in the batch, holder after holder: the set, the details, and the
--          key's ask companion (see `asked`).
-- ARGV:    two values per holder, in the same order: its token and the TTL in ms to set.
-- Returns: one answer per holder (see `renewed`): 1 when extended; { 1, ids... } when
--          extended, and the holder was asked to let go by those requests; 0 when not
--          held.
local results = {}
local k = 1
for a = 1, #ARGV, 2 do
  local held = extend(KEYS[k], KEYS[k + 1], ARGV[a], ARGV[a + 1])
  local requests = {}
  if held == 1 then
    asked(KEYS[k + 2], ARGV[a], requests)
  end
  results[#results + 1] = renewed(held, requests)
  k = k + 3
end
return results

--- op: ttl
-- 'ttl': KEYS the set, the details; ARGV[1] the token.
-- Returns: milliseconds until the holder expires; -2 when it does not hold.
local now = now_ms()
local expiry = holder_expiry(KEYS[1], KEYS[2], ARGV[1], now)
if not expiry then
  return -2
end
return expiry - now

--- op: guarded
-- the caller's commands, run only while the holder ARGV[1] holds.
-- KEYS:    the set, the details (ARGV[2] = 2 of them), then the keys the commands touch.
-- ARGV[1]: the token.  ARGV[3…]: the commands (see run_guarded in helpers.lua).
-- Returns: { 0 } when it does not hold (nothing ran); otherwise { 1, replies }.
if not holder_expiry(KEYS[1], KEYS[2], ARGV[1], now_ms()) then
  return { 0 }
end
return { 1, run_guarded(3) }

--- op: fence
-- 'fence': the fence of a holder that took none (see holder_fence).
-- KEYS:    the set, the details, the fence counter.  ARGV[1]: the token.
-- ARGV[2]: how long the counter is kept after this use, in milliseconds.
-- Returns: the fence when the holder holds; 0 when it does not.
if not holder_expiry(KEYS[1], KEYS[2], ARGV[1], now_ms()) then
  return 0
end
local fence, err = holder_fence(3, ARGV[2])
if fence == nil then
  return redis.error_reply(err)
end
return fence

--- op: raise_fence
-- 'raise_fence': Redlock's second step for a holder's fence: the counter here is raised to
-- the fence the quorum saw (never lowered).
-- KEYS:    the set, the details, the counter.  ARGV[1]: the token.
-- ARGV[2]: the fence.  ARGV[3]: the retention.
-- Returns: 1 when the holder holds here and the counter is now at least the fence; 0
--          otherwise (nothing changed).
if not holder_expiry(KEYS[1], KEYS[2], ARGV[1], now_ms()) then
  return 0
end
return raise_counters(3, 3, tonumber(ARGV[2]), ARGV[3])
