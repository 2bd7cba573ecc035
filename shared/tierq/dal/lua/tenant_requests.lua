#!lua flags=allow-oom
-- include: token_bucket
-- One request of a tenant caller on the HTTP API: takes one token of the tenant's bucket
-- (lua/README.md, "Tenant limits"). The key has the tenant's own hash tag, no queue's.
--
-- KEYS[1]  tq:{~<tenant>}:requests   hash: tokens, at (lua/token_bucket.lua)
-- ARGV[1]  rate: requests a second (> 0)
-- ARGV[2]  burst: the bucket's size (>= 1)
-- Returns  0 when the request may go on; else the ms until the next whole token.
--
-- The key expires once the bucket would be full again (a missing bucket reads as full, so
-- nothing is lost with it): an idle tenant keeps nothing here. allow-oom: a full cache must
-- not lift the limit; the hash is a few dozen bytes.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local _, retry = bucket_take(KEYS[1], 1, rate, burst)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return retry
