-- Replace the data of tasks already in the warm tier, in place (on_conflict = replace).
-- A task waiting in line keeps its seq; only a priority change moves it to its new bucket.
-- The meta field `bytes` follows the new data (lua/warm_bytes.lua). A replacement is not
-- refused for the queue's size (the task keeps its place in line; the request is bounded),
-- but once the data reaches warm_max_bytes the queue turns cold, so that new work waits cold.
-- Its growth counts against the pair's share of its tenant's bound as a push's does
-- (lua/push_ready.lua, lua/warm_usage.lua): with a bound, data that would take the pair's
-- usage past its allotment is not written ('ask': the caller takes the shortfall from the
-- ledger and calls again, 'strict', with it as `grant`; 'strict': refused, and the caller
-- takes the tasks out of the warm tier, to wait cold).
-- Not allowed while Valkey is out of memory (it may grow the data): the caller then takes
-- the tasks out of the warm tier and sends them cold (logic/admission.update_warm).
-- A task not waiting in line (a push that read it as ready before the replace committed may
-- be on its way, or a worker holds it) keeps its replacement in `newer` (id -> '<score>
-- <member> <blob>'), lapsing at now_ms + ttl_ms (`newer_at`, id -> ms): the push writes
-- that instead of the blob it read, unless it read a later readiness of the task (a greater
-- seq) (lua/push_ready.lua). A task found waiting is replaced in place and its entry goes.
-- A pair keeps at most newer_max_bytes of entries (lua/newer_entries.lua): past that a
-- replace keeps none, and a push already on its way may still carry the old data.
-- KEYS: 1 ready, 2 data, 3 meta, 4 leased, 5 newer, 6 newer_at.
-- ARGV: 1 warm_max_bytes, 2 bound ('', 'ask' or 'strict'), 3 grant (bytes just taken for
--       the pair from its tenant's ledger, added to the allotment first), 4 charge per task.
--       5 now_ms, 6 ttl_ms: the caller's clock, how long an entry of `newer` lasts;
--       7 newer_max_bytes: the bytes of `newer` entries a pair holds at most.
--       Then triples: member, score (core/ordering.py place), blob.
-- Returns { 'ok', how many were found }, { 'allot', bytes short } or { 'over', 0 } (the
-- last two: nothing replaced).

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)
-- include: warm_usage (a tenant's share: lua/warm_usage.lua)
-- include: newer_entries (replacements for pushes on their way: lua/newer_entries.lua)

local size = redis.call('ZCARD', KEYS[1])
local bytes = warm_bytes(KEYS[3], KEYS[2], size)
local bound = ARGV[2]
-- first the growth, nothing written: per id, the length its data has after the batch's
-- earlier copies of it
local length = {}
local found_at = {}
local found = 0
local grown = 0
local lapses = tonumber(ARGV[5]) + tonumber(ARGV[6])
local newer_max = tonumber(ARGV[7])
local swept = false
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
    if not swept then  -- (lapsed entries go first: they count against the bound)
      swept = true
      local lapsed = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. ARGV[5], 'LIMIT', 0,
                                100)
      if #lapsed > 0 then newer_drop(KEYS[5], KEYS[6], lapsed) end
    end
    -- not waiting: kept for a push on its way (written whatever the bound says: a push
    -- is sized when it lands)
    newer_put(KEYS[5], KEYS[6], id, ARGV[i + 1] .. ' ' .. ARGV[i] .. ' ' .. ARGV[i + 2],
              lapses, newer_max)
  end
end
if bound ~= '' then
  local allot_before = warm_allot(KEYS[3])
  local allot = allot_before + tonumber(ARGV[3])
  if allot ~= allot_before then redis.call('HSET', KEYS[3], ALLOT_FIELD, allot) end
  local over = warm_usage(size, KEYS[4], bytes, tonumber(ARGV[4]), KEYS[3]) + grown - allot
  if grown > 0 and over > 0 then
    if bound == 'ask' then return { 'allot', over } end
    return { 'over', 0 }
  end
end
for k = 1, found do
  local i = found_at[k]
  local id = task_of(ARGV[i])
  redis.call('HSET', KEYS[2], id, ARGV[i + 2])
  redis.call('ZADD', KEYS[1], 'XX', ARGV[i + 1], ARGV[i])
  newer_drop(KEYS[5], KEYS[6], { id })
end
if found > 0 then
  add_warm_bytes(KEYS[3], grown)
  if bytes + grown >= tonumber(ARGV[1]) and redis.call('HGET', KEYS[3], 'mode') == 'warm' then
    redis.call('HSET', KEYS[3], 'mode', 'cold')
    redis.call('HINCRBY', KEYS[3], 'epoch', 1)
  end
end
return { 'ok', found }
