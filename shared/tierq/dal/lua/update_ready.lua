-- Replace the data of tasks already in the warm tier, in place (on_conflict = replace).
-- A task waiting in line keeps its seq; only a priority change moves it to its new bucket.
-- The meta field `bytes` follows the new data (lua/warm_bytes.lua). A replacement is not
-- refused for the queue's size (the task keeps its place in line; the request is bounded),
-- but once the data reaches warm_max_bytes the queue turns cold, so that new work waits cold.
-- A task not waiting in line (a push that read it as ready before the replace committed may
-- be on its way, or a worker holds it) keeps its replacement in `newer`
-- (lua/newer_entries.lua), lapsing at now_ms + ttl_ms: the push writes that instead of the
-- blob it read, unless it read a later readiness of the task (a greater seq)
-- (lua/push_ready.lua). A task found waiting is replaced in place and its entry goes.
-- A pair keeps at most newer_max_bytes of whole replacements; past that a task keeps a
-- mark, which makes the push refuse it (the task waits cold, and its promotion reads the
-- replaced row).
-- The growth of the data and of the entries counts against the pair's share of its
-- tenant's bound as a push's does (lua/push_ready.lua, lua/warm_usage.lua); when it would
-- take the pair's usage past its allotment:
-- | bound  | what happens                                                                |
-- | ------ | --------------------------------------------------------------------------- |
-- | ''     | (no bound) nothing more                                                     |
-- | ask    | nothing written: { 'allot', bytes short } (the caller takes that much from the ledger and calls again, 'strict', with it as `grant`) |
-- | strict | the waiting tasks' growth alone does not fit: nothing written, { 'over' } (the caller sends the tasks cold, lua/replace_cold.lua); it fits: they are replaced, and each task not waiting keeps a mark |
-- Not allowed while Valkey is out of memory (it may grow the data): the caller then sends
-- the tasks cold (logic/admission.update_warm).
-- KEYS: 1 ready, 2 data, 3 meta, 4 leased, 5 newer, 6 newer_at, 7 gone, 8 finished,
--       9 finished_prev (its tombstones and markers count: lua/warm_usage.lua).
-- ARGV: 1 warm_max_bytes, 2 bound ('', 'ask' or 'strict'), 3 grant (bytes just taken for
--       the pair from its tenant's ledger, added to the allotment first), 4 charge per task.
--       5 now_ms, 6 ttl_ms: the caller's clock, how long an entry of `newer` lasts;
--       7 newer_max_bytes: the bytes of whole `newer` entries a pair holds at most.
--       Then triples: member, score (core/ordering.py place), blob.
-- Returns { 'ok', how many were found, made }, { 'allot', bytes short, 0 } or
-- { 'over', 0, 0 } (the last two: nothing replaced); made is 1 when this call made the
-- pair's `newer_at` (the caller enters the pair in the index of lapses: lua/lapse_index.lua).

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)
-- include: warm_usage (a tenant's share: lua/warm_usage.lua)
-- include: newer_entries (replacements for pushes on their way: lua/newer_entries.lua)

local size = redis.call('ZCARD', KEYS[1])
local bytes = warm_bytes(KEYS[3], KEYS[2], size)
local bound = ARGV[2]
local lapses = tonumber(ARGV[5]) + tonumber(ARGV[6])
local newer_max = tonumber(ARGV[7])
local had_entries = redis.call('EXISTS', KEYS[6]) == 1
if had_entries then  -- (lapsed entries go first: they count against the bounds)
  newer_drop(KEYS[3], KEYS[5], KEYS[6], redis.call('ZRANGEBYSCORE', KEYS[6], '-inf',
                                                   '(' .. ARGV[5], 'LIMIT', 0, 100))
  had_entries = redis.call('EXISTS', KEYS[6]) == 1
end
-- the cost of the whole entry of the triple at ARGV[i] (lua/newer_entries.lua)
local function entry_cost(i)
  return newer_cost(#ARGV[i + 1] + 1 + #ARGV[i] + 1 + #ARGV[i + 2])
end
-- first the growth, nothing written: per id, the length its data has after the batch's
-- earlier copies of it (false: not waiting), and the entries' growth
local length = {}
local found_at = {}
local found = 0
local grown = 0
local kept, kept_ids, n_kept = {}, {}, 0  -- id -> its last triple; the ids in order
local entries = 0
for i = 8, #ARGV, 3 do
  local id = task_of(ARGV[i])
  local old = length[id]
  if old == nil then
    old = redis.call('HSTRLEN', KEYS[2], id)
    if not (old > 0 or waiting(KEYS[2], id)) then old = false end
  end
  if old then
    length[id] = #ARGV[i + 2]
    grown = grown + #ARGV[i + 2] - old
    found = found + 1
    found_at[found] = i
  else
    length[id] = false
    if kept[id] then
      entries = entries - entry_cost(kept[id])
    else
      n_kept = n_kept + 1
      kept_ids[n_kept] = id
      if had_entries then entries = entries - newer_cost(redis.call('HSTRLEN', KEYS[5], id)) end
    end
    kept[id] = i
    entries = entries + entry_cost(i)
  end
end
local whole = true  -- the tasks not waiting keep their replacements whole (else marks)
if bound ~= '' then
  local allot_before = warm_allot(KEYS[3])
  local allot = allot_before + tonumber(ARGV[3])
  if allot ~= allot_before then redis.call('HSET', KEYS[3], ALLOT_FIELD, allot) end
  local markers = warm_markers(KEYS[8], KEYS[9])
  local usage = warm_usage(size, KEYS[4], bytes, tonumber(ARGV[4]), KEYS[3],
                           redis.call('ZCARD', KEYS[7]), markers)
  local need = grown + entries
  if need > 0 then  -- (markers give way where that makes the room: lua/warm_usage.lua)
    usage = usage - warm_markers_give_way(KEYS[3], KEYS[8], KEYS[9], usage + need - allot,
                                          markers)
  end
  if need > 0 and usage + need > allot then
    if bound == 'ask' then return { 'allot', usage + need - allot, 0 } end
    if grown > 0 and usage + grown > allot then return { 'over', 0, 0 } end
    whole = false
  end
end
local found_ids = {}
for k = 1, found do
  local i = found_at[k]
  local id = task_of(ARGV[i])
  redis.call('HSET', KEYS[2], id, ARGV[i + 2])
  redis.call('ZADD', KEYS[1], 'XX', ARGV[i + 1], ARGV[i])
  found_ids[k] = id
end
if had_entries then newer_drop(KEYS[3], KEYS[5], KEYS[6], found_ids) end
for j = 1, n_kept do
  local i = kept[kept_ids[j]]
  newer_put(KEYS[3], KEYS[5], KEYS[6], kept_ids[j], ARGV[i + 1], ARGV[i],
            whole and ARGV[i + 2], lapses, newer_max)
end
if found > 0 then
  add_warm_bytes(KEYS[3], grown)
  if bytes + grown >= tonumber(ARGV[1]) and redis.call('HGET', KEYS[3], 'mode') == 'warm' then
    redis.call('HSET', KEYS[3], 'mode', 'cold')
    redis.call('HINCRBY', KEYS[3], 'epoch', 1)
  end
end
local made = 0
if n_kept > 0 and not had_entries then made = 1 end
return { 'ok', found, made }
