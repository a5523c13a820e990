-- release.lua: delete the keys this owner still holds.
-- KEYS:    the lock keys.
-- ARGV[1]: the owner's token.
-- Returns: how many keys did NOT hold the token (0 means fully released).
-- A key held by someone else, or missing, is never touched; the keys that still hold our
-- token are deleted even when others are lost, so they do not block anyone until expiry.
-- A key marked as awaited (flag byte 'w' right after the token, set by a waiter's try) is
-- announced on the channel named like the key, so waiters wake at once instead of polling;
-- unmarked keys publish nothing, so an uncontended release costs no PUBLISH. The
-- announcement is a hint (waiters also poll): a PUBLISH refused (an ACL user without the
-- channel) must not fail the release, so it goes through pcall.
local token = ARGV[1]
local missing = 0
for _, key in ipairs(KEYS) do
  local value = redis.pcall('get', key)
  if owned(value, token) then
    redis.call('del', key)
    if string.sub(value, #token + 1, #token + 1) == 'w' then
      redis.pcall('publish', key, 'released')
    end
  else
    missing = missing + 1
  end
end
return missing
