#!lua flags=no-writes,allow-oom
-- How much of a limit is in use now (for views; changes nothing).
-- KEYS: 1 held (a queue's reservations, or a pair's leased set: both scored by deadline),
--       2 bucket (a token bucket's hash, lua/token_bucket.lua)
-- ARGV: 1 now_ms, 2 per_second (0: no bucket to read), 3 burst
-- Returns { held: members whose deadline is ahead, tokens in the bucket now as a string
--           ('' without a rate) }

-- include: token_bucket (lua/token_bucket.lua)

local held = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf')
local rate = tonumber(ARGV[2])
local tokens = ''
if rate > 0 then
  tokens = string.format('%.6f', bucket_peek(KEYS[2], rate, tonumber(ARGV[3])))
end
return { held, tokens }
