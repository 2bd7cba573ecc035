#!lua flags=allow-oom
-- Remove tasks from the warm tier entirely (cancel, replace into the future, purge).
-- Allowed while Valkey is out of memory: it only frees memory.
-- KEYS: 1 ready, 2 data, 3 leased, 4 meta
-- ARGV: the tasks' ready-set members (core/ordering.py place: their data and leases are
--       found by the id in the member)
-- Returns how many were ready or leased.

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)

local wanted = {}
local removed = 0
local freed = 0
for _, member in ipairs(ARGV) do
  local id = task_of(member)
  wanted[id] = true
  removed = removed + redis.call('ZREM', KEYS[1], member)
  freed = freed + redis.call('HSTRLEN', KEYS[2], id)
  redis.call('HDEL', KEYS[2], id)
end
add_warm_bytes(KEYS[4], -freed)
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if wanted[string.match(member, '^[^|]*')] then
    removed = removed + redis.call('ZREM', KEYS[3], member)
  end
end
return removed
