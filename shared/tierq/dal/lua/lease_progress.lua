-- Keep the progress a heartbeat carries with its lease: progress[id] = '<token>|<now_ms>|<json>'
-- for each lease still held with its deadline ahead (a lease the reaper is expiring has
-- deadline 0: refused). The bytes of the entries are counted in the meta field `progress`,
-- part of the pair's usage of its tenant's share (lua/warm_usage.lua); the entry and its
-- bytes go with the lease (lease_drop in lua/lease_keys.lua).
-- Not allowed while Valkey is out of memory (it grows the data): the caller keeps the
-- heartbeat's extension and drops the progress.
-- Called through `LeaseProgress` (dal/lua_calls.py), which names its keys and arguments:
-- | KEYS | leased, progress, meta, ready, data, gone, finished, finished_prev            |
-- | ARGV | name     | what                                                                  |
-- | 1    | now_ms   | the caller's clock                                                    |
-- | 2    | bound    | the tenant's bound: '' (none), 'ask' or 'strict' (below)              |
-- | 3    | grant    | bytes just taken for this pair from its tenant's ledger, added to the allotment first |
-- | 4    | charge   | per task charge (lua/warm_usage.lua)                                  |
-- | then | member, progress | per lease: its member ('<id>|<token>') and the progress's JSON text |
-- A tenant's share holds progress as push_ready.lua holds a push. An entry grows the usage
-- by its bytes less those of the entry it replaces; one that shrinks always goes in.
--   ask: entries that would take the usage past the pair's allotment are not written, none
--        of them; { 'allot', bytes short } is returned. The caller takes that much from
--        the ledger and calls again, 'strict', with it as `grant`.
--   strict: an entry past the allotment is refused (2), its lease kept as it is. So one
--        tenant's progress never takes the room another's tasks need.
-- Returns one number per pair: 1 kept, 0 not held or expired, 2 held but refused for the
-- tenant's share; or { 'allot', bytes short } (ask).

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: warm_usage (a tenant's share: lua/warm_usage.lua)

local now = tonumber(ARGV[1])
local bound = ARGV[2]
-- per pair: false (not held), else { id, entry }
local rows = {}
-- the bytes of each lease's entry as the call goes (a lease named twice: its last entry)
local before, after = {}, {}
for i = 5, #ARGV, 2 do
  local member = ARGV[i]
  local deadline = redis.call('ZSCORE', KEYS[1], member)
  if deadline and tonumber(deadline) > now then
    local bar = string.find(member, '|', 1, true)
    local id = string.sub(member, 1, bar - 1)
    local value = string.sub(member, bar + 1) .. '|' .. ARGV[1] .. '|' .. ARGV[i + 1]
    if not before[id] then before[id] = redis.call('HSTRLEN', KEYS[2], id) end
    after[id] = #value
    rows[#rows + 1] = { id, value }
  else
    rows[#rows + 1] = false
  end
end
local allot, usage = 0, 0
if bound ~= '' then
  local allot_before = warm_allot(KEYS[3])
  allot = allot_before + tonumber(ARGV[3])
  if allot ~= allot_before then redis.call('HSET', KEYS[3], ALLOT_FIELD, allot) end
  local size = redis.call('ZCARD', KEYS[4])
  local markers = warm_markers(KEYS[7], KEYS[8])
  usage = warm_usage(size, KEYS[1], warm_bytes(KEYS[3], KEYS[5], size), tonumber(ARGV[4]),
                     KEYS[3], redis.call('ZCARD', KEYS[6]), markers)
  local growth = 0
  for id, bytes in pairs(after) do growth = growth + bytes - before[id] end
  if growth > 0 then  -- (markers give way where that makes the room: lua/warm_usage.lua)
    usage = usage - warm_markers_give_way(KEYS[3], KEYS[7], KEYS[8], usage + growth - allot,
                                          markers)
  end
  if bound == 'ask' and growth > 0 and usage + growth > allot then
    return { 'allot', usage + growth - allot }
  end
end
local out = {}
local grown = 0
local held = before  -- (from here: each entry's bytes as written)
for k, row in ipairs(rows) do
  if not row then
    out[k] = 0
  else
    local grows = #row[2] - held[row[1]]
    if bound == 'strict' and grows > 0 and usage + grown + grows > allot then
      out[k] = 2
    else
      redis.call('HSET', KEYS[2], row[1], row[2])
      held[row[1]] = #row[2]
      grown = grown + grows
      out[k] = 1
    end
  end
end
if grown ~= 0 then redis.call('HINCRBY', KEYS[3], 'progress', grown) end
return out
