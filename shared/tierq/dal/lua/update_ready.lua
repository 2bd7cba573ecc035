-- Replace the data of tasks already in the warm tier, in place (on_conflict = replace).
-- A task waiting in line keeps its seq; only a priority change moves it to its new bucket.
-- The meta field `bytes` follows the new data (lua/warm_bytes.lua). A replacement is not
-- refused for size (the task keeps its place in line; the request is bounded), but once
-- the data reaches warm_max_bytes the queue turns cold, so that new work waits cold.
-- Not allowed while Valkey is out of memory (it may grow the data): the caller then takes
-- the tasks out of the warm tier and sends them cold (logic/admission.update_warm).
-- KEYS: 1 ready, 2 data, 3 meta
-- ARGV: 1 warm_max_bytes, then triples: member, score (core/ordering.py place), blob
-- Returns how many were found.

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)

local bytes = warm_bytes(KEYS[3], KEYS[2], redis.call('ZCARD', KEYS[1]))
local found = 0
local grown = 0
for i = 2, #ARGV, 3 do
  local id = task_of(ARGV[i])
  local old = redis.call('HSTRLEN', KEYS[2], id)
  if old > 0 or waiting(KEYS[2], id) then
    redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    redis.call('ZADD', KEYS[1], 'XX', ARGV[i + 1], ARGV[i])
    grown = grown + #ARGV[i + 2] - old
    found = found + 1
  end
end
if found > 0 then
  add_warm_bytes(KEYS[3], grown)
  if bytes + grown >= tonumber(ARGV[1]) and redis.call('HGET', KEYS[3], 'mode') == 'warm' then
    redis.call('HSET', KEYS[3], 'mode', 'cold')
    redis.call('HINCRBY', KEYS[3], 'epoch', 1)
  end
end
return found
