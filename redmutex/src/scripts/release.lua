-- release.lua: delete the keys this owner still holds.
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- Returns: how many keys did NOT hold the token (0 means fully released).
-- A key held by someone else, or missing, is never touched; the keys that still hold our
-- token are deleted even when others are lost, so they do not block anyone until expiry.
-- A key marked as awaited (flag byte 'w' right after the token, set by a waiter's try) is
-- announced on the channel named like the key, so waiters wake at once instead of polling;
-- unmarked keys publish nothing, so an uncontended release costs no PUBLISH.
local token = ARGV[1]
local missing = 0
for _, key in ipairs(KEYS) do
  local value = redis.pcall('get', key)
  if type(value) == 'string' and string.sub(value, 1, #token) == token then
    redis.call('del', key)
    if string.sub(value, #token + 1, #token + 1) == 'w' then
      redis.call('publish', key, 'released')
    end
  else
    missing = missing + 1
  end
end
return missing
