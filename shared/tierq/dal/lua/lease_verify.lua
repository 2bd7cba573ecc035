-- Check lease tokens without changing anything (first step of ack and nack; Postgres is
-- written next, and only then are the leases dropped).
-- KEYS: 1 leased, 2 leases
-- ARGV: 1 now_ms, then pairs: id, token
-- Returns one number per pair: the attempt the lease belongs to, or 0 when the token is
-- wrong or the lease has expired (not_owner).
-- Valkey work: one HMGET of the leases and one ZMSCORE of the deadlines (Redis >= 6.2),
-- however many pairs.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)

local now = tonumber(ARGV[1])
local ids = {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
-- both replies keep the order of ids (a missing entry reads as false)
local infos = call_chunked('HMGET', KEYS[2], ids)
local deadlines = call_chunked('ZMSCORE', KEYS[1], ids)
local out = {}
for k = 1, #ids do
  local info = infos[k]
  local attempt = 0
  if info then
    local sep = string.find(info, '|', 1, true)
    if string.sub(info, 1, sep - 1) == ARGV[2 * k + 1] then
      local deadline = deadlines[k]
      if deadline and tonumber(deadline) > now then
        local rest = string.sub(info, sep + 1)
        attempt = tonumber(string.sub(rest, 1, string.find(rest, '|', 1, true) - 1))
      end
    end
  end
  out[#out + 1] = attempt
end
return out
