-- Shared by the scripts that say `-- include: capacity_pool` (after call_chunked; lua/README.md,
-- "Limits"; a take's entry unit by unit: lua/capacity_units.lua). A pool of reservations of a queue (its own hash tag `{queue}`): what a take
-- holds is ONE entry for all its units, not one member per unit.
--   pool (sorted set): entry -> deadline (epoch ms, the caller's clock). There are two
--     kinds of entry. `<holder>` is a take: `holder` ends with '~', and its units are named
--     <holder>1 .. <holder><granted>. `<holder><k>` is unit k alone, moved out of its
--     take's entry by an extension (lua/capacity_extend.lua).
--   counts (hash): '~held' -> the units the pool's entries hold (the sum of their counts,
--     0 when the pool is empty); per take entry, `<holder>` -> '<granted>|<count>|<bitmap>':
--     `count` of its units are still in it; bit k-1 of `bitmap` is set once unit k has left
--     it (given back, or moved to an entry of its own). A unit entry is not in this hash: it
--     holds one unit.
-- A unit leaves its entry at most once (its bit), so giving back is idempotent per unit:
-- an ack racing the reaper on one lease, or a call repeated after a lost reply, frees it
-- once. An entry whose deadline has passed counts for nothing and is swept (its count
-- subtracted) by the next take, at most SWEEP_AT_MOST entries per take (the rest by the
-- takes after it: until then they count, so a take grants less, never more); one whose
-- count reaches 0 is removed. No key has a TTL. A '~held' that is missing (a pool written by
-- an older tierq, one member per unit and no counts) is recounted, once, as the number of
-- its members (ZCARD). The scripts read what they need with one HMGET and write with one
-- command of each kind: a claim's take or an ack's give-back is a handful of commands
-- whatever its size, and none reads the whole pool.

local SWEEP_AT_MOST = 1000

-- The count of a take's entry, from its value.
local function pool_count(value)
  return tonumber(string.match(value, '^%d+|(%d+)|'))
end

-- The units held by `n` entries whose values (as HMGET returned them) are given.
local function pool_units(values, n)
  local units = 0
  for i = 1, n do
    local value = values[i]
    units = units + (value and pool_count(value) or 1)
  end
  return units
end

-- '~held' recounted (when it is missing): every take writes '~held' with its entry, so a
-- pool without it holds only an older tierq's entries, one unit each.
local function pool_recount(pool, counts)
  return redis.call('ZCARD', pool)
end

-- The first SWEEP_AT_MOST entries whose deadline is at or before `now`.
local function pool_expired(pool, now)
  return redis.call('ZRANGEBYSCORE', pool, '-inf', now, 'LIMIT', 0, SWEEP_AT_MOST)
end

-- Removes entries whose deadline is at or before `now` (at most SWEEP_AT_MOST); returns
-- the units they held.
local function pool_sweep(pool, counts, now)
  local expired = pool_expired(pool, now)
  if #expired == 0 then return 0 end
  local units = pool_units(call_chunked('HMGET', counts, expired), #expired)
  call_chunked('HDEL', counts, expired)
  call_chunked('ZREM', pool, expired)
  return units
end

-- The units held by entries whose deadline is after `now` (changes nothing; entries past
-- their deadline beyond the first SWEEP_AT_MOST still count).
local function pool_live(pool, counts, now)
  local held = tonumber(redis.call('HGET', counts, '~held'))
  if held == nil then
    return redis.call('ZCOUNT', pool, '(' .. now, '+inf')  -- one unit per entry (above)
  end
  local expired = pool_expired(pool, now)
  if #expired > 0 then
    held = held - pool_units(call_chunked('HMGET', counts, expired), #expired)
  end
  return math.max(held, 0)
end
