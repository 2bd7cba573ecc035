-- Drop leases whose token still matches: the last step of ack, nack and lease expiry, after
-- Postgres has recorded the outcome. (A claim already took the task's data out of Valkey; a
-- retry pushes fresh data, which this must not touch.)
-- KEYS: 1 leased, 2 leases
-- ARGV: pairs: id, token
-- Returns how many leases were dropped.
local dropped = 0
for i = 1, #ARGV, 2 do
  local info = redis.call('HGET', KEYS[2], ARGV[i])
  if info and string.sub(info, 1, string.find(info, '|', 1, true) - 1) == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('HDEL', KEYS[2], ARGV[i])
    dropped = dropped + 1
  end
end
return dropped
