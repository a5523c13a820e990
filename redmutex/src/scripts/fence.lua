-- fence.lua: the fence of a lock taken without one, handed out when its holder first asks.
-- KEYS:    the lock keys, then the fence counter of each, in the same order.
-- ARGV[1]: the owner's token.
-- ARGV[2]: how long the counters are kept after this use, in milliseconds.
-- Returns: the next fence (see next_fence), now stored in every counter, when this owner
--          holds every lock key; 0 when it does not (nothing changed: a fence is only ever
--          handed out while the lock is held, so a later holder's is always greater).
local count = #KEYS / 2
if not holds(1, count, ARGV[1]) then
  return 0
end
local fence, err = next_fence(count + 1, #KEYS)
if fence == nil then
  return redis.error_reply(err)
end
store_fence(count + 1, #KEYS, fence, ARGV[2])
return fence
