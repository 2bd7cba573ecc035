#!lua
-- Throughput: add to the per-second counts of one (queue, tenant), at the server's second
-- (TIME: every process and every master counts on the clock of the one that holds the key).
-- KEYS: 1 rate (a string of 16 blocks, one per minute modulo 16; a block is a u32 stamp,
--       the minute it holds, then 60 (enqueued, acked) u32 pairs, one per second: see
--       README, "Throughput")
-- ARGV: 1 enqueued, 2 acked (what to add, >= 0)
-- Returns the server's second (epoch seconds).
-- No allow-oom: at maxmemory (noeviction) the script is refused before it runs and the
-- caller drops the count (chart data only), so counting never takes memory the tasks need.
local BLOCK_SLOTS = 60
local BLOCK_WORDS = 1 + 2 * BLOCK_SLOTS
local BLOCKS = 16
local KEEP_SECONDS = 960
local now = tonumber(redis.call('TIME')[1])
local minute = math.floor(now / 60)
local stamp_at = (minute % BLOCKS) * BLOCK_WORDS
local stamp = redis.call('BITFIELD', KEYS[1], 'GET', 'u32', '#' .. stamp_at)[1]
if stamp ~= minute then
  -- the block held a minute 16 or more minutes old (or nothing): clear it for this one
  redis.call('SETRANGE', KEYS[1], (stamp_at + 1) * 4, string.rep('\0', 8 * BLOCK_SLOTS))
  redis.call('BITFIELD', KEYS[1], 'SET', 'u32', '#' .. stamp_at, minute)
end
local slot = stamp_at + 1 + 2 * (now % BLOCK_SLOTS)
redis.call('BITFIELD', KEYS[1], 'OVERFLOW', 'SAT',
           'INCRBY', 'u32', '#' .. slot, ARGV[1], 'INCRBY', 'u32', '#' .. (slot + 1), ARGV[2])
-- a pair idle for the whole window leaves nothing behind
redis.call('EXPIRE', KEYS[1], KEEP_SECONDS)
return now
