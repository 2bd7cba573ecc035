-- Shared by the scripts that say `-- include: token_bucket` (lua/README.md, "Limits").
-- A token bucket kept in a hash: `tokens` (a float, at most `burst`) and `at` (when it was
-- last counted: microseconds of the server's clock, `TIME`, never a caller's). It refills
-- at `rate` tokens a second; taking n tasks takes n tokens. A missing hash is a full bucket.
-- A clock that steps back (a failover to a replica with another clock) refills nothing
-- until it has caught up with `at` again: it never hands out more than the rate.
-- (read once per script run: a claim that takes the queue's tokens and the tenant's reads
-- one clock)
local bucket_time_us = nil
local function bucket_now_us()
  if bucket_time_us == nil then
    local t = redis.call('TIME')
    bucket_time_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return bucket_time_us
end

-- Take up to `want` tokens; returns (taken, retry_ms): retry_ms is 0 when all were taken,
-- else how long until the next whole token.
local function bucket_take(key, want, rate, burst)
  local now = bucket_now_us()
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1])
  local at = tonumber(state[2])
  if tokens == nil or at == nil then
    tokens = burst
    at = now
  end
  if now > at then
    tokens = tokens + (now - at) * rate / 1000000
    at = now
  end
  if tokens > burst then tokens = burst end
  local taken = math.floor(tokens)
  if taken > want then taken = want end
  if taken < 0 then taken = 0 end
  tokens = tokens - taken
  local retry = 0
  if taken < want then
    retry = math.ceil((math.floor(tokens) + 1 - tokens) * 1000 / rate)
    if retry < 1 then retry = 1 end
  end
  redis.call('HSET', key, 'tokens', string.format('%.17g', tokens),
             'at', string.format('%d', at))
  return taken, retry
end

-- Give back `n` tokens taken for tasks that were not handed out (at most up to `burst`).
local function bucket_give(key, n, burst)
  if n <= 0 then return end
  local tokens = tonumber(redis.call('HGET', key, 'tokens'))
  if tokens == nil then return end  -- a missing bucket is full already
  tokens = tokens + n
  if tokens > burst then tokens = burst end
  redis.call('HSET', key, 'tokens', string.format('%.17g', tokens))
end

-- The tokens the bucket holds now, without taking any (-1: no bucket, so full).
local function bucket_peek(key, rate, burst)
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1])
  local at = tonumber(state[2])
  if tokens == nil or at == nil then return burst end
  local now = bucket_now_us()
  if now > at then tokens = tokens + (now - at) * rate / 1000000 end
  if tokens > burst then tokens = burst end
  return tokens
end
