#!lua flags=allow-oom
-- A long poll (a claim with wait_seconds > 0) asks for a place in one set of places: a
-- tenant caller's (at most `cap` per tenant), or every caller's (at most `cap` in all, below
-- the claim function's reserved concurrency): lua/README.md, "Tenant limits". A place is a
-- reservation that expires by itself at its deadline, so a function that dies holding one
-- leaks nothing; the claim gives it back (ZREM) when it ends.
--
-- KEYS[1]  tq:{~<tenant>}:polls, or tq:{~}:polls (every caller's)
--          sorted set: reservation -> deadline (ms, the server's clock)
-- ARGV[1]  cap (>= 1)
-- ARGV[2]  the reservation's id
-- ARGV[3]  how long it may be held (ms)
-- Returns  1 when the place is taken; 0 when `cap` unexpired places are held.
--
-- At most `cap` members (expired ones are dropped first); the key expires with its last
-- deadline. allow-oom: a full cache must not lift the cap.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local hold = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + hold, ARGV[2])
if redis.call('PTTL', KEYS[1]) < hold then
  redis.call('PEXPIRE', KEYS[1], hold)
end
return 1
