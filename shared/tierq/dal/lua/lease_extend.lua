#!lua flags=allow-oom
-- Heartbeat: extend valid leases. Valkey only.
-- Allowed while Valkey is out of memory: it only changes the scores of existing members.
-- A lease with a time limit (its attempt's, in `limits`: claim.lua) is never extended
-- past it: at the limit its deadline passes and the reaper fails the attempt (timeout).
-- KEYS: 1 leased, 2 limits (lua/lease_keys.lua)
-- ARGV: 1 now_ms, then pairs: lease member ('<id>|<token>'), extend_ms
-- Returns one number per pair: the new deadline (epoch ms), or 0 (not_owner / expired).
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local deadline = 0
  local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if current and tonumber(current) > now then
    deadline = now + tonumber(ARGV[i + 1])
    local cap = redis.call('ZSCORE', KEYS[2], ARGV[i])
    if cap and tonumber(cap) < deadline then deadline = tonumber(cap) end
    -- (a lease an ack or a nack checked keeps its mark: lease_check.lua)
    redis.call('ZADD', KEYS[1], 'XX', string.format('%.1f', deadline + tonumber(current) % 1),
               ARGV[i])
  end
  out[#out + 1] = deadline
end
return out
