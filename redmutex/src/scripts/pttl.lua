-- pttl.lua: the remaining TTL of a lock, owner-checked.
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- Returns: the smallest remaining TTL in milliseconds over the keys; -2 when some key is
--          not held by this owner; -1 when no key has an expiry (removed by someone else).
if not holds(1, #KEYS, ARGV[1]) then
  return -2
end
local least = -1
for _, key in ipairs(KEYS) do
  local ttl = redis.call('pttl', key)
  if ttl >= 0 and (least < 0 or ttl < least) then
    least = ttl
  end
end
return least
