#!lua flags=allow-oom
-- Observe a (queue, tenant)'s tier mode, or flip it back to warm.
-- Called through `AdmissionMode` (dal/lua_calls.py):
-- | KEYS | ready, meta, inflight, data                                                      |
-- | ARGV | op ('observe' or 'flip'), now_ms, stale_ms, warm_max, expected_epoch (flip), warm_max_bytes |
-- Admissions in flight for longer than stale_ms belonged to a crashed caller: dropped (the
-- reconciler re-dispatches whatever rows they left behind).
-- flip succeeds only if the mode is cold, no admission is in flight, the epoch is the one
-- observed before the caller checked Postgres for cold rows, and the warm set is at or
-- below 80% of warm_max and of warm_max_bytes.
-- Allowed while Valkey is out of memory: it writes a few bytes of meta at most, and the
-- cold -> warm mover must still see the mode.
-- Returns { mode, epoch, inflight, ready_size, flipped (0|1), ready_bytes }

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[3]))
local mode = redis.call('HGET', KEYS[2], 'mode')
if not mode then
  mode = 'cold'
  redis.call('HSET', KEYS[2], 'mode', 'cold', 'epoch', 0)
end
local epoch = redis.call('HGET', KEYS[2], 'epoch') or '0'
local inflight = redis.call('ZCARD', KEYS[3])
local size = redis.call('ZCARD', KEYS[1])
local bytes = warm_bytes(KEYS[2], KEYS[4], size, true)
local flipped = 0
if ARGV[1] == 'flip' and mode == 'cold' and epoch == ARGV[5] and inflight == 0
    and size * 10 <= tonumber(ARGV[4]) * 8 and bytes * 10 <= tonumber(ARGV[6]) * 8 then
  mode = 'warm'
  redis.call('HSET', KEYS[2], 'mode', 'warm')
  flipped = 1
end
return { mode, epoch, inflight, size, flipped, bytes }
