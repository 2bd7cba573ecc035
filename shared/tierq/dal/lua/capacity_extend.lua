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
  local live = current ~= nil and current > now
  local new = deadline
  if live and current > new then new = current end
  local whole = false
  if live then
    local value = redis.call('HGET', counts, holder)
    if value then
      local granted, count, bitmap = pool_entry(value)
      if m == count then
        local seen = {}
        local unset = 0
        for j = 1, m do
          local k = ks[j]
          if k >= 1 and k <= granted and not seen[k] then
            seen[k] = true
            local byte = string.byte(bitmap, math.floor((k - 1) / 8) + 1) or 0
            if pool_band(byte, pool_lshift(1, (k - 1) % 8)) == 0 then unset = unset + 1 end
          end
        end
        whole = unset == count
      end
    end
  end
  local function alone(k)
    local unit = holder .. k
    local score = tonumber(redis.call('ZSCORE', pool, unit))
    if score ~= nil and score > now then
      redis.call('ZADD', pool, 'XX', 'GT', deadline, unit)
      at[k] = math.max(score, deadline)
    end
  end
  if whole then
    redis.call('ZADD', pool, 'XX', 'GT', deadline, holder)
    for j = 1, m do at[ks[j]] = new end
  elseif live then
    pool_take_units(pool, counts, holder, ks, function(k)
      redis.call('ZADD', pool, new, holder .. k)
      at[k] = new
    end, alone)
  else
    for j = 1, m do alone(ks[j]) end
  end
  for j = 1, m do
    n_out = n_out + 1
    out[n_out] = at[ks[j]] or 0
  end
end
return out
