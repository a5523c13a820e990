-- pttl.lua: the remaining TTL of a lock, owner-checked.
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- Returns: the smallest remaining TTL in milliseconds over the keys; -2 when some key is
--          not held by this owner; -1 when no key has an expiry (removed by someone else).
local token = ARGV[1]
local least = -1
for _, key in ipairs(KEYS) do
  local value = redis.pcall('get', key)
  if not (type(value) == 'string' and string.sub(value, 1, #token) == token) then
    return -2
  end
  local ttl = redis.call('pttl', key)
  if ttl >= 0 and (least < 0 or ttl < least) then
    least = ttl
  end
end
return least
