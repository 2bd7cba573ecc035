#!lua flags=no-writes,allow-oom
-- How much of a limit is in use now (for views; changes nothing).
-- KEYS: 1 held (a queue's pool of reservations, or a pair's leased set: both scored by
--       deadline), 2 bucket (a token bucket's hash, lua/token_bucket.lua),
--       3 (with a pool only) the pool's counts (lua/capacity_pool.lua)
-- ARGV: 1 now_ms, 2 per_second (0: no bucket to read), 3 burst
-- Returns { held: units of the pool, or members of the leased set, whose deadline is
--           ahead, tokens in the bucket now as a string ('' without a rate) }

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: token_bucket (lua/token_bucket.lua)
-- include: capacity_pool (lua/capacity_pool.lua)

local held
if KEYS[3] then
  held = math.max(pool_live(KEYS[1], KEYS[3], tonumber(ARGV[1])), 0)
else
  held = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf')
end
local rate = tonumber(ARGV[2])
local tokens = ''
if rate > 0 then
  tokens = string.format('%.6f', bucket_peek(KEYS[2], rate, tonumber(ARGV[3])))
end
return { held, tokens }
