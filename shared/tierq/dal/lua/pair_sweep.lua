#!lua flags=allow-oom
-- Drop a pair's lapsed replacements kept for pushes (`newer`, lua/newer_entries.lua) and its
-- lapsed tombstones (`gone`, lua/remove.lua): the reaper's sweep of the pairs the index of
-- lapses names (lua/lapse_index.lua), so a pair that goes idle keeps neither past its lapse,
-- and its tenant's share gets their room back.
-- Allowed while Valkey is out of memory: it only deletes.
-- KEYS: 1 meta, 2 newer, 3 newer_at, 4 gone.
-- ARGV: 1 now_ms (the caller's clock), 2 limit (the `newer` entries one call drops at most).
-- Returns { when the first entry left lapses (ms; 0: none is left), 1 when lapsed `newer`
-- entries are left for a later call (the limit) else 0 }.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: newer_entries (replacements for pushes on their way: lua/newer_entries.lua)

local limit = tonumber(ARGV[2])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[1], 'LIMIT', 0, limit)
newer_drop(KEYS[1], KEYS[2], KEYS[3], lapsed)
if redis.call('EXISTS', KEYS[3]) == 0 then  -- (no entry: no count, whatever it said)
  redis.call('HDEL', KEYS[1], NEWER_FIELD)
  redis.call('HDEL', KEYS[2], NEWER_OLD_FIELD)
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[1])
local first = 0
for _, key in ipairs({ KEYS[3], KEYS[4] }) do
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if head[2] then
    local at = tonumber(head[2])
    if first == 0 or at < first then first = at end
  end
end
local more = 0
if #lapsed >= limit then more = 1 end
return { first, more }
