-- inspect.lua: what a key holds, read by anyone, atomically.
-- KEYS[1]: the key.
-- Returns: { pttl, type } and, when the type is 'string', the value as a third element.
--          pttl is -2 for a missing key and -1 for a key without expiry.
local key = KEYS[1]
local kind = redis.call('type', key)['ok']
local ttl = redis.call('pttl', key)
if kind == 'string' then
  return { ttl, kind, redis.call('get', key) }
end
return { ttl, kind }
