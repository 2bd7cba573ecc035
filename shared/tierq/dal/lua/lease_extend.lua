-- Heartbeat: extend valid leases. Valkey only.
-- KEYS: 1 leased, 2 leases
-- ARGV: 1 now_ms, then triples: id, token, extend_ms
-- Returns one number per triple: the new deadline (epoch ms), or 0 (not_owner / expired).
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 3 do
  local info = redis.call('HGET', KEYS[2], ARGV[i])
  local deadline = 0
  if info and string.sub(info, 1, string.find(info, '|', 1, true) - 1) == ARGV[i + 1] then
    local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if current and tonumber(current) > now then
      deadline = now + tonumber(ARGV[i + 2])
      redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    end
  end
  out[#out + 1] = deadline
end
return out
