-- Take tasks out of the ready set only while they are still waiting: a task a worker has
-- already claimed (popped and leased) is left alone. Used to withdraw work that is no longer
-- wanted (e.g. cron occurrences of an outdated schedule) without touching running tasks.
-- KEYS: 1 ready, 2 data
-- ARGV: ids
-- Returns the ids that were waiting and are now removed.
local out = {}
for _, id in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    out[#out + 1] = id
  end
end
return out
