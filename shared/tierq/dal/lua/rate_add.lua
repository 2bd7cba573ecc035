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
local slot = stamp_at + 1 + 2 * (now % BLOCK_SLOTS)
-- one call in the steady state: the block's stamp, and the two counts added
local seen = redis.call('BITFIELD', KEYS[1], 'GET', 'u32', '#' .. stamp_at, 'OVERFLOW', 'SAT',
                        'INCRBY', 'u32', '#' .. slot, ARGV[1],
                        'INCRBY', 'u32', '#' .. (slot + 1), ARGV[2])
if seen[1] ~= minute then
  -- the block held a minute 16 or more minutes old (or nothing), and the counts just added
  -- went onto its old ones: clear it for this minute and add them again
  redis.call('SETRANGE', KEYS[1], (stamp_at + 1) * 4, string.rep('\0', 8 * BLOCK_SLOTS))
  redis.call('BITFIELD', KEYS[1], 'SET', 'u32', '#' .. stamp_at, minute, 'OVERFLOW', 'SAT',
             'INCRBY', 'u32', '#' .. slot, ARGV[1], 'INCRBY', 'u32', '#' .. (slot + 1), ARGV[2])
  redis.call('EXPIRE', KEYS[1], KEEP_SECONDS)
elseif seen[2] == tonumber(ARGV[1]) and seen[3] == tonumber(ARGV[2]) then
  -- the first count of this second: the key lives KEEP_SECONDS past it, so a pair idle for
  -- the whole window leaves nothing behind (later counts of the second need not say so)
  redis.call('EXPIRE', KEYS[1], KEEP_SECONDS)
end
return now
