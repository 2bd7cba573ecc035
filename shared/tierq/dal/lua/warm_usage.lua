-- Shared by the scripts that say `-- include: warm_usage` (see lua/README.md, "A tenant's
-- share"). What a (queue, tenant) holds against its tenant's warm-tier bound: the bytes of
-- its task data (the meta field `bytes`, lua/warm_bytes.lua) plus `charge` per task that
-- waits (the ready set) or is leased (the leased set), for what Valkey keeps of it beside
-- the data: its ready entry, and once claimed its lease, lease_of entry and a share of its
-- claim's record. A claim turns a waiting task into a leased one, so it never raises the
-- usage; only a push (push_ready, under the pair's allotment) and a replacement
-- (update_ready) do. The allotment the pair took from its tenant's ledger
-- (lua/warm_ledger.lua) is the meta field `allot`.
local ALLOT_FIELD = 'allot'
local function warm_usage(ready_size, leased, bytes, charge)
  return bytes + (ready_size + redis.call('ZCARD', leased)) * charge
end
local function warm_allot(meta)
  return tonumber(redis.call('HGET', meta, ALLOT_FIELD) or '0') or 0
end
