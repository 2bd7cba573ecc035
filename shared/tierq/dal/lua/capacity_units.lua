-- Shared by the scripts that say `-- include: capacity_units` (after capacity_pool): a
-- take's entry in a pool of reservations (lua/capacity_pool.lua) read and changed unit by
-- unit — its bitmap of the units that left it — and the groups of units the scripts are
-- given. (Apart from capacity_pool so that a claim, which only takes, does not define
-- these functions at every call.)

local pool_band, pool_bor, pool_lshift = bit.band, bit.bor, bit.lshift

-- A take's entry, from its value, to read or change: { granted, count, bytes, n, changed }.
local function pool_open(value)
  local granted, count, at = string.match(value, '^(%d+)|(%d+)|()')
  local entry = { granted = tonumber(granted), count = tonumber(count), bytes = {}, n = 0,
                  changed = false }
  local n = #value - at + 1
  for from = 1, n, 4000 do  -- string.byte puts its values on the Lua C stack
    local chunk = { string.byte(value, at + from - 1, at + math.min(from + 3999, n) - 1) }
    for i = 1, #chunk do entry.bytes[from + i - 1] = chunk[i] end
  end
  entry.n = n
  return entry
end

-- Whether unit k is still in the entry.
local function pool_has_unit(entry, k)
  if k < 1 or k > entry.granted then return false end
  local byte = entry.bytes[math.floor((k - 1) / 8) + 1] or 0
  return pool_band(byte, pool_lshift(1, (k - 1) % 8)) == 0
end

-- Takes unit k out of the entry if it is still in it (its bit set, the count lowered);
-- returns whether it was.
local function pool_take_unit(entry, k)
  if not pool_has_unit(entry, k) then return false end
  local at = math.floor((k - 1) / 8) + 1
  for fill = entry.n + 1, at - 1 do entry.bytes[fill] = 0 end
  if at > entry.n then entry.n = at end
  entry.bytes[at] = pool_bor(entry.bytes[at] or 0, pool_lshift(1, (k - 1) % 8))
  entry.count = entry.count - 1
  entry.changed = true
  return true
end

-- The entry's value in `counts`.
local function pool_value(entry)
  local parts = { entry.granted .. '|' .. entry.count .. '|' }
  for from = 1, entry.n, 4000 do  -- string.char takes its values on the Lua C stack
    parts[#parts + 1] = string.char(unpack(entry.bytes, from, math.min(from + 3999, entry.n)))
  end
  return table.concat(parts)
end

-- The groups of `args` from `first` on: `<holder>`, m, then m unit numbers; a holder named
-- twice is one group. Returns { { holder = , ks = { numbers } }, ... }.
local function pool_groups(args, first)
  local groups = {}
  local by_holder = {}
  local i = first
  while i <= #args do
    local holder = args[i]
    local m = tonumber(args[i + 1])
    local group = by_holder[holder]
    if not group then
      group = { holder = holder, ks = {} }
      by_holder[holder] = group
      groups[#groups + 1] = group
    end
    local ks = group.ks
    for j = 1, m do ks[#ks + 1] = tonumber(args[i + 1 + j]) or 0 end
    i = i + 2 + m
  end
  return groups
end
