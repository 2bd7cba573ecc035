-- Shared by the scripts that say `-- include: newer_entries` (see lua/README.md).
-- A pair's replacements kept for pushes on their way (`newer`: id -> '<score> <member>
-- <blob>', `newer_at`: id -> when the entry lapses, ms; lua/update_ready.lua writes them,
-- lua/push_ready.lua uses them). The entries' bytes are counted in the field `~bytes` of
-- `newer`, and an entry that would take them past the pair's bound is not kept, so a
-- tenant replacing tasks that are not waiting holds a bounded amount of memory:
-- | newer_put(...)                            | what it does                               |
-- | ----------------------------------------- | ------------------------------------------ |
-- | the entry fits (with the id's old one out) | kept, its lapse set, `~bytes` counted       |
-- | it does not fit                           | not kept; the id's old entry goes (it is older than the replace) |
-- newer_drop(...) removes the entries of ids (those without one cost nothing).
local NEWER_BYTES_FIELD = '~bytes'
local function newer_drop(newer, newer_at, ids)
  local freed = 0
  for _, id in ipairs(ids) do
    local old = redis.call('HSTRLEN', newer, id)
    if old > 0 then
      redis.call('HDEL', newer, id)
      freed = freed + old
    end
    redis.call('ZREM', newer_at, id)
  end
  if freed > 0 then
    if redis.call('HINCRBY', newer, NEWER_BYTES_FIELD, -freed) <= 0 then
      redis.call('HDEL', newer, NEWER_BYTES_FIELD)
    end
  end
end
local function newer_put(newer, newer_at, id, entry, lapses, max_bytes)
  local old = redis.call('HSTRLEN', newer, id)
  local held = tonumber(redis.call('HGET', newer, NEWER_BYTES_FIELD) or '0')
  if held - old + #entry <= max_bytes then
    redis.call('HSET', newer, id, entry)
    redis.call('HINCRBY', newer, NEWER_BYTES_FIELD, #entry - old)
    redis.call('ZADD', newer_at, lapses, id)
    return true
  end
  newer_drop(newer, newer_at, { id })
  return false
end
