-- Shared by the scripts that say `-- include: capacity_pool` (lua/README.md, "Limits").
-- A pool of reservations of a queue (its own hash tag `{queue}`): what a take holds is
-- ONE entry for all its units, not one member per unit.
--   pool (sorted set): entry -> deadline (epoch ms, the caller's clock). Entries are
--     `<holder>` (a take: `holder` ends with '~', its units are named <holder>1 ..
--     <holder><granted>) and `<holder><k>` (unit k alone: moved out of its take's entry
--     by an extension, lua/capacity_extend.lua).
--   counts (hash): '~held' -> the units the pool's entries hold (the sum of their counts);
--     per take entry, `<holder>` -> '<granted>|<count>|<bitmap>': `count` of its units
--     are still in it; bit k-1 of `bitmap` is set once unit k has left it (given back, or
--     moved to an entry of its own). A unit entry is not in this hash: it holds one unit.
-- A unit leaves its entry at most once (its bit), so giving back is idempotent per unit:
-- an ack racing the reaper on one lease, or a call repeated after a lost reply, frees it
-- once. An entry whose deadline has passed is no longer counted and is swept (its count
-- subtracted) by the next take; one whose count reaches 0 is removed. No key has a TTL;
-- `counts` is deleted whenever the pool is empty. A '~held' that is missing while the pool
-- is not empty (written by an older tierq, one member per unit) is recounted, once.

local pool_band, pool_bor, pool_lshift = bit.band, bit.bor, bit.lshift

local function pool_entry(value)
  local granted, count, at = string.match(value, '^(%d+)|(%d+)|()')
  return tonumber(granted), tonumber(count), string.sub(value, at)
end

local function pool_value(granted, count, bytes, n_bytes)
  local parts = { granted .. '|' .. count .. '|' }
  for from = 1, n_bytes, 4000 do  -- string.char takes its values on the Lua C stack
    parts[#parts + 1] = string.char(unpack(bytes, from, math.min(from + 3999, n_bytes)))
  end
  return table.concat(parts)
end

local function pool_bytes(bitmap)
  local bytes = {}
  local n = #bitmap
  for from = 1, n, 4000 do
    local chunk = { string.byte(bitmap, from, math.min(from + 3999, n)) }
    for i = 1, #chunk do bytes[from + i - 1] = chunk[i] end
  end
  return bytes, n
end

-- The units held by the given entries (a unit entry, not in `counts`, holds one).
local function pool_count_of(counts, entries)
  local n = 0
  local values = call_chunked('HMGET', counts, entries)
  for i = 1, #entries do
    local value = values[i]
    if value then
      local _, count = pool_entry(value)
      n = n + count
    else
      n = n + 1
    end
  end
  return n
end

-- The units the pool's entries hold, expired or not ('~held', recounted when missing).
local function pool_held(pool, counts)
  local held = tonumber(redis.call('HGET', counts, '~held'))
  if held == nil then
    held = pool_count_of(counts, redis.call('ZRANGE', pool, 0, -1))
  end
  return held
end

-- The units held now, after sweeping the entries whose deadline is at or before `now`.
local function pool_sweep(pool, counts, now)
  local held = pool_held(pool, counts)
  local expired = redis.call('ZRANGEBYSCORE', pool, '-inf', now)
  if #expired > 0 then
    held = held - pool_count_of(counts, expired)
    call_chunked('HDEL', counts, expired)
    redis.call('ZREMRANGEBYSCORE', pool, '-inf', now)
  end
  return held
end

-- The units held by entries whose deadline is after `now` (changes nothing).
local function pool_live(pool, counts, now)
  local held = tonumber(redis.call('HGET', counts, '~held'))
  if held == nil then
    return pool_count_of(counts, redis.call('ZRANGEBYSCORE', pool, '(' .. now, '+inf'))
  end
  local expired = redis.call('ZRANGEBYSCORE', pool, '-inf', now)
  if #expired > 0 then held = held - pool_count_of(counts, expired) end
  return held
end

-- (never below 0: a pool written by an older tierq alongside may have been miscounted)
local function pool_save(pool, counts, held)
  if redis.call('ZCARD', pool) == 0 then
    redis.call('DEL', counts)
  else
    redis.call('HSET', counts, '~held', math.max(held, 0))
  end
end

-- A take of `n` units (n >= 1) by `holder` until `deadline`; returns the units held after.
-- (It saves the count: no pool_save needed after it.)
local function pool_add(pool, counts, held, holder, n, deadline)
  local before = redis.call('HGET', counts, holder)
  if before then  -- the same take again (a call repeated after a lost reply): replaced
    local _, count = pool_entry(before)
    held = held - count
  end
  held = math.max(held, 0) + n
  redis.call('ZADD', pool, deadline, holder)
  redis.call('HSET', counts, holder, n .. '|' .. n .. '|', '~held', held)
  return held
end

-- Units of `holder`'s entry past the first `used` go back (a take that went partly
-- unused); returns how many were given back. Repeating it gives back nothing more.
local function pool_shrink(pool, counts, holder, used)
  local value = redis.call('HGET', counts, holder)
  if not value then return 0 end
  local granted, count, bitmap = pool_entry(value)
  if used >= granted then return 0 end
  local bytes, n_bytes = pool_bytes(bitmap)
  local back = 0
  for k = used + 1, granted do
    local byte = bytes[math.floor((k - 1) / 8) + 1] or 0
    if pool_band(byte, pool_lshift(1, (k - 1) % 8)) == 0 then back = back + 1 end
  end
  count = count - back
  if count <= 0 then
    redis.call('ZREM', pool, holder)
    redis.call('HDEL', counts, holder)
  else
    n_bytes = math.min(n_bytes, math.ceil(used / 8))
    redis.call('HSET', counts, holder, pool_value(used, count, bytes, n_bytes))
  end
  return back
end

-- Take units out of `holder`'s entry: for each k of `ks` (numbers) still in it,
-- `on_unit(k)` is called and the unit leaves the entry (its bit set, the count lowered; an
-- entry left empty is removed); each k that is not in it (it left before, or there is no
-- such entry) goes to `elsewhere(k)`. Returns the number of units taken out.
local function pool_take_units(pool, counts, holder, ks, on_unit, elsewhere)
  local value = redis.call('HGET', counts, holder)
  if not value then
    for j = 1, #ks do elsewhere(ks[j]) end
    return 0
  end
  local granted, count, bitmap = pool_entry(value)
  local bytes, n_bytes = pool_bytes(bitmap)
  local out = 0
  for j = 1, #ks do
    local k = ks[j]
    local taken = false
    if k >= 1 and k <= granted then
      local at = math.floor((k - 1) / 8) + 1
      local mask = pool_lshift(1, (k - 1) % 8)
      local byte = bytes[at] or 0
      if pool_band(byte, mask) == 0 then
        for fill = n_bytes + 1, at - 1 do bytes[fill] = 0 end
        if at > n_bytes then n_bytes = at end
        bytes[at] = pool_bor(byte, mask)
        out = out + 1
        taken = true
        on_unit(k)
      end
    end
    if not taken then elsewhere(k) end
  end
  if out > 0 then
    count = count - out
    if count <= 0 then
      redis.call('ZREM', pool, holder)
      redis.call('HDEL', counts, holder)
    else
      redis.call('HSET', counts, holder, pool_value(granted, count, bytes, n_bytes))
    end
  end
  return out
end

-- The groups of ARGV from `first` on: `<holder>`, m, then m numbers; calls
-- `each(holder, numbers)` per group.
local function pool_groups(args, first, each)
  local i = first
  while i <= #args do
    local m = tonumber(args[i + 1])
    local ks = {}
    for j = 1, m do ks[j] = tonumber(args[i + 1 + j]) or 0 end
    each(args[i], ks)
    i = i + 2 + m
  end
end
