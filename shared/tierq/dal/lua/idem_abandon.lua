-- Drop an idempotency record whose request failed (lua/idem_claim.lua), when the
-- caller still owns it, so that a retry runs the request again.
--
-- KEYS[1]  tq:idem:{<scope hex>}
-- ARGV[1]  the owner the claim gave
-- Returns  1 when dropped, 0 when the record is not the owner's.
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
