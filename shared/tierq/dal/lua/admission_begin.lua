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
--       (0: no check), 7 its tasks, 8 their bytes, 9 stale_ms.
-- With a first task, a warm set that could not take it turns the queue cold here, as
-- push_ready does when it refuses. The caller then writes its rows cold at once, not warm
-- and then marked cold. The set counts as holding what it holds (warm_max tasks,
-- warm_max_bytes bytes; an empty set takes one task whatever its size) plus what the
-- admissions that found room before this one are about to push. A set that can take the
-- first task is left warm, and the caller's tasks and bytes are recorded in the meta field
-- `rsv:<token>` until its push (push_ready.lua), which may then come after the pair has
-- turned cold; a record older than stale_ms is dropped (its caller stopped).
-- Returns the mode: 'warm' or 'cold'.

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)

local RESERVED = 'rsv:'
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
  local now, stale = tonumber(ARGV[1]), tonumber(ARGV[9])
  -- what the admissions that found room are about to push (at most one per producer)
  local fields = redis.call('HGETALL', KEYS[1])
  local coming, coming_bytes = 0, 0
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, #RESERVED) == RESERVED then
      local at, n, b = string.match(fields[i + 1], '^(%d+)|(%d+)|(%d+)$')
      if at and tonumber(at) + stale >= now then
        coming = coming + tonumber(n)
        coming_bytes = coming_bytes + tonumber(b)
      else
        redis.call('HDEL', KEYS[1], fields[i])
      end
    end
  end
  local size = redis.call('ZCARD', KEYS[3])
  local taken = size + coming
  if taken >= tonumber(ARGV[4]) or (taken > 0 and warm_bytes(KEYS[1], KEYS[4], size)
      + coming_bytes + first > tonumber(ARGV[5])) then
    mode = 'cold'
    redis.call('HSET', KEYS[1], 'mode', 'cold')
  else
    redis.call('HSET', KEYS[1], RESERVED .. ARGV[2], ARGV[1] .. '|' .. ARGV[7] .. '|' .. ARGV[8])
  end
end
if mode == 'cold' then
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
end
return mode
