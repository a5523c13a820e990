-- election.lua: leader election — the leader holds the election's key as a mutex does
-- (token, flag byte, then its value as the metadata, with PX), so taking it, renewing it,
-- releasing it and its fence (the leader's term) are the mutex's own operations. One file,
-- one section per operation: each section (from its `--- op:` line to the next) is a script
-- of its own, run with helpers.lua (owned, metadata_of) and this preamble before it (see
-- scripts/lua.rs). Observers hear of every change on the channel the key and ':~e'.

--- op: proclaim
-- 'proclaim': the leader ARGV[1] sets its value to ARGV[2]; the TTL is kept.
-- KEYS[1]: the election's key.
-- ARGV[3]: the announcement for observers (how many of a locker's observers to wake).
-- Returns: 1 when set (and announced); 0 when ARGV[1] does not lead (nothing changed).
local key, token = KEYS[1], ARGV[1]
local value = redis.pcall('get', key)
if not owned(value, token) then
  return 0
end
-- The flag stays as it is: an awaited leader's release must still announce itself, or
-- hand the key on to the lockers in line.
redis.call('set', key, string.sub(value, 1, #token + 1) .. ARGV[2], 'keepttl')
announce_on(key, ':~e', ARGV[3])
return 1

--- op: announce
-- 'announce': tells the election's observers that its leader changed, where the channel
-- is a shard channel (a cluster; see announce_on, which falls back to PUBLISH on a server
-- without them). Elsewhere a plain PUBLISH does it.
-- KEYS[1]: the election's key.
-- ARGV[1]: the announcement for observers (how many of a locker's observers to wake).
-- Returns: nothing.
announce_on(KEYS[1], ':~e', ARGV[1])
