-- inspect.lua: what a key holds, and the latest fence handed out for it, read by anyone,
-- atomically.
-- KEYS[1]: the key.
-- KEYS[2]: its fence counter.
-- Returns: { pttl, type, fence } and, when the type is 'string', the value as a fourth
--          element. pttl is -2 for a missing key and -1 for a key without expiry; fence is
--          the counter as stored (false when there is none, or it is not a string).
local key = KEYS[1]
local kind = redis.call('type', key)['ok']
local ttl = redis.call('pttl', key)
local fence = redis.pcall('get', KEYS[2])
if type(fence) ~= 'string' then
  fence = false
end
if kind == 'string' then
  return { ttl, kind, fence, redis.call('get', key) }
end
return { ttl, kind, fence }
