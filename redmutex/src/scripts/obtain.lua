-- obtain.lua: take every key, or none of them; with fences, hand out the next fence.
-- KEYS:    the lock keys, then (with fences) the fence counter of each, in the same order.
-- ARGV[1]: the value to store: token, waiting flag, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the token's length; the owner check compares that many leading bytes.
-- ARGV[4]: '1' when the caller waits for a release: a held key is then marked as awaited
--          (its flag byte, right after the token, becomes 'w'), so that its owner's
--          release announces itself on the key's channel.
-- ARGV[5]: the number of lock keys; when KEYS holds more, the rest are fence counters.
-- Returns: { 0, fence } when every key now holds ARGV[1] with the TTL: fence is one more
--          than the highest of the counters, now stored in all of them (0 without fences);
--          otherwise { i, 0 } with i the 1-based index of the first key held by another
--          owner, and nothing was written but that mark.
-- A key that already holds our own token counts as free: an earlier try whose reply was
-- lost may have set it, and the retry must be able to finish what that try started.
-- A key of another type (pcall turns its WRONGTYPE error into a table) counts as held, and
-- only values in redmutex's own format are ever marked; anything else is left as it is.
-- A counter that is not a whole number (or another type, or at 2^53 - 1 or above) stops
-- the script before anything is written.
local length = tonumber(ARGV[3])
local count = tonumber(ARGV[5])
local token = string.sub(ARGV[1], 1, length)
for i = 1, count do
  local value = redis.pcall('get', KEYS[i])
  if value ~= false and not (type(value) == 'string' and string.sub(value, 1, length) == token) then
    if ARGV[4] == '1' and type(value) == 'string' and string.sub(value, length + 1, length + 1) == '-'
        and string.find(string.sub(value, 1, length), '^[%w_%-]+$') then
      redis.call('setrange', KEYS[i], length, 'w')
    end
    return { i, 0 }
  end
end
local fence = 0
if #KEYS > count then
  for i = count + 1, #KEYS do
    local stored = redis.pcall('get', KEYS[i])
    local seen = 0
    if stored ~= false then
      -- Digits only (no sign, no exponent, no hex, which tonumber would take), and below
      -- 2^53 - 1 so that the next fence is still exact as a Lua number and in JSON.
      if type(stored) ~= 'string' or not string.find(stored, '^%d+$') then
        return redis.error_reply('redmutex: the fence counter ' .. KEYS[i] .. ' does not hold a whole number')
      end
      seen = tonumber(stored)
      if seen >= 9007199254740991 then
        return redis.error_reply('redmutex: the fence counter ' .. KEYS[i] .. ' is at 2^53 - 1 or above')
      end
    end
    if seen > fence then
      fence = seen
    end
  end
  fence = fence + 1
end
for i = 1, count do
  redis.call('set', KEYS[i], ARGV[1], 'px', ARGV[2])
end
for i = count + 1, #KEYS do
  redis.call('set', KEYS[i], fence)
end
return { 0, fence }
