-- obtain_one.lua: the common case of obtain.lua, lean: one key, fenced, a first try that
-- does not wait (no own keys to recognise, no holder to mark).
-- KEYS[1]: the lock key.
-- KEYS[2]: its fence counter.
-- ARGV[1]: the value to store: token, waiting flag, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- Returns: { 0, fence } when the key now holds ARGV[1] with the TTL, fence being the
--          counter after its increment; { 1, 0 } when the key exists (nothing written).
-- A counter that is not a whole number fails the INCR: the key just set is deleted again
-- and the script answers an error, so nothing is left behind. A counter outside 0 to
-- 2^53 - 2 is put back as it was, with the same error.
if not redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  return { 1, 0 }
end
local fence = redis.pcall('incr', KEYS[2])
if type(fence) ~= 'number' then
  redis.call('del', KEYS[1])
  return redis.error_reply('redmutex: the fence counter ' .. KEYS[2] .. ' does not hold a whole number')
end
if fence < 1 or fence > 9007199254740991 then
  -- Someone else's number (negative, or past 2^53 - 1 where fences stop being exact):
  -- put it back as it was.
  redis.call('decr', KEYS[2])
  redis.call('del', KEYS[1])
  return redis.error_reply('redmutex: the fence counter ' .. KEYS[2] .. ' is outside 0 to 2^53 - 2')
end
return { 0, fence }
