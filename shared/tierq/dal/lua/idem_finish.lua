-- Keep the answer of a request in its idempotency record (lua/idem_claim.lua),
-- when the caller still owns it: a record that expired and was claimed again is another's.
--
-- KEYS[1]  tq:idem:{<scope hex>}
-- ARGV[1]  the owner the claim gave
-- ARGV[2]  the HTTP status to answer a repeat with
-- ARGV[3]  the response body (JSON)
-- ARGV[4]  how long the record is kept (ms)
-- Returns  1 when kept, 0 when the record is not the owner's.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', ARGV[2], 'b', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
