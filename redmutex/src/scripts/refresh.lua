-- refresh.lua: set a new TTL on every key, only if this owner holds all of them.
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- ARGV[2]: the new TTL in milliseconds.
-- Returns: 1 when every key was extended; 0 when some key is not held (nothing changed).
if not holds(1, #KEYS, ARGV[1]) then
  return 0
end
for _, key in ipairs(KEYS) do
  redis.call('pexpire', key, ARGV[2])
end
return 1
