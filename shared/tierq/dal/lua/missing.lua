-- Which of these ids are neither waiting nor leased? (the reconciler's question)
-- KEYS: 1 ready, 2 leased
-- ARGV: ids
-- Returns the ids found in neither set.
local out = {}
for _, id in ipairs(ARGV) do
  if not redis.call('ZSCORE', KEYS[1], id) and not redis.call('ZSCORE', KEYS[2], id) then
    out[#out + 1] = id
  end
end
return out
