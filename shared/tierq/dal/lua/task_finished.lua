#!lua flags=allow-oom
-- include: call_chunked
-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: warm_usage (usage and allotment: lua/warm_usage.lua)
-- Tasks of one pair that just finished (done, dead, or deleted): their completion markers,
-- and a message (its marker's text) on its own sharded channel for each one a waiter
-- registered for (GET .../tasks/{id}?wait_seconds=N, logic/waits.py, lua/task_wait.lua).
-- A fixed number of commands per call, whatever its tasks: one multi-field HSET, and
-- without a waiter no publish at all (under a bound, the reads of the pair's usage too;
-- its `bytes` counter, when missing, recounted as lua/warm_bytes.lua says). The channel
-- `tq:{q|t}:finished:<id>` shares the pair's hash tag: SPUBLISH stays in the pair's slot
-- (ElastiCache Serverless has no keyspace notifications).
--
-- KEYS[1]  tq:{q|t}:finished       hash: id -> '<state>|<attempt>|<ms>', the current
--                                   generation; '@started' -> when it began (ms), and
--                                   '~encoding' (below).
-- KEYS[2]  tq:{q|t}:finished_prev  hash: the previous generation, read until it goes.
-- KEYS[3]  tq:{q|t}:waiters        hash: id -> how many waits registered for it.
-- KEYS[4..8] the pair's ready, data, meta, leased and gone (its usage: lua/warm_usage.lua).
-- ARGV[1]  how long a marker is kept at least (ms): the TTL.
-- ARGV[2]  the most markers the pair keeps (two generations of at most half of it).
-- ARGV[3]  the charge per task of the tenant's share (logic/tenant_budget.py), 0 when the
--          tenant has no bound.
-- ARGV[4..] per task: id, state, attempt.
-- Returns  how many waiters the messages reached.
--
-- Markers count against the tenant's share (MARKER_CHARGE each, lua/warm_usage.lua), and
-- are never refused for it: the outcome is committed. So that a tenant finishing tasks
-- in many queues cannot hold Valkey beyond its share, a pair under a bound keeps its
-- generations within the room its allotment leaves beside the rest of its usage, and at
-- least MARKERS_KEPT_AT_LEAST whatever the room:
-- | the pair                  | what the two generations keep                            |
-- | no bound (ARGV[3] = 0)    | the cap                                                  |
-- | under a bound             | `most`: the room / MARKER_CHARGE, not below MARKERS_KEPT_AT_LEAST nor above the cap; the current generation is renamed over the previous one at half of it, and the previous one dropped early when both and this call's markers would pass it |
-- A lease drop's call passes 0 (logic/waits.marker_call): its markers take less than the
-- leases it ends (MARKER_CHARGE against a lease's charge each), so they fit the room those
-- leave. A call's own markers are always written (its last half-cap), so a wait that
-- registered before it, or registers before the pair's markers next go early, finds its
-- marker (after an early drop, noted in the meta field `markers_dropped`, the wait reads
-- its row again: lua/task_wait.lua). The most a tenant holds beyond its share is then, per
-- pair, MARKERS_KEPT_AT_LEAST and one call's markers (a cancel or a delete: one). Each
-- message carries the task's marker, so a woken wait needs no lookup.
--
-- Generations: the current hash is renamed over the previous one (the oldest generation
-- dropped whole) once it is a TTL old, or when this call's markers would take it past half
-- the cap. A generation expires 2 TTL after it began (RENAME keeps the expiry), and every
-- marker in it was written before it was a TTL old: each marker is kept at least the TTL
-- (unless the cap pushes it out) and at most 2 TTL, and an idle pair keeps nothing. A call
-- of more than half the cap keeps only its last half-cap markers (the cap holds). The
-- generation dropped is UNLINKed (freed off the main thread) before the RENAME.
-- A generation starts with a field '~encoding' longer than hash-max-listpack-value, as the
-- data hash does (push_ready.lua): a hashtable from its first marker, not a listpack that
-- scans for each field of an HSET up to hash-max-listpack-entries of them.
--
-- No missed waiter: a wait subscribes, and once the server has confirmed it registers in
-- KEYS[3] and looks for the marker in one call of task_wait.lua. Both scripts are atomic in
-- the pair's slot: when this one runs first, the wait finds the marker (unless a later
-- call dropped its generation early, which it notes: the wait then reads its row again,
-- lua/task_wait.lua); when the registration runs first, this one sees it and publishes the
-- marker to a subscription in place. A published id leaves KEYS[3] (its waiters have their
-- message; a later wait finds the marker), so a registration a crashed wait never took
-- back ends at its task's end, or with the hash's expiry.
--
-- allow-oom: the work is committed; a full cache must not leave its waiters asleep (the
-- markers are small and capped).
local ENCODING_FIELD = '~encoding'
local ENCODING_VALUE = 'kept by tierq so that this hash stays in hashtable encoding '
  .. '(O(1) field access); see tierq/dal/lua/README.md'
-- markers a pair under a bound keeps whatever its room
local MARKERS_KEPT_AT_LEAST = 64
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = '|' .. now
local ttl = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local most = cap
local charge = tonumber(ARGV[3])
if charge > 0 then
  local size = redis.call('ZCARD', KEYS[4])
  local others = warm_usage(size, KEYS[7], warm_bytes(KEYS[6], KEYS[5], size), charge,
                            KEYS[6], redis.call('ZCARD', KEYS[8]), 0)
  local room = math.floor((warm_allot(KEYS[6]) - others) / MARKER_CHARGE)
  most = math.min(most, math.max(MARKERS_KEPT_AT_LEAST, room))
end
local half = math.max(1, math.floor(most / 2))
local n = (#ARGV - 3) / 3  -- (item k: its id at ARGV[3k + 1], its state and attempt after)
-- the first item whose marker is kept: the call's last half-cap, whatever the room
local first = 1 + math.max(0, n - math.max(1, math.floor(cap / 2)))
local kept = n - first + 1
local started = tonumber(redis.call('HGET', KEYS[1], '@started'))
local held = redis.call('HLEN', KEYS[1])  -- its markers, and its two fields of its own
local by_age = started == nil or now - started >= ttl
if held > 0 and (by_age or held - MARKER_OWN_FIELDS + kept > half) then
  -- (a generation dropped before its time, for the cap or the room, is noted for waits;
  -- one renamed by age only drops markers a TTL old)
  if redis.call('UNLINK', KEYS[2]) == 1 and not by_age then warm_markers_dropped(KEYS[6]) end
  redis.call('RENAME', KEYS[1], KEYS[2])
  held = 0
end
if charge > 0 and math.max(held - MARKER_OWN_FIELDS, 0)
    + math.max(redis.call('HLEN', KEYS[2]) - MARKER_OWN_FIELDS, 0) + kept > most then
  -- (over the pair's room: the older generation goes early, noted for waits)
  if redis.call('UNLINK', KEYS[2]) == 1 then warm_markers_dropped(KEYS[6]) end
end
local marks = {}
local m = 0
for i = 3 * first + 1, #ARGV, 3 do
  marks[m + 1] = ARGV[i]
  marks[m + 2] = ARGV[i + 1] .. '|' .. ARGV[i + 2] .. at
  m = m + 2
end
if held == 0 then
  marks[m + 1] = '@started'
  marks[m + 2] = now
  marks[m + 3] = ENCODING_FIELD
  marks[m + 4] = ENCODING_VALUE
end
call_chunked('HSET', KEYS[1], marks)
if held == 0 then
  redis.call('PEXPIRE', KEYS[1], 2 * ttl)
end
local woken = 0
if redis.call('EXISTS', KEYS[3]) == 1 then
  local ids = {}
  for i = 4, #ARGV, 3 do
    ids[#ids + 1] = ARGV[i]
  end
  local told = {}
  for k, count in ipairs(call_chunked('HMGET', KEYS[3], ids)) do
    if count then
      told[#told + 1] = ids[k]
      woken = woken + redis.call('SPUBLISH', KEYS[1] .. ':' .. ids[k],
                                 ARGV[3 * k + 2] .. '|' .. ARGV[3 * k + 3] .. at)
    end
  end
  call_chunked('HDEL', KEYS[3], told)
end
return woken
