-- sharded.lua: how a cluster's scripts announce. scripts/lua.rs makes a second variant of each
-- script that announces anything, with this function in place of helpers.lua's
-- `announce_on` of the same name and arguments: shard channels (SPUBLISH), which stay on
-- the key's shard instead of crossing the cluster bus to every node.
--
-- The channel of `key` named by `suffix` is in the key's hash slot (as token.rs's
-- `Channels::name` names it): the key and the suffix when the key has a hash tag (a '{'
-- and, after it, a '}' with something between), an untagged key in braces otherwise. A
-- key with a '}' but no tag cannot be named so: its channels keep the plain name and a
-- PUBLISH (its subscribers SUBSCRIBE). A server without shard channels (Redis 6.2) gets
-- a PUBLISH, as its subscribers SUBSCRIBE there too. One function, its rules inline: Lua
-- creates every function a script defines on every call.
local function announce_on(key, suffix, message)
  local open = string.find(key, '{', 1, true)
  local close = open and string.find(key, '}', open + 1, true)
  local channel = key .. suffix
  if not (close and close > open + 1) then
    if string.find(key, '}', 1, true) then
      redis.pcall('publish', channel, message)
      return
    end
    channel = '{' .. key .. '}' .. suffix
  end
  local sent = redis.pcall('spublish', channel, message)
  if type(sent) == 'table' and sent.err then
    redis.pcall('publish', channel, message)
  end
end
