-- Check lease tokens without changing anything (first step of ack and nack; Postgres is
-- written next, and only then are the leases dropped).
-- KEYS: 1 leased, 2 leases
-- ARGV: 1 now_ms, then pairs: id, token
-- Returns one number per pair: the attempt the lease belongs to, or 0 when the token is
-- wrong or the lease has expired (not_owner).
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local info = redis.call('HGET', KEYS[2], ARGV[i])
  local attempt = 0
  if info then
    local sep = string.find(info, '|', 1, true)
    if string.sub(info, 1, sep - 1) == ARGV[i + 1] then
      local deadline = redis.call('ZSCORE', KEYS[1], ARGV[i])
      if deadline and tonumber(deadline) > now then
        local rest = string.sub(info, sep + 1)
        attempt = tonumber(string.sub(rest, 1, string.find(rest, '|', 1, true) - 1))
      end
    end
  end
  out[#out + 1] = attempt
end
return out
