-- Shared by the scripts that say `-- include: call_chunked` (WarmTier puts this text
-- before theirs when it loads them; scripts cannot call each other).
-- unpack() puts every value on the Lua C stack (~8000 slots): feed a variadic command at
-- most CHUNK values at a time. CHUNK is even, so a score/member or field/value pair never
-- straddles two calls, and with the command and its key a call stays within ElastiCache
-- Serverless's 3,999 arguments. Returns the array replies concatenated, in order (HMGET, ZMSCORE);
-- an empty args list sends nothing. ``first`` and ``last`` (optional) send only
-- args[first..last], e.g. a range of ARGV as the caller received it.
local CHUNK = 3996
local function call_chunked(command, key, args, first, last)
  first = first or 1
  last = last or #args
  if last < first then return {} end
  if last - first < CHUNK then  -- the common case: one call, its reply as it is
    local reply = redis.call(command, key, unpack(args, first, last))
    if type(reply) == 'table' then return reply end
    return {}
  end
  local replies = {}
  local n_replies = 0
  for from = first, last, CHUNK do
    local reply = redis.call(command, key, unpack(args, from, math.min(from + CHUNK - 1, last)))
    if type(reply) == 'table' then
      for _, value in ipairs(reply) do
        n_replies = n_replies + 1
        replies[n_replies] = value
      end
    end
  end
  return replies
end
