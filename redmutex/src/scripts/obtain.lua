-- obtain.lua: take every key, or none of them; for a fenced acquire, hand out the next
-- fence too.
-- KEYS:    the lock keys, then (fenced) the fence counter of each, in the same order.
-- ARGV[1]: the value to store: token, flag byte, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the token's length; the owner check compares that many leading bytes.
-- ARGV[4]: '1' when the caller waits for a release: a held key is then marked as awaited
--          (its flag byte, right after the token, becomes 'w'), so that its owner's
--          release announces itself on the key's channel.
-- ARGV[5]: the number of lock keys; when KEYS holds more, the rest are fence counters.
-- ARGV[6]: fenced: how long the counters are kept after this use, in milliseconds.
-- Returns: { 0, fence } when every key now holds ARGV[1] with the TTL: fence is above
--          every counter (see next_fence), now stored in all of them (0 when not fenced);
--          otherwise { i, pttl }: i is the 1-based index of the first key held by another
--          owner, pttl its remaining TTL (-1: none), and nothing was written but the mark.
-- A key that already holds our own token counts as free: an earlier try whose reply was
-- lost may have set it, and the retry must be able to finish what that try started.
-- A key of another type (pcall turns its WRONGTYPE error into a table) counts as held, and
-- only values in redmutex's own format are ever marked; anything else is left as it is.
-- A counter that is someone else's value stops the script before anything is written.
local length = tonumber(ARGV[3])
local count = tonumber(ARGV[5])
local token = string.sub(ARGV[1], 1, length)
for i = 1, count do
  local value = redis.pcall('get', KEYS[i])
  if value ~= false and not owned(value, token) then
    if ARGV[4] == '1' and type(value) == 'string' and string.sub(value, length + 1, length + 1) == '-'
        and string.find(string.sub(value, 1, length), '^[%w_%-]+$') then
      redis.call('setrange', KEYS[i], length, 'w')
    end
    return { i, redis.call('pttl', KEYS[i]) }
  end
end
local fenced = #KEYS > count
local fence = 0
if fenced then
  local err
  fence, err = next_fence(count + 1, #KEYS)
  if fence == nil then
    return redis.error_reply(err)
  end
end
for i = 1, count do
  redis.call('set', KEYS[i], ARGV[1], 'px', ARGV[2])
end
if fenced then
  store_fence(count + 1, #KEYS, fence, ARGV[6])
end
return { 0, fence }
