#!lua flags=allow-oom
-- Start admitting ready tasks to one (queue, tenant): learn its mode; in cold mode register
-- the admission as in flight, so the queue cannot return to warm mode before the caller's
-- cold rows are committed (see admission_mode.lua).
-- Allowed while Valkey is out of memory (a few bytes of meta): work admitted cold needs
-- only Postgres, so enqueues keep working while the cache is full.
-- KEYS: 1 meta, 2 inflight
-- ARGV: 1 now_ms, 2 admission token, 3 'force_cold' to turn the queue cold first (bulk
--       loads land cold whatever the mode, so later work cannot jump ahead of them)
-- Returns the mode: 'warm' or 'cold'.
local mode = redis.call('HGET', KEYS[1], 'mode')
if not mode then
  mode = 'cold'
  redis.call('HSET', KEYS[1], 'mode', 'cold', 'epoch', 0)
end
if ARGV[3] == 'force_cold' then
  mode = 'cold'
  redis.call('HSET', KEYS[1], 'mode', 'cold')
end
if mode == 'cold' then
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
end
return mode
