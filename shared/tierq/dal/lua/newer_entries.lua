-- Shared by the scripts that say `-- include: newer_entries` (see lua/README.md).
-- A pair's replacements kept for pushes on their way (`newer`: id -> '<score> <member>
-- <blob>', or the mark '<score>|<member>'; `newer_at`: id -> when the entry lapses, ms;
-- lua/update_ready.lua and lua/replace_cold.lua write them, lua/push_ready.lua uses them).
-- A mark stands for a replacement the pair could not keep: a push of the task is refused,
-- so the task waits cold and its promotion reads the replaced row.
-- Each entry costs its length plus NEWER_CHARGE (what Valkey keeps of it besides, measured
-- with MEMORY USAGE: its field and its `newer_at` member), counted in the meta field `newer`.
-- That field is part of the pair's usage of its tenant's share (lua/warm_usage.lua), and a
-- pair keeps at most `max_bytes` of whole replacements:
-- | newer_put(...)                                  | what it keeps                      |
-- | ----------------------------------------------- | ---------------------------------- |
-- | a blob, fitting `max_bytes` (the id's old entry out) | the entry                     |
-- | a blob that does not fit                        | the mark                           |
-- | no blob (the caller's bound refused it)         | the mark                           |
-- newer_drop(...) removes the entries of ids (those without one cost nothing); once none
-- is left the field `newer` goes (a count that drifted heals).
local NEWER_FIELD = 'newer'
local NEWER_CHARGE = 256
-- (a count kept in `newer` itself by an older tierq: dropped once the key has no entry)
local NEWER_OLD_FIELD = '~bytes'
local function newer_cost(length)
  if length > 0 then return length + NEWER_CHARGE end
  return 0
end
local function newer_held(meta)
  return math.max(0, tonumber(redis.call('HGET', meta, NEWER_FIELD) or '0') or 0)
end
-- the (score, member, blob) of an entry, blob false for a mark; nil for none
local function newer_parse(entry)
  local score, member, blob = string.match(entry, '^(%S+) (%S+) (.*)$')
  if score then return score, member, blob end
  score, member = string.match(entry, '^([^|%s]+)|(%S+)$')
  if score then return score, member, false end
  return nil
end
local function newer_drop(meta, newer, newer_at, ids)
  if #ids == 0 then return end
  local freed = 0
  for _, id in ipairs(ids) do
    local old = redis.call('HSTRLEN', newer, id)
    if old > 0 then
      redis.call('HDEL', newer, id)
      freed = freed + newer_cost(old)
    end
  end
  call_chunked('ZREM', newer_at, ids)
  if redis.call('ZCARD', newer_at) == 0 then
    redis.call('HDEL', meta, NEWER_FIELD)
    redis.call('HDEL', newer, NEWER_OLD_FIELD)
  elseif freed > 0 and redis.call('HINCRBY', meta, NEWER_FIELD, -freed) < 0 then
    redis.call('HSET', meta, NEWER_FIELD, 0)  -- (drift: never below nothing)
  end
end
-- keeps the replacement of `id` (its place and `blob`, or a mark when `blob` is false);
-- returns whether it was kept whole
local function newer_put(meta, newer, newer_at, id, score, member, blob, lapses, max_bytes)
  local old = newer_cost(redis.call('HSTRLEN', newer, id))
  local entry = false
  if blob then
    entry = score .. ' ' .. member .. ' ' .. blob
    if newer_held(meta) - old + newer_cost(#entry) > max_bytes then entry = false end
  end
  local whole = entry and true or false
  if not entry then entry = score .. '|' .. member end
  redis.call('HSET', newer, id, entry)
  redis.call('ZADD', newer_at, lapses, id)
  local grown = newer_cost(#entry) - old
  if grown ~= 0 then redis.call('HINCRBY', meta, NEWER_FIELD, grown) end
  return whole
end
