-- obtain.lua: take every key, or none of them.
-- KEYS:    the lock keys.
-- ARGV[1]: the value to store: token, then metadata.
-- ARGV[2]: the TTL in milliseconds.
-- ARGV[3]: the token's length; the owner check compares that many leading bytes.
-- Returns: 0 when every key now holds ARGV[1] with the TTL; otherwise the 1-based index of
--          the first key held by another owner, and nothing was written.
-- A key that already holds our own token counts as free: an earlier try whose reply was
-- lost may have set it, and the retry must be able to finish what that try started.
-- A key of another type (pcall turns its WRONGTYPE error into a table) counts as held.
local token = string.sub(ARGV[1], 1, tonumber(ARGV[3]))
for i, key in ipairs(KEYS) do
  local value = redis.pcall('get', key)
  if value ~= false and not (type(value) == 'string' and string.sub(value, 1, #token) == token) then
    return i
  end
end
for _, key in ipairs(KEYS) do
  redis.call('set', key, ARGV[1], 'px', ARGV[2])
end
return 0
