#!lua flags=allow-oom
-- Enter tenants in a queue's ready-tenant index (logic/ready_tenants.py): ZADD of each at
-- score 0 (the index is read by name, ZRANGE ... BYLEX). Allowed while Valkey is out of
-- memory: a cold admission at maxmemory must still make its tenant visible to queue-wide
-- claims and the dispatcher, and an entry is a tenant's name and a few bytes.
-- KEYS: 1 the index (tq:{<queue>}:ready_tenants)
-- ARGV: tenants
-- Returns how many were new.

local args = {}
for i, tenant in ipairs(ARGV) do
  args[2 * i - 1] = 0
  args[2 * i] = tenant
end
local added = 0
-- pairs of score and member, 3,996 values a call: with ZADD and its key within
-- ElastiCache Serverless's 3,999 arguments (and Lua's unpack, ~8,000 values)
for start = 1, #args, 3996 do
  local stop = math.min(#args, start + 3995)
  added = added + redis.call('ZADD', KEYS[1], unpack(args, start, stop))
end
return added
