-- fence.lua: Redlock's second step: make a chosen fence durable on this node.
-- KEYS:    the lock keys, then the fence counter of each, in the same order.
-- ARGV[1]: the owner's token.
-- ARGV[2]: the fence chosen for this acquisition.
-- Returns: 1 when this owner holds every lock key here and every counter is now at least
--          the fence (raised where lower, never lowered); 0 when some key is not held by
--          this owner (nothing changed: a raise for a lock we no longer hold must not count)
--          or a counter holds something other than a whole number (left as it is).
local token = ARGV[1]
local count = #KEYS / 2
for i = 1, count do
  local value = redis.pcall('get', KEYS[i])
  if not (type(value) == 'string' and string.sub(value, 1, #token) == token) then
    return 0
  end
end
local fence = tonumber(ARGV[2])
-- A counter that is not a whole number is someone else's value: never overwritten, and
-- this node cannot make the fence durable.
local raise = {}
for i = count + 1, #KEYS do
  local stored = redis.pcall('get', KEYS[i])
  if stored == false then
    raise[#raise + 1] = KEYS[i]
  elseif type(stored) ~= 'string' or not string.find(stored, '^%d+$') then
    return 0
  elseif tonumber(stored) < fence then
    raise[#raise + 1] = KEYS[i]
  end
end
for _, counter in ipairs(raise) do
  redis.call('set', counter, ARGV[2])
end
return 1
