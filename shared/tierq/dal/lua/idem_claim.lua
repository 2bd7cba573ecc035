-- Claim an idempotency key's record (tierq.logic.idempotency: the keys of claims and of the
-- lease outcomes): one hash per key, its own hash tag, so one slot in cluster mode.
-- Not allow-oom: out of memory, the request runs without a record (WarmTierFull).
--
-- KEYS[1]  tq:idem:{<scope hex>}   hash: f body fingerprint, o owner, s/b status and body
-- ARGV[1]  the request body's fingerprint
-- ARGV[2]  the claim's owner (a random token)
-- ARGV[3]  how long the record is held while the request runs (ms)
-- Returns  {1} when the record is new (this caller runs the request); else {0, f, s, b} of
--          the record (s and b absent while the first request still runs).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'f', ARGV[1], 'o', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
return {0, redis.call('HGET', KEYS[1], 'f'), redis.call('HGET', KEYS[1], 's'),
        redis.call('HGET', KEYS[1], 'b')}
