#!lua flags=allow-oom
-- Remove tasks from the warm tier entirely (cancel, replace into the future, purge): from
-- the ready set with their data, and their leases (found by id in lease_of, ended as
-- lua/lease_keys.lua ends any lease). Reads nothing beyond the ids given.
-- Allowed while Valkey is out of memory: it only frees memory.
-- KEYS: 1 ready, 2 data, 3 leased, 4 meta, 5 lease_of, 6 claims, 7 started, 8 progress,
-- 9 limits
-- ARGV: the tasks' ready-set members (core/ordering.py place: their data and leases are
--       found by the id in the member, lua/ready_member.lua task_of)
-- Returns {how many were ready or leased, then id, token, progress for each lease ended}.
-- The progress is the lease's entry ('<token>|<ms>|<json>', read before it went) or false.
-- The caller gives back those leases' queue-wide reservations and keeps their progress.
-- This call names them itself: a lease claimed after the caller looked is not missed.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)
-- include: lease_keys (a lease's four keys: lua/lease_keys.lua)

local removed = 0
local freed = 0
local ids = {}
for k, member in ipairs(ARGV) do
  local id = task_of(member)
  ids[k] = id
  removed = removed + redis.call('ZREM', KEYS[1], member)
  freed = freed + redis.call('HSTRLEN', KEYS[2], id)
  redis.call('HDEL', KEYS[2], id)
end
add_warm_bytes(KEYS[4], -freed)
local held = lease_held(KEYS[3], KEYS[5], ids)
local members, held_ids, held_tokens = {}, {}, {}
for k, token in pairs(held) do
  members[#members + 1] = ids[k] .. '|' .. token
  held_ids[#held_ids + 1] = ids[k]
  held_tokens[#held_tokens + 1] = token
end
local kept = call_chunked('HMGET', KEYS[8], held_ids)
local gone = lease_drop(KEYS[3], KEYS[5], KEYS[6], KEYS[7], members, nil, nil, KEYS[8],
                        KEYS[4], KEYS[9])
local ended = {}
for _, member in ipairs(gone) do ended[member] = true end
local out = {removed + #gone}
for j = 1, #members do
  if ended[members[j]] then
    ended[members[j]] = nil  -- (an id named twice: its lease once)
    local token = held_tokens[j]
    local value = kept[j]
    if not (value and string.sub(value, 1, #token + 1) == token .. '|') then value = false end
    out[#out + 1] = held_ids[j]
    out[#out + 1] = token
    out[#out + 1] = value
  end
end
return out
