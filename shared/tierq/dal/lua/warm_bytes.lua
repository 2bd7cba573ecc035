-- Shared by the scripts that say `-- include: warm_bytes` (see lua/README.md).
-- The bytes of task data a (queue, tenant)'s warm tier holds are counted in the field
-- `bytes` of its meta hash: the sum of the lengths of the data hash's values (the
-- ~encoding field aside), kept by every script that adds or removes a value, so that
-- push_ready can enforce warm_max_bytes atomically without reading the data.
-- warm_bytes() heals the counter:
-- | the counter                          | warm_bytes()                                    |
-- | any, with an empty ready set         | 0: no data                                      |
-- | missing (written before the counter existed) or negative (drift), data hash of at most RECOUNT_UNKNOWN_AT_MOST fields | recounted from the data hash, once (a recount reads every field: no script reads a large set) |
-- | the same, a larger data hash         | UNKNOWN_BYTES, not stored: the pair goes cold and nothing is promoted until claims have emptied the set or brought its data down to that many fields | With
-- ``recount_small``, any counter of a warm set of at most RECOUNT_AT_MOST tasks is
-- recounted (cheap; the mover's observations pass it, so a counter that drifted upwards
-- heals when the set runs low, not only once it is empty).
local BYTES_FIELD = 'bytes'
local RECOUNT_AT_MOST = 64
local RECOUNT_UNKNOWN_AT_MOST = 512
local UNKNOWN_BYTES = 2 ^ 50
local function warm_bytes(meta, data, ready_size, recount_small)
  local stored = tonumber(redis.call('HGET', meta, BYTES_FIELD) or '')
  if ready_size == 0 then
    if stored and stored ~= 0 then redis.call('HSET', meta, BYTES_FIELD, 0) end
    return 0
  end
  if stored and stored >= 0 and not (recount_small and ready_size <= RECOUNT_AT_MOST) then
    return stored
  end
  if redis.call('HLEN', data) > RECOUNT_UNKNOWN_AT_MOST then
    if stored and stored >= 0 then return stored end  -- (a small set's recount: not now)
    return UNKNOWN_BYTES
  end
  local total = 0
  for _, field in ipairs(redis.call('HKEYS', data)) do
    if field ~= '~encoding' then total = total + redis.call('HSTRLEN', data, field) end
  end
  if total ~= stored then redis.call('HSET', meta, BYTES_FIELD, total) end
  return total
end
local function add_warm_bytes(meta, delta)
  if delta ~= 0 then redis.call('HINCRBY', meta, BYTES_FIELD, delta) end
end
