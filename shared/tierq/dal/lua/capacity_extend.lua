#!lua flags=allow-oom
-- Move reservations of a queue's pool (lua/capacity_pool.lua) on: a heartbeat's, before it
-- extends the leases they hold; limits.extend. Only reservations still held and whose
-- deadline is after now are moved, never to an earlier deadline: one given back, swept or
-- expired is not made again. A group that names every unit still in its take's entry,
-- with one deadline, moves the entry (a worker's heartbeat of its whole claim); otherwise
-- each unit named leaves the entry for an entry of its own (`<holder><k>`), so the rest of
-- the take still ends at its deadline.
-- Allowed while Valkey is out of memory: it writes a few small members.
-- KEYS: 1 pool (sorted set), 2 counts (hash)
-- ARGV: 1 now_ms, then groups: holder (a take's entry), deadline_ms, m, m unit numbers k
-- Returns one number per unit, in the order given: its deadline now (epoch ms), or 0
-- (not held, or expired).

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: capacity_pool (lua/capacity_pool.lua)
-- include: capacity_units (lua/capacity_units.lua)

local pool = KEYS[1]
local counts = KEYS[2]
local now = tonumber(ARGV[1])
local out = {}
local n_out = 0
local i = 2
while i <= #ARGV do
  local holder = ARGV[i]
  local deadline = tonumber(ARGV[i + 1])
  local m = tonumber(ARGV[i + 2])
  local ks = {}
  for j = 1, m do ks[j] = tonumber(ARGV[i + 2 + j]) or 0 end
  i = i + 3 + m
  local at = {}  -- k -> its deadline after
  local current = tonumber(redis.call('ZSCORE', pool, holder))
  local entry = nil
  if current ~= nil and current > now then
    local value = redis.call('HGET', counts, holder)
    entry = value and pool_open(value)
  end
  local new = entry and math.max(current, deadline)
  local whole = entry ~= nil and m == entry.count
  if whole then
    local seen = {}
    for j = 1, m do
      local k = ks[j]
      if seen[k] or not pool_has_unit(entry, k) then
        whole = false
        break
      end
      seen[k] = true
    end
  end
  if whole then
    redis.call('ZADD', pool, 'XX', 'GT', deadline, holder)
    for j = 1, m do at[ks[j]] = new end
  else
    for j = 1, m do
      local k = ks[j]
      if entry and pool_take_unit(entry, k) then
        redis.call('ZADD', pool, new, holder .. k)
        at[k] = new
      elseif at[k] == nil then
        local unit = holder .. k
        local score = tonumber(redis.call('ZSCORE', pool, unit))
        if score ~= nil and score > now then
          redis.call('ZADD', pool, 'XX', 'GT', deadline, unit)
          at[k] = math.max(score, deadline)
        end
      end
    end
    if entry and entry.changed then
      if entry.count <= 0 then
        redis.call('ZREM', pool, holder)
        redis.call('HDEL', counts, holder)
      else
        redis.call('HSET', counts, holder, pool_value(entry))
      end
    end
  end
  for j = 1, m do
    n_out = n_out + 1
    out[n_out] = at[ks[j]] or 0
  end
end
return out
