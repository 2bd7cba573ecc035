#!lua flags=allow-oom
-- Send replaced tasks cold when their replacement cannot be kept in the warm tier (its
-- growth is past the tenant's share, or Valkey is out of memory: logic/admission.update_warm).
-- | the task                    | what happens                                                 |
-- | --------------------------- | ------------------------------------------------------------ |
-- | waiting in line             | it leaves the ready set with its data; its id is answered (the caller marks its row cold) |
-- | not waiting (leased, or a push of it on its way) | it keeps a mark in `newer` (lua/newer_entries.lua), lapsing at now_ms + ttl_ms: a push that read it before the replace refuses it, so it waits cold and its promotion reads the replaced row |
-- Allowed while Valkey is out of memory: it frees the data of waiting tasks, and a mark is
-- an id, a place and a few bytes (counted against the tenant's share, never refused).
-- KEYS: 1 ready, 2 data, 3 meta, 4 newer, 5 newer_at.
-- ARGV: 1 now_ms, 2 ttl_ms, then pairs: member, score (core/ordering.py place).
-- Returns { made, ids removed ... }: made is 1 when this call made the pair's `newer_at`
-- (the caller enters the pair in the index of lapses: lua/lapse_index.lua).

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)
-- include: newer_entries (replacements for pushes on their way: lua/newer_entries.lua)

local lapses = tonumber(ARGV[1]) + tonumber(ARGV[2])
local had_entries = redis.call('EXISTS', KEYS[5]) == 1
local out = { 0 }
local freed = 0
local marked = 0
local taken = {}  -- id -> true: taken out by this call (an id named twice is not marked)
for i = 3, #ARGV, 2 do
  local id = task_of(ARGV[i])
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    freed = freed + redis.call('HSTRLEN', KEYS[2], id)
    redis.call('HDEL', KEYS[2], id)
    out[#out + 1] = id
    taken[id] = true
  elseif not (taken[id] or waiting(KEYS[2], id)) then
    newer_put(KEYS[3], KEYS[4], KEYS[5], id, ARGV[i + 1], ARGV[i], false, lapses, 0)
    marked = marked + 1
  end
end
add_warm_bytes(KEYS[3], -freed)
if had_entries then
  -- (a waiting task's entry, if any, is older than its replace: it goes)
  local removed = {}
  for j = 2, #out do removed[j - 1] = out[j] end
  newer_drop(KEYS[3], KEYS[4], KEYS[5], removed)
elseif marked > 0 then
  out[1] = 1
end
return out
