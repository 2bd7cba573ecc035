#!lua flags=allow-oom
-- Give back what a (queue, tenant)'s allotment holds beyond its usage plus `keep`
-- (lua/warm_usage.lua), so that its tenant's other pairs may have it (logic/tenant_budget.py
-- then tells the ledger: lua/warm_ledger.lua 'set'). The pair's completion markers give way
-- (dropped) when the allotment holds more than the rest of the usage plus `keep`: a reclaim
-- runs for another pair of the tenant that needs the room. Allowed at maxmemory: it writes
-- two meta fields at most, and frees the markers.
-- KEYS: 1 ready, 2 data, 3 meta, 4 leased, 5 gone (its tombstones count:
--       lua/warm_usage.lua), 6 finished, 7 finished_prev (its markers)
-- ARGV: 1 charge per task, 2 keep
-- Returns { freed, allot after, the pair's bytes given back so far (meta `freed`) }

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: warm_usage (usage and allotment: lua/warm_usage.lua)

local size = redis.call('ZCARD', KEYS[1])
-- (its usage but the markers, which give way when there is anything to give back)
local usage = warm_usage(size, KEYS[4], warm_bytes(KEYS[3], KEYS[2], size), tonumber(ARGV[1]),
                         KEYS[3], redis.call('ZCARD', KEYS[5]), 0)
local allot = warm_allot(KEYS[3])
local keep = usage + tonumber(ARGV[2])
if allot <= keep then
  -- (a pair whose keys are gone, dropped or lost by Valkey, holds none: { 0, 0, 0 })
  return { 0, allot, warm_freed(KEYS[3]) }
end
local markers = warm_markers(KEYS[6], KEYS[7])
warm_markers_give_way(KEYS[3], KEYS[6], KEYS[7], markers * MARKER_CHARGE, markers)  -- (all)
return { allot - keep, keep, warm_give_back(KEYS[3], allot, keep) }
