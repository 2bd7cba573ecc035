-- Push ready tasks into the warm set of one (queue, tenant), never beyond warm_max.
-- KEYS: 1 ready, 2 data, 3 meta, 4 inflight
-- ARGV: 1 warm_max, 2 kind ('enqueue' | 'promote' | 'restore'), 3 now_ms, 4 admission token,
--       then triples: id, score, blob
--   enqueue: new ready work; refused outright while the queue is in cold mode (hysteresis).
--   promote: the cold -> warm mover; restore: the reconciler re-pushing rows Valkey lost.
--            Both only need room: they are the oldest work of their line.
-- A task already in the ready set keeps its place (ZADD NX semantics).
-- Anything refused makes the queue cold and registers the caller's admission as in flight
-- (the caller marks those rows cold in Postgres, then calls admission_end).
-- Returns { mode_after, refused_id, ... }
local warm_max = tonumber(ARGV[1])
local kind = ARGV[2]
local mode = redis.call('HGET', KEYS[3], 'mode')
if not mode then
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold', 'epoch', 0)
end
local size = redis.call('ZCARD', KEYS[1])
local refuse_all = (kind == 'enqueue' and mode == 'cold')
local refused = {}
for i = 5, #ARGV, 3 do
  local id = ARGV[i]
  if refuse_all then
    refused[#refused + 1] = id
  elseif redis.call('ZSCORE', KEYS[1], id) then
    -- already waiting in line: it keeps its place
  elseif size < warm_max then
    redis.call('ZADD', KEYS[1], ARGV[i + 1], id)
    redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    size = size + 1
  else
    refused[#refused + 1] = id
  end
end
if #refused > 0 then
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold')
  redis.call('HINCRBY', KEYS[3], 'epoch', 1)
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
elseif kind == 'enqueue' and mode == 'warm' and size >= warm_max then
  -- the warm set reached 100% of warm_max: what comes next goes cold
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold')
  redis.call('HINCRBY', KEYS[3], 'epoch', 1)
end
table.insert(refused, 1, mode)
return refused
