-- Remove tasks from the warm tier entirely (cancel, replace into the future, purge).
-- KEYS: 1 ready, 2 data, 3 leased, 4 leases
-- ARGV: ids
-- Returns how many were ready or leased.
local removed = 0
for _, id in ipairs(ARGV) do
  removed = removed + redis.call('ZREM', KEYS[1], id) + redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[4], id)
end
return removed
