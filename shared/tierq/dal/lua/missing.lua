-- Which of these ids are neither waiting nor leased? (the reconciler's question)
-- KEYS: 1 ready, 2 leased
-- ARGV: ids
-- Returns the ids found in neither set.
local leased = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  leased[string.match(member, '^[^|]*')] = true
end
local out = {}
for _, id in ipairs(ARGV) do
  if not leased[id] and not redis.call('ZSCORE', KEYS[1], id) then
    out[#out + 1] = id
  end
end
return out
