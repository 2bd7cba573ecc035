#!lua flags=allow-oom
-- Which of these ids are neither waiting nor leased? (the reconciler's question, for one
-- slice of the pair's warm rows; lookups by id only, whatever the size of the pair)
-- A task waits when its blob is in the data hash (lua/ready_member.lua: whatever the form
-- of its ready-set member); it is leased when lease_of names a lease the leased set holds
-- (lua/lease_keys.lua); one a release took back at or after the cutoff (fence_ms) is the
-- release's to push again.
-- Until the pair's lease_of is complete (lease_index.lua: a pair whose leases were made by
-- a tierq that kept no lease_of) nothing is reported and nothing is written.
-- When some id is missing, the pair's fence (meta field `fence`) is raised to fence_ms, the
-- reconciler's cutoff: from then on push_ready drops every push of an admission that began
-- before it (docs/architecture.md §8): the reconciler re-pushes those rows itself, so a
-- late push of one of them cannot add a task a worker may hold or has finished.
-- Also keeps one of the reconciler's cursors: over the pair's warm rows (meta
-- `reconcile_after`) or over its batch rows (meta `members_after`), as `field` names.
-- Allowed while Valkey is out of memory: it writes a few bytes of meta at most.
-- Called through `Missing` (dal/lua_calls.py):
-- | KEYS | data, leased, lease_of, meta                                                     |
-- | ARGV | fence_ms (epoch ms of the callers' clocks), field (`reconcile_after` or `members_after`), cursor (the cursor to keep there; '': leave it as it is, '0': forget it), then the ids |
-- Returns { 'ok', id, ... } (the ids neither waiting nor leased), or { 'indexing' }.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)
-- include: lease_keys (a lease's three keys: lua/lease_keys.lua)

local field = ARGV[2]
if field ~= 'reconcile_after' and field ~= 'members_after' then
  return redis.error_reply('ERR missing.lua: no cursor field ' .. field)
end
if redis.call('HGET', KEYS[4], 'leases_indexed') ~= '1' then return { 'indexing' } end
if ARGV[3] == '0' then
  redis.call('HDEL', KEYS[4], field)
elseif ARGV[3] ~= '' then
  redis.call('HSET', KEYS[4], field, ARGV[3])
end
local ids = {}
for i = 4, #ARGV do ids[i - 3] = ARGV[i] end
local held = lease_held(KEYS[2], KEYS[3], ids, tonumber(ARGV[1]))  -- (and recent releases)
local out = { 'ok' }
for k = 1, #ids do
  if not held[k] and not waiting(KEYS[1], ids[k]) then out[#out + 1] = ids[k] end
end
if #out > 1 then
  local fence = tonumber(ARGV[1])
  if fence > tonumber(redis.call('HGET', KEYS[4], 'fence') or '0') then
    redis.call('HSET', KEYS[4], 'fence', ARGV[1])
  end
end
return out
