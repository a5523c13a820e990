-- raise_fence.lua: Redlock's second step for fences: make a chosen fence durable on this
-- node.
-- KEYS:    the lock keys, then the fence counter of each, in the same order.
-- ARGV[1]: the owner's token.
-- ARGV[2]: the fence chosen for this acquisition.
-- ARGV[3]: how long a raised counter is kept, in milliseconds.
-- Returns: 1 when this owner holds every lock key here and every counter is now at least
--          the fence (raised where lower, never lowered); 0 when some key is not held by
--          this owner (nothing changed: a raise for a lock we no longer hold must not count)
--          or a counter is someone else's value (left as it is: this node cannot make the
--          fence durable).
local count = #KEYS / 2
if not holds(1, count, ARGV[1]) then
  return 0
end
local fence = tonumber(ARGV[2])
local raise = {}
for i = count + 1, #KEYS do
  local value = read_counter(KEYS[i])
  if value == nil then
    return 0
  end
  if value == false or value < fence then
    raise[#raise + 1] = i
  end
end
for _, i in ipairs(raise) do
  store_fence(i, i, fence, ARGV[3])
end
return 1
