#!lua flags=allow-oom
-- Capacity of a queue as a whole, across its tenants (whose pairs live in other slots): the
-- keys have the queue's own hash tag, `{queue}`, so this runs on one master.
-- `pool` and `counts` are a pool of reservations (lua/capacity_pool.lua): a take holds
-- one entry for all its units, scored by its deadline (epoch ms, the deadline of the lease
-- or call it stands for). A reservation is taken BEFORE the pair's claim (or the
-- consumer's invocation) and is given back when unused or finished; an entry whose
-- deadline has passed counts for nothing and is swept here. So a process that dies
-- between the steps leaks nothing past the deadline, and no key TTL is involved (a cache at
-- its maximum evicts keys with a TTL first).
-- `bucket` is the queue's token bucket (lua/token_bucket.lua), on the server's clock.
-- Allowed while Valkey is out of memory: it writes a few small values, and claims (which
-- free memory) must keep working.
-- Called through `QueueCapacity` (dal/lua_calls.py):
-- | KEYS | pool (sorted set), counts (hash), bucket (hash)                                   |
-- | ARGV | name              | what                                                        |
-- | 1    | want              | units wanted (0: only give back)                            |
-- | 2, 3 | now_ms, deadline_ms | the caller's clock; the deadline of what is taken         |
-- | 4    | holder            | the take's entry, ending with '~'; its units are holder .. 1, holder .. 2, ... |
-- | 5    | max_held          | units held at most (0: no count limit)                      |
-- | 6, 7 | per_second, burst | the queue's token bucket (0: no rate)                       |
-- | 8    | give_back_tokens  | tokens of an earlier take that went unused                  |
-- | 9    | give_back_past_arg | with want 0: units of holder's take that were used, the rest go back ('': none) |
-- With want 0, nothing is taken: the tokens and units given back are returned.
-- Returns { taken, retry_ms, held_after } (lua/capacity_take.lua; held_after: the pool's
-- units after, 0 without a count limit or, with want 0, when no units went back).

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: token_bucket (lua/token_bucket.lua)
-- include: capacity_pool (lua/capacity_pool.lua)
-- include: capacity_units (lua/capacity_units.lua)
-- include: capacity_take (lua/capacity_take.lua)

local want = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local max_held = tonumber(ARGV[5])
local rate = tonumber(ARGV[6])
local burst = tonumber(ARGV[7])

if rate > 0 then bucket_give(KEYS[3], tonumber(ARGV[8]), burst) end
if want == 0 then
  -- the units of holder's take past the first `used` go back (it went partly unused)
  local held = 0
  local used = tonumber(ARGV[9] or '')
  if max_held > 0 and used then
    local state = redis.call('HMGET', KEYS[2], '~held', ARGV[4])
    held = tonumber(state[1]) or pool_recount(KEYS[1], KEYS[2])
    local entry = state[2] and pool_open(state[2])
    if entry and used < entry.granted then
      local back = 0
      for k = used + 1, entry.granted do
        if pool_take_unit(entry, k) then back = back + 1 end
      end
      entry.granted = used
      entry.n = math.min(entry.n, math.ceil(used / 8))
      held = math.max(held - back, 0)
      if entry.count <= 0 then
        redis.call('ZREM', KEYS[1], ARGV[4])
        redis.call('HDEL', KEYS[2], ARGV[4])
        redis.call('HSET', KEYS[2], '~held', held)
      else
        redis.call('HSET', KEYS[2], ARGV[4], pool_value(entry), '~held', held)
      end
    end
  end
  return { 0, 0, held }
end
local taken, retry, held = capacity_take(KEYS[1], KEYS[2], KEYS[3], want, now, ARGV[3],
                                         ARGV[4], max_held, rate, burst)
return { taken, retry, held }
