-- Remove tasks from the warm tier entirely (cancel, replace into the future, purge).
-- KEYS: 1 ready, 2 data, 3 leased
-- ARGV: ids
-- Returns how many were ready or leased.
local wanted = {}
local removed = 0
for _, id in ipairs(ARGV) do
  wanted[id] = true
  removed = removed + redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if wanted[string.match(member, '^[^|]*')] then
    removed = removed + redis.call('ZREM', KEYS[3], member)
  end
end
return removed
