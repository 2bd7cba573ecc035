-- Shared by the scripts that say `-- include: call_chunked` (WarmTier puts this text
-- before theirs when it loads them; scripts cannot call each other).
-- unpack() puts every value on the Lua C stack (~8000 slots): feed a variadic command at
-- most CHUNK values at a time. CHUNK is even, so a score/member or field/value pair never
-- straddles two calls. Returns the array replies concatenated, in order (HMGET, ZMSCORE);
-- an empty args list sends nothing.
local CHUNK = 4000
local function call_chunked(command, key, args)
  local n = #args
  if n == 0 then return {} end
  if n <= CHUNK then  -- the common case: one call, its reply as it is
    local reply = redis.call(command, key, unpack(args))
    if type(reply) == 'table' then return reply end
    return {}
  end
  local replies = {}
  local n_replies = 0
  for first = 1, n, CHUNK do
    local reply = redis.call(command, key, unpack(args, first, math.min(first + CHUNK - 1, n)))
    if type(reply) == 'table' then
      for _, value in ipairs(reply) do
        n_replies = n_replies + 1
        replies[n_replies] = value
      end
    end
  end
  return replies
end
