-- Drop leases whose token still matches: the last step of ack, nack and lease expiry, after
-- Postgres has recorded the outcome. (A claim already took the task's data out of Valkey; a
-- retry pushes fresh data, which this must not touch.)
-- KEYS: 1 leased, 2 leases
-- ARGV: pairs: id, token
-- Returns how many leases were dropped.
-- Valkey work: one HMGET of the leases, then one ZREM and one HDEL of the matching ids,
-- however many pairs.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)

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
