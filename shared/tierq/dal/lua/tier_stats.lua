-- Sizes of one (queue, tenant)'s warm tier.
-- KEYS: 1 ready, 2 leased, 3 meta
-- Returns { ready, leased, mode, ready_bytes } (ready_bytes: the meta field `bytes`,
-- lua/warm_bytes.lua; as stored, 0 when missing)
return { redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
         redis.call('HGET', KEYS[3], 'mode') or 'cold',
         tonumber(redis.call('HGET', KEYS[3], 'bytes') or '0') }
