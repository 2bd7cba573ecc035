-- Sizes of one (queue, tenant)'s warm tier.
-- KEYS: 1 ready, 2 leased, 3 meta
-- Returns { ready, leased, mode }
return { redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
         redis.call('HGET', KEYS[3], 'mode') or 'cold' }
