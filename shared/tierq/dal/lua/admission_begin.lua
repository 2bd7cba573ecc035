#!lua flags=allow-oom
-- Start admitting ready tasks to one (queue, tenant): learn its mode; in cold mode register
-- the admission as in flight, so the queue cannot return to warm mode before the caller's
-- cold rows are committed (see admission_mode.lua).
-- Allowed while Valkey is out of memory (a few bytes of meta): work admitted cold needs
-- only Postgres, so enqueues keep working while the cache is full.
-- KEYS: 1 meta, 2 inflight, 3 ready, 4 data.
-- ARGV: 1 now_ms, 2 admission token, 3 'force_cold' to turn the queue cold first (bulk
--       loads land cold whatever the mode, so later work cannot jump ahead of them),
--       4 warm_max, 5 warm_max_bytes, 6 the bytes of the first task the caller will push
--       (0: no check).
-- With a first task, a warm set that could not take it (warm_max tasks, or its bytes past
-- warm_max_bytes) turns the queue cold here, as push_ready does when it refuses. The
-- caller then writes its rows cold at once, not warm and then marked cold. An empty set
-- takes one task whatever its size, as in push_ready. A set that can take some of the
-- tasks is left warm: push_ready takes what fits and refuses the rest.
-- Returns the mode: 'warm' or 'cold'.

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)

local mode = redis.call('HGET', KEYS[1], 'mode')
if not mode then
  mode = 'cold'
  redis.call('HSET', KEYS[1], 'mode', 'cold', 'epoch', 0)
end
if ARGV[3] == 'force_cold' then
  mode = 'cold'
  redis.call('HSET', KEYS[1], 'mode', 'cold')
end
local first = tonumber(ARGV[6])
if mode == 'warm' and first > 0 then
  local size = redis.call('ZCARD', KEYS[3])
  if size >= tonumber(ARGV[4])
      or (size > 0 and warm_bytes(KEYS[1], KEYS[4], size) + first > tonumber(ARGV[5])) then
    mode = 'cold'
    redis.call('HSET', KEYS[1], 'mode', 'cold')
  end
end
if mode == 'cold' then
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
end
return mode
