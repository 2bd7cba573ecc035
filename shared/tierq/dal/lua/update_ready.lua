-- Replace the data of tasks already in the warm tier, in place (on_conflict = replace).
-- A task waiting in line keeps its seq; only a priority change moves it to its new bucket.
-- KEYS: 1 ready, 2 data
-- ARGV: triples: id, score, blob
-- Returns how many were found.
local found = 0
for i = 1, #ARGV, 3 do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
    redis.call('ZADD', KEYS[1], 'XX', ARGV[i + 1], ARGV[i])
    found = found + 1
  end
end
return found
