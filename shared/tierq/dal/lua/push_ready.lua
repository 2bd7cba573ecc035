-- Push ready tasks into the warm set of one (queue, tenant), never beyond warm_max.
-- KEYS: 1 ready, 2 data, 3 meta, 4 inflight
-- ARGV: 1 warm_max, 2 kind ('new' | 'enqueue' | 'promote' | 'restore'), 3 now_ms,
--       4 admission token, then triples: id, score, blob
--   enqueue: work that became ready (due, retried, replayed); refused outright while the
--            queue is in cold mode (hysteresis).
--   new: tasks created by this very enqueue, as 'enqueue'; their ids were just made, so no
--        copy can be in line already and the ZMSCORE look-up is skipped.
--   promote: the cold -> warm mover; restore: the reconciler re-pushing rows Valkey lost.
--            Both only need room: they are the oldest work of their line.
-- A task already in the ready set keeps its place (ZADD NX semantics); so does the second
-- copy of an id listed twice (the first copy is the one accepted).
-- Anything refused makes the queue cold and registers the caller's admission as in flight
-- (the caller marks those rows cold in Postgres, then calls admission_end).
-- Returns { mode_after, refused_id, ... }
-- Valkey work for the tasks: one ZMSCORE (Redis >= 6.2), then one ZADD and one HSET of the
-- accepted ones, however many triples.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)

local warm_max = tonumber(ARGV[1])
local kind = ARGV[2]
local mode = redis.call('HGET', KEYS[3], 'mode')
if not mode then
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold', 'epoch', 0)
end
local size = redis.call('ZCARD', KEYS[1])
local admits = (kind == 'enqueue' or kind == 'new')
local refuse_all = (admits and mode == 'cold')
local refused = {}
if refuse_all then
  for i = 5, #ARGV, 3 do refused[#refused + 1] = ARGV[i] end
else
  local ids = {}
  for i = 5, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
  local in_line = {}
  if kind ~= 'new' then
    in_line = call_chunked('ZMSCORE', KEYS[1], ids)   -- in the order of ids
  end
  local accepted = {}      -- id -> true: a later copy in this batch finds it in line
  local ready_args = {}    -- score, id, ...
  local data_args = {}     -- id, blob, ...
  for k = 1, #ids do
    local id = ids[k]
    if in_line[k] or accepted[id] then
      -- already waiting in line: it keeps its place
    elseif size < warm_max then
      local i = 5 + 3 * (k - 1)
      accepted[id] = true
      ready_args[#ready_args + 1] = ARGV[i + 1]
      ready_args[#ready_args + 1] = id
      data_args[#data_args + 1] = id
      data_args[#data_args + 1] = ARGV[i + 2]
      size = size + 1
    else
      refused[#refused + 1] = id
    end
  end
  call_chunked('ZADD', KEYS[1], ready_args)
  call_chunked('HSET', KEYS[2], data_args)
end
if #refused > 0 then
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold')
  redis.call('HINCRBY', KEYS[3], 'epoch', 1)
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
elseif admits and mode == 'warm' and size >= warm_max then
  -- the warm set reached 100% of warm_max: what comes next goes cold
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold')
  redis.call('HINCRBY', KEYS[3], 'epoch', 1)
end
table.insert(refused, 1, mode)
return refused
