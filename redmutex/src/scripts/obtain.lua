-- obtain.lua: take every key, or none of them.
-- KEYS:    the lock keys.
-- ARGV[1]: the value to store: token, waiting flag, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the token's length; the owner check compares that many leading bytes.
-- ARGV[4]: '1' when the caller waits for a release: a held key is then marked as awaited
--          (its flag byte, right after the token, becomes 'w'), so that its owner's
--          release announces itself on the key's channel.
-- Returns: 0 when every key now holds ARGV[1] with the TTL; otherwise the 1-based index of
--          the first key held by another owner, and nothing was written but that mark.
-- A key that already holds our own token counts as free: an earlier try whose reply was
-- lost may have set it, and the retry must be able to finish what that try started.
-- A key of another type (pcall turns its WRONGTYPE error into a table) counts as held, and
-- only values in redmutex's own format are ever marked; anything else is left as it is.
local length = tonumber(ARGV[3])
local token = string.sub(ARGV[1], 1, length)
for i, key in ipairs(KEYS) do
  local value = redis.pcall('get', key)
  if value ~= false and not (type(value) == 'string' and string.sub(value, 1, length) == token) then
    if ARGV[4] == '1' and type(value) == 'string' and string.sub(value, length + 1, length + 1) == '-'
        and string.find(string.sub(value, 1, length), '^[%w_%-]+$') then
      redis.call('setrange', key, length, 'w')
    end
    return i
  end
end
for _, key in ipairs(KEYS) do
  redis.call('set', key, ARGV[1], 'px', ARGV[2])
end
return 0
