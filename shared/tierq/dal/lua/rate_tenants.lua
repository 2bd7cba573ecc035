#!lua
-- Throughput: note tenants of a queue as counting now, in the queue's index of tenants with
-- counts (a sorted set: tenant -> the server's second it was last noted at), and forget
-- those not noted for longer than the counts live. Callers note a tenant at most once a
-- minute, so the queue's view reads only the tenants counted in its window.
-- KEYS: 1 the queue's index (tq:{queue}:rate_tenants, a slot of its own)
-- ARGV: tenants
-- Returns the server's second (epoch seconds).
local KEEP_SECONDS = 1020
local now = tonumber(redis.call('TIME')[1])
for i = 1, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - KEEP_SECONDS))
redis.call('EXPIRE', KEYS[1], KEEP_SECONDS)
return now
