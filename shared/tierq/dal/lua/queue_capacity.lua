#!lua flags=allow-oom
-- Capacity of a queue as a whole, across its tenants (whose pairs live in other slots): the
-- keys have the queue's own hash tag, `{queue}`, so this runs on one master.
-- `held` is a pool of reservations: a sorted set of holder members, each scored by its
-- deadline (epoch ms, the deadline of the lease or call it stands for). A reservation is
-- taken BEFORE the pair's claim (or the consumer's invocation) and is returned when unused
-- or finished; a member whose deadline has passed is no longer counted and is swept here.
-- So a process that dies between the steps leaks nothing past the deadline, and no key
-- TTL is involved (a cache at its maximum evicts keys with a TTL first).
-- `bucket` is the queue's token bucket (lua/token_bucket.lua), on the server's clock.
-- Allowed while Valkey is out of memory: it writes a few small members, and claims (which
-- free memory) must keep working.
-- KEYS: 1 held (sorted set), 2 bucket (hash)
-- ARGV: 1 want (0: only give back), 2 now_ms, 3 deadline_ms of what is taken,
--       4 holder (the members taken are holder .. 1, holder .. 2, ...),
--       5 max_held (0: no count limit), 6 per_second (0: no rate), 7 burst,
--       8 tokens given back (of an earlier take that went unused),
--       9... members given back (of an earlier take that went unused)
-- Given-back members and tokens are returned first, then the new take is made.
-- Returns { taken, retry_ms, held_after }: retry_ms is 0 when all of `want` was taken; else
-- when trying again is worth it: the next token of the rate, or for the count the earliest
-- deadline of a reservation (at most COUNT_RETRY_MS: a finished lease frees one sooner).

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: token_bucket (lua/token_bucket.lua)

local COUNT_RETRY_MS = 1000
local want = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local holder = ARGV[4]
local max_held = tonumber(ARGV[5])
local rate = tonumber(ARGV[6])
local burst = tonumber(ARGV[7])

if #ARGV >= 9 then call_chunked('ZREM', KEYS[1], ARGV, 9, #ARGV) end
if rate > 0 then bucket_give(KEYS[2], tonumber(ARGV[8]), burst) end

local taken = want
local retry = 0
if max_held > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if want > 0 then
    local room = max_held - redis.call('ZCARD', KEYS[1])
    if room < taken then
      taken = math.max(room, 0)
      local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
      retry = COUNT_RETRY_MS
      if first[2] then retry = math.max(1, math.min(COUNT_RETRY_MS, tonumber(first[2]) - now)) end
    end
  end
end
if rate > 0 and taken > 0 then
  local by_rate, rate_retry = bucket_take(KEYS[2], taken, rate, burst)
  if by_rate < taken then retry = rate_retry end
  taken = by_rate
end
if max_held > 0 and taken > 0 then
  -- The members, all of one score, go in by DESCENDING name: a small sorted set is a
  -- listpack, where each new member is placed by a scan that compares names among equal
  -- scores; descending, each lands first among its claim's (a scan of one name, not of
  -- half of them: ZADD of 100 members costs about half). `k` walks 1..taken in
  -- ascending order of its decimal text (1, 10, 100, 11, ...), no sort, filled from the end.
  local deadline = ARGV[3]
  local args = {}
  local k = 1
  for i = taken, 1, -1 do
    args[2 * i - 1] = deadline
    args[2 * i] = holder .. k
    if k * 10 <= taken then
      k = k * 10
    else
      while k % 10 == 9 or k + 1 > taken do k = math.floor(k / 10) end
      k = k + 1
    end
  end
  call_chunked('ZADD', KEYS[1], args)
end
return { taken, retry, max_held > 0 and redis.call('ZCARD', KEYS[1]) or 0 }
