#!lua flags=allow-oom
-- Give back reservations of a queue's pool (lua/capacity_pool.lua): units whose lease or
-- call has ended (an ack, nack, release, expiry) or that went unused. Each unit leaves
-- its take's entry at most once, so giving one back twice (an ack racing the reaper on one
-- lease, a call repeated after a lost reply) frees it once; a unit that an extension moved
-- to an entry of its own is freed by removing that entry.
-- Allowed while Valkey is out of memory: it only frees.
-- Entries whose deadline has passed are swept first (they hold nothing any more).
-- KEYS: 1 pool (sorted set), 2 counts (hash)
-- ARGV: 1 now_ms, then groups: holder (a take's entry), m, then m unit numbers k (unit
--       holder .. k)
-- Returns the number of units given back (those still held).

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: capacity_pool (lua/capacity_pool.lua)

local held = pool_sweep(KEYS[1], KEYS[2], tonumber(ARGV[1]))
local swept = held ~= tonumber(redis.call('HGET', KEYS[2], '~held'))
local freed = 0
local alone = {}
local n_alone = 0
local function nothing() end
pool_groups(ARGV, 2, function(holder, ks)
  freed = freed + pool_take_units(KEYS[1], KEYS[2], holder, ks, nothing, function(k)
    n_alone = n_alone + 1
    alone[n_alone] = holder .. k
  end)
end)
for from = 1, n_alone, 4000 do
  freed = freed + redis.call('ZREM', KEYS[1], unpack(alone, from, math.min(from + 3999, n_alone)))
end
if freed > 0 or swept then pool_save(KEYS[1], KEYS[2], held - freed) end
return freed
