-- Shared by the scripts that say `-- include: capacity_take` (after call_chunked,
-- token_bucket and capacity_pool): a take of a queue's capacity, on the queue's own keys.
-- Up to `want` units: at most `max_held` (0: no count limit) held at once in the pool
-- (lua/capacity_pool.lua) — one entry `holder` for all of them, until `deadline` — and
-- whole tokens of the queue's bucket at `rate` (0: none; lua/token_bucket.lua).
-- Returns (taken, retry_ms, held after): retry_ms is 0 when all of `want` was taken; else
-- when trying again is worth it: the next token of the rate, or for the count the earliest
-- deadline in the pool (at most 1 s: a finished lease frees capacity sooner).
-- Valkey work with a count limit: HMGET, ZRANGEBYSCORE (the sweep), ZADD, HSET.
local function capacity_take(pool, counts, bucket, want, now, deadline, holder, max_held,
                             rate, burst)
  local taken = want
  local retry = 0
  local held = 0
  local dirty = false
  if max_held > 0 then
    local state = redis.call('HMGET', counts, '~held', holder)
    held = tonumber(state[1])
    if held == nil then
      held = pool_recount(pool, counts)
      dirty = true
    end
    if state[2] and redis.call('ZSCORE', pool, holder) then
      -- the same take again (a call repeated after a lost reply): it replaces the first
      held = held - pool_count(state[2])
    end
    local swept = pool_sweep(pool, counts, now)
    if swept > 0 then
      held = held - swept
      dirty = true
    end
    held = math.max(held, 0)
    local room = max_held - held
    if room < taken then
      taken = math.max(room, 0)
      local first = redis.call('ZRANGE', pool, 0, 0, 'WITHSCORES')
      retry = 1000
      if first[2] then retry = math.max(1, math.min(1000, tonumber(first[2]) - now)) end
    end
  end
  if rate > 0 and taken > 0 then
    local by_rate, rate_retry = bucket_take(bucket, taken, rate, burst)
    if by_rate < taken then retry = rate_retry end
    taken = by_rate
  end
  if max_held > 0 then
    if taken > 0 then
      held = held + taken
      redis.call('ZADD', pool, deadline, holder)
      redis.call('HSET', counts, holder, taken .. '|' .. taken .. '|', '~held', held)
    elseif dirty then
      redis.call('HSET', counts, '~held', held)
    end
  end
  return taken, retry, held
end
