-- Drop leases whose token still matches: the last step of ack, nack and lease expiry, after
-- Postgres has recorded the outcome. (A claim already took the task's data out of Valkey; a
-- retry pushes fresh data, which this must not touch.)
-- KEYS: 1 leased, 2 leases
-- ARGV: pairs: id, token
-- Returns how many leases were dropped.
-- Valkey work: one HMGET of the leases, then one ZREM and one HDEL of the matching ids,
-- however many pairs.

-- unpack() puts every value on the Lua C stack (~8000 slots): feed variadic commands at
-- most CHUNK values at a time. Returns the array replies concatenated (for HMGET).
local CHUNK = 4000
local function call_chunked(command, key, args)
  local replies = {}
  for first = 1, #args, CHUNK do
    local reply = redis.call(command, key, unpack(args, first, math.min(first + CHUNK - 1, #args)))
    if type(reply) == 'table' then
      for _, value in ipairs(reply) do replies[#replies + 1] = value end
    end
  end
  return replies
end

local ids = {}
for i = 1, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local infos = call_chunked('HMGET', KEYS[2], ids)   -- in the order of ids
local dropped_ids = {}
-- An id listed twice counts once: the first matching pair drops the lease, and the
-- HMGET above cannot see that, so remember what this call already dropped.
local dropped = {}
for k = 1, #ids do
  local id = ids[k]
  local info = infos[k]
  if not dropped[id] and info
      and string.sub(info, 1, string.find(info, '|', 1, true) - 1) == ARGV[2 * k] then
    dropped[id] = true
    dropped_ids[#dropped_ids + 1] = id
  end
end
call_chunked('ZREM', KEYS[1], dropped_ids)
call_chunked('HDEL', KEYS[2], dropped_ids)
return #dropped_ids
