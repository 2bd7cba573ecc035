#!lua flags=allow-oom
-- Give back reservations of a queue's pool (lua/capacity_pool.lua): units whose lease or
-- call has ended (an ack, nack, release, expiry) or that went unused. Each unit leaves
-- its take's entry at most once, so giving one back twice (an ack racing the reaper on one
-- lease, a call repeated after a lost reply) frees it once; a unit that an extension moved
-- to an entry of its own is freed by removing that entry. An entry left with no unit is
-- removed. (Expired entries are left to the next take's sweep: what they hold is not
-- counted any more either way.)
-- Allowed while Valkey is out of memory: it only frees.
-- KEYS: 1 pool (sorted set), 2 counts (hash)
-- ARGV: groups: holder (a take's entry), m, then m unit numbers k (unit holder .. k)
-- Returns the number of units given back (not given back before).
-- Valkey work for units of takes still in their entries: HMGET, then at most one ZREM,
-- HDEL and HSET, however many units and takes.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: capacity_pool (lua/capacity_pool.lua)
-- include: capacity_units (lua/capacity_units.lua)

local pool = KEYS[1]
local counts = KEYS[2]
local groups = pool_groups(ARGV, 1)
local fields = { '~held' }
for i = 1, #groups do fields[i + 1] = groups[i].holder end
local values = call_chunked('HMGET', counts, fields)
local held = tonumber(values[1])
local recounted = held == nil
if recounted then held = pool_recount(pool, counts) end

local freed = 0
local set, n_set = {}, 0      -- field, value, ... of counts
local gone, n_gone = {}, 0    -- takes left with no unit
local alone, n_alone = {}, 0  -- units not in their take's entry: maybe entries of their own
for i = 1, #groups do
  local holder = groups[i].holder
  local ks = groups[i].ks
  local value = values[i + 1]
  local whole = false
  if value then
    -- nothing has left the take yet and every unit of it is named (an ack of a whole
    -- claim): it goes, with no bitmap to read or write
    local granted, count, at = string.match(value, '^(%d+)|(%d+)|()')
    count = tonumber(count)
    if at > #value and #ks == count and tonumber(granted) == count then
      local seen = {}
      whole = true
      for j = 1, count do
        local k = ks[j]
        if k < 1 or k > count or seen[k] then
          whole = false
          break
        end
        seen[k] = true
      end
      if whole then
        freed = freed + count
        n_gone = n_gone + 1
        gone[n_gone] = holder
      end
    end
  end
  local entry = not whole and value and pool_open(value)
  if not whole then
    for j = 1, #ks do
      if entry and pool_take_unit(entry, ks[j]) then
        freed = freed + 1
      else
        n_alone = n_alone + 1
        alone[n_alone] = holder .. ks[j]
      end
    end
  end
  if entry and entry.changed then
    if entry.count <= 0 then
      n_gone = n_gone + 1
      gone[n_gone] = holder
    else
      set[n_set + 1] = holder
      set[n_set + 2] = pool_value(entry)
      n_set = n_set + 2
    end
  end
end
for from = 1, n_alone, 3996 do  -- within 3,999 arguments with ZREM and its key
  freed = freed + redis.call('ZREM', pool, unpack(alone, from, math.min(from + 3995, n_alone)))
end
call_chunked('ZREM', pool, gone)
call_chunked('HDEL', counts, gone)
if freed > 0 or recounted then
  set[n_set + 1] = '~held'
  set[n_set + 2] = math.max(held - freed, 0)
  n_set = n_set + 2
end
call_chunked('HSET', counts, set)
return freed
