-- obtain_one.lua: the common fenced case of obtain.lua, lean: one key, a first try that
-- does not wait (no own keys to recognise, no holder to mark).
-- KEYS[1]: the lock key.
-- KEYS[2]: its fence counter.
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: how long the counter is kept after this use, in milliseconds.
-- Returns: { 0, fence } when the key now holds ARGV[1] with the TTL, fence being the next
--          one (see next_fence), now stored in the counter; { 1, -3 } when the key exists
--          (nothing written; its TTL is not read on this path).
-- A counter that is someone else's value: the key just set is deleted again and the
-- script answers an error, so nothing is left behind.
if not redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  return { 1, -3 }
end
local fence, err = next_fence(2, 2)
if fence == nil then
  redis.call('del', KEYS[1])
  return redis.error_reply(err)
end
store_fence(2, 2, fence, ARGV[3])
return { 0, fence }
