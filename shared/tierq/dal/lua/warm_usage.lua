-- Shared by the scripts that say `-- include: warm_usage` (see lua/README.md, "A tenant's
-- share"). What a (queue, tenant) holds against its tenant's warm-tier bound: the bytes of
-- its task data (the meta field `bytes`, lua/warm_bytes.lua) plus `charge` per task that
-- waits (the ready set) or is leased (the leased set), for what Valkey keeps of it beside
-- the data: its ready entry, and once claimed its lease, lease_of entry and a share of its
-- claim's record. A claim turns a waiting task into a leased one, so it never raises the
-- usage; a push (push_ready, under the pair's allotment), a replacement (update_ready)
-- and a heartbeat's progress (lease_progress, under the allotment too) do. The allotment the pair took from its tenant's ledger
-- (lua/warm_ledger.lua) is the meta field `allot`; the meta field `freed` counts every byte
-- the allotment ever gave back (it only grows), so the ledger can tell a report it has
-- counted from one it has not, whatever order reports arrive in. The progress its leases'
-- heartbeats keep (lua/lease_progress.lua) counts too, the meta field `progress`, and so
-- do the pair's replacements kept for pushes on their way (the meta field `newer`, their
-- bytes and charges: lua/newer_entries.lua) and its tombstones (`stones`, the members of
-- `gone`, lua/remove.lua), GONE_CHARGE each, and its completion markers (`markers`, the
-- fields of `finished` and `finished_prev` but their own two each, lua/task_finished.lua),
-- MARKER_CHARGE each. Progress is held to the allotment as pushes are
-- (lua/lease_progress.lua); tombstones and the marks of replacements not kept are never
-- refused for the bound (a whole replacement is: its mark is kept instead), and markers
-- take only the room the rest leaves, beyond a few a pair (lua/task_finished.lua), and
-- give it back to a push, a replacement or a heartbeat's progress that would otherwise
-- pass the allotment (warm_markers_give_way); later pushes and replacements see the room
-- tombstones and markers take.
local ALLOT_FIELD = 'allot'
local FREED_FIELD = 'freed'
-- what Valkey keeps of a tombstone (MEMORY USAGE at the cap: about 146 bytes)
local GONE_CHARGE = 150
-- what Valkey keeps of a completion marker (MEMORY USAGE at the cap: about 124 bytes)
local MARKER_CHARGE = 128
-- the fields of a generation of markers that are not markers ('@started', '~encoding')
local MARKER_OWN_FIELDS = 2
-- the completion markers a pair keeps, in both generations
local function warm_markers(finished, finished_prev)
  return math.max(redis.call('HLEN', finished) - MARKER_OWN_FIELDS, 0)
    + math.max(redis.call('HLEN', finished_prev) - MARKER_OWN_FIELDS, 0)
end
-- When a pair's markers last went early (server ms): the meta field a wait that finds no
-- marker reads, to look at its task's row once more (lua/task_wait.lua)
local MARKERS_DROPPED_FIELD = 'markers_dropped'
local function warm_markers_dropped(meta)
  local t = redis.call('TIME')
  redis.call('HSET', meta, MARKERS_DROPPED_FIELD,
             tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
-- Completion markers give way to tasks: when dropping the pair's `markers` makes the room a
-- call lacks by `over` bytes, its generations are dropped, the older first, until that is
-- freed, and the drop noted in `meta` (a wait that finds no marker then reads its task's
-- row again: lua/task_wait.lua); returns the bytes freed (0: nothing dropped).
local function warm_markers_give_way(meta, finished, finished_prev, over, markers)
  if over <= 0 or over > markers * MARKER_CHARGE then return 0 end  -- (no cure)
  local freed = 0
  for _, key in ipairs({ finished_prev, finished }) do
    if freed >= over then break end
    local held = redis.call('HLEN', key)
    if held > 0 then
      freed = freed + math.max(held - MARKER_OWN_FIELDS, 0) * MARKER_CHARGE
      redis.call('UNLINK', key)
    end
  end
  if freed > 0 then warm_markers_dropped(meta) end
  return freed
end
local function warm_usage(ready_size, leased, bytes, charge, meta, stones, markers)
  local kept = redis.call('HMGET', meta, 'progress', 'newer')
  local progress = math.max(tonumber(kept[1] or '0') or 0, 0)
  local newer = math.max(tonumber(kept[2] or '0') or 0, 0)
  return bytes + progress + newer + stones * GONE_CHARGE + markers * MARKER_CHARGE
    + (ready_size + redis.call('ZCARD', leased)) * charge
end
local function warm_allot(meta)
  return tonumber(redis.call('HGET', meta, ALLOT_FIELD) or '0') or 0
end
-- lower the allotment to `after`, counting the difference as given back; returns the
-- pair's bytes given back so far (its `freed` after)
local function warm_give_back(meta, before, after)
  redis.call('HSET', meta, ALLOT_FIELD, after)
  return redis.call('HINCRBY', meta, FREED_FIELD, before - after)
end
local function warm_freed(meta)
  return tonumber(redis.call('HGET', meta, FREED_FIELD) or '0') or 0
end
