-- renew.lua: refresh many leases in one call (keep-alive), each owner-checked on its own.
-- KEYS:    the keys of every lease in the batch, lease after lease.
-- ARGV:    three values per lease, in the same order: its number of keys, its token, and
--          the TTL in milliseconds to set.
-- Returns: one integer per lease: 1 when all its keys were extended; 0 when some key is not
--          held by its token (then none of that lease's keys was changed).
local results = {}
local k = 1
for a = 1, #ARGV, 3 do
  local count = tonumber(ARGV[a])
  local last = k + count - 1
  local held = 0
  if holds(k, last, ARGV[a + 1]) then
    held = 1
    for i = k, last do
      redis.call('pexpire', KEYS[i], ARGV[a + 2])
    end
  end
  results[#results + 1] = held
  k = k + count
end
return results
