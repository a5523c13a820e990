-- obtain_one.lua: the common case of obtain.lua, lean: one key, fenced, a first try that
-- does not wait (no own keys to recognise, no holder to mark).
-- KEYS[1]: the lock key.
-- KEYS[2]: its fence counter.
-- ARGV[1]: the value to store: token, waiting flag, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- Returns: { 0, fence } when the key now holds ARGV[1] with the TTL, fence being the
--          counter after its increment; { 1, 0 } when the key exists (nothing written).
-- A counter that is not a whole number fails the INCR: the key just set is deleted again
-- and the script answers an error, so nothing is left behind.
if not redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  return { 1, 0 }
end
local fence = redis.pcall('incr', KEYS[2])
if type(fence) ~= 'number' then
  redis.call('del', KEYS[1])
  return redis.error_reply('redmutex: the fence counter ' .. KEYS[2] .. ' does not hold a whole number')
end
return { 0, fence }
