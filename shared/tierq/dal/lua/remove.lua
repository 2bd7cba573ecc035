#!lua flags=allow-oom
-- Remove tasks from the warm tier entirely (cancel, delete, replace into the future): from
-- the ready set with their data, and their leases (found by id in lease_of, ended as
-- lua/lease_keys.lua ends any lease). Reads nothing beyond the ids given.
-- A cancel or delete also leaves a tombstone of each id in `gone` (id -> when it lapses:
-- gone_ms + ttl_ms): a push that read the task as ready before the cancel committed and
-- reaches Valkey after this call leaves it out (lua/push_ready.lua), so it is never
-- claimed. Lapsed tombstones are dropped here and by the pushes that look, then the oldest
-- past cap. The key has no TTL, as no tierq key has: under a volatile-* eviction policy a
-- key with one would be evicted first, and a tombstone must not be lost to a full cache.
-- Allowed while Valkey is out of memory: it frees the task's data; a tombstone is a few
-- dozen bytes, capped. Tombstones count against the tenant's share (lua/warm_usage.lua)
-- and are never refused for it; the reaper drops lapsed ones of a pair that goes idle
-- (lua/pair_sweep.lua).
-- Called through `Remove` (dal/lua_calls.py).
-- KEYS: 1 ready, 2 data, 3 leased, 4 meta, 5 lease_of, 6 claims, 7 started, 8 progress,
-- 9 limits, 10 gone.
-- A replace into the future leaves one too, its ttl_ms ending just before the task is due
-- (logic/enqueue.py): a push that read the task as ready before the replace leaves it out,
-- the push that finds it due passes.
-- With leases '0' (a cancel or delete before its PostgreSQL change) a task held by a worker
-- keeps its lease and its data: only waiting tasks leave, and every id gets its tombstone;
-- the caller ends the leases once the change is committed (logic/tasks.py take_out).
-- ARGV: 1 gone_ms (the caller's clock; '': no tombstone), 2 ttl_ms, 3 cap (tombstones kept
--       at most), 4 leases ('1': end them too, '0': waiting tasks only).
--       Then the tasks' ready-set members (core/ordering.py place: their data and leases
--       are found by the id in the member, lua/ready_member.lua task_of).
-- Returns {how many were ready or leased, made, then id, token, progress for each lease
-- ended}: made is 1 when this call made the pair's `gone` (the caller enters the pair in the
-- index of lapses: lua/lapse_index.lua).
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
local with_leases = ARGV[4] == '1'
for i = 5, #ARGV do
  local member = ARGV[i]
  local id = task_of(member)
  ids[i - 4] = id
  local was = redis.call('ZREM', KEYS[1], member)
  removed = removed + was
  if with_leases or was == 1 then
    freed = freed + redis.call('HSTRLEN', KEYS[2], id)
    redis.call('HDEL', KEYS[2], id)
  end
end
add_warm_bytes(KEYS[4], -freed)
local made = 0
if ARGV[1] ~= '' and #ids > 0 then
  local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
  -- (an entry is dropped once: what one call drops is bounded by the cap)
  redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', '(' .. now)
  if redis.call('EXISTS', KEYS[10]) == 0 then made = 1 end
  local lapses = now + ttl
  local stones = {}
  for k, id in ipairs(ids) do
    stones[2 * k - 1] = lapses
    stones[2 * k] = id
  end
  call_chunked('ZADD', KEYS[10], stones)
  local over = redis.call('ZCARD', KEYS[10]) - tonumber(ARGV[3])
  if over > 0 then redis.call('ZPOPMIN', KEYS[10], over) end
end
if not with_leases then return { removed, made } end
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
local out = {removed + #gone, made}
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
