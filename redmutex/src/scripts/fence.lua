-- fence.lua: Redlock's second step: make a chosen fence durable on this node.
-- KEYS:    the lock keys, then the fence counter of each, in the same order.
-- ARGV[1]: the owner's token.
-- ARGV[2]: the fence chosen for this acquisition.
-- Returns: 1 when this owner holds every lock key here and every counter is now at least
--          the fence (raised where lower, never lowered); 0 when some key is not held by
--          this owner (nothing changed: a raise for a lock we no longer hold must not count).
local token = ARGV[1]
local count = #KEYS / 2
for i = 1, count do
  local value = redis.pcall('get', KEYS[i])
  if not (type(value) == 'string' and string.sub(value, 1, #token) == token) then
    return 0
  end
end
local fence = tonumber(ARGV[2])
for i = count + 1, #KEYS do
  local seen = tonumber(redis.call('get', KEYS[i]) or '0')
  if seen == nil or seen < fence then
    redis.call('set', KEYS[i], ARGV[2])
  end
end
return 1
