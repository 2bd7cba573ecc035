-- List leases whose deadline has passed (read only; the reaper records the outcome in
-- Postgres first, then drops them with lease_release).
-- KEYS: 1 leased, 2 leases
-- ARGV: 1 now_ms, 2 limit
-- Returns flat triples: id, token, attempt
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local info = redis.call('HGET', KEYS[2], id)
  if info then
    local sep = string.find(info, '|', 1, true)
    local rest = string.sub(info, sep + 1)
    out[#out + 1] = id
    out[#out + 1] = string.sub(info, 1, sep - 1)
    out[#out + 1] = string.sub(rest, 1, string.find(rest, '|', 1, true) - 1)
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
