#!lua flags=allow-oom
-- Give new leases their attempt's time limit (logic/time_limits.py): each lease still held
-- and unexpired gets its limit in `limits` (the same member, scored by the limit, epoch
-- ms), and its deadline is brought down to the limit when it was later. From then on no
-- heartbeat extends it past the limit (lease_extend.lua), and the reaper tells a lease that
-- ran out at its limit from one that expired (logic/time_limits.py). Called right after the
-- claim that made the leases, before its answer goes out; the limit leaves with the lease
-- (lease_keys.lua lease_drop).
-- Allowed while Valkey is out of memory: one small entry per lease with a limit.
-- KEYS: 1 leased, 2 limits (lua/lease_keys.lua)
-- ARGV: 1 now_ms, then pairs: lease member ('<id>|<token>'), limit (epoch ms)
-- Returns one number per pair: the lease's deadline after, or 0 for a lease not held or
-- past its deadline (nothing written for it).
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local deadline = 0
  local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if current and tonumber(current) > now then
    local limit = tonumber(ARGV[i + 1])
    redis.call('ZADD', KEYS[2], limit, ARGV[i])
    deadline = tonumber(current)
    if limit < deadline then
      deadline = limit
      redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
    end
  end
  out[#out + 1] = deadline
end
return out
