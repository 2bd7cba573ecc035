#!lua flags=allow-oom
-- A tenant's warm-tier ledger (logic/tenant_budget.py): the bytes allotted to each of its
-- (queue, tenant) pairs, whose sum never passes the tenant's bound. A pair's keys live in
-- its own slot, the ledger in the tenant's (`{~tenant}`), so no script sees both: a pair
-- takes an allotment here first, then consumes it in its own scripts (push_ready's `grant`);
-- it gives back in the other order (push_ready or allot_shrink, then 'set'). A caller that
-- stops between the two steps leaves the ledger counting more than the pair holds: the
-- tenant gets less, never more, until a 'set' corrects the entry.
-- Called through `WarmLedger` (dal/lua_calls.py):
-- | KEYS | warm: the ledger, hash `~total` -> the sum of the entries, and per queue `<queue>` -> `<allotted>|<epoch ms of its last grant>|<freed seen>` |
-- | ARGV | op ('take', 'set' or 'cancel'), queue, amount, bound, now_ms, quiet_ms, freed |
--   take:   grant min(amount, bound - total) (none below 0) to the queue; its stamp is now.
--   set:    the pair gave bytes back: `freed` is the pair's count of bytes given back so
--           far (meta `freed`, lua/warm_usage.lua), which only grows. The entry is lowered
--           by what that count has beyond the one it saw last (`freed seen`), which then
--           becomes the larger of the two: a report counts once, whatever order reports
--           arrive in, so no two reports lower the entry by the same bytes. `amount` (the
--           pair's allotment after a shrink: allot_shrink; '' for a push: push_ready) is
--           the entry instead when its last grant is older than quiet_ms (no grant can be
--           on its way to the pair): that allotment reflects every report up to `freed`
--           and none beyond, so `freed` becomes the count seen. A queue purged (its pairs'
--           keys dropped) is set to 0 this way (amount 0, freed 0, quiet_ms 0).
--   cancel: a grant the pair never received (its push wrote nothing) leaves the entry.
-- Allowed at maxmemory (a few bytes per pair; giving back must not fail for want of memory).
-- Returns { granted (take) or the entry after (set, cancel), total after }

local TOTAL = '~total'
local op, queue, amount = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now_ms = tonumber(ARGV[5])
local total = tonumber(redis.call('HGET', KEYS[1], TOTAL) or '0') or 0
local raw = redis.call('HGET', KEYS[1], queue)
local held, stamp, seen = 0, 0, 0
if raw then
  local a, s, f = string.match(raw, '^(%d+)|(%d+)|?(%d*)$')
  held, stamp, seen = tonumber(a) or 0, tonumber(s) or 0, tonumber(f) or 0
end
local function entry(allotted)
  return string.format('%d|%d|%d', allotted, stamp, seen)
end
if op == 'take' then
  local granted = math.max(0, math.min(amount, tonumber(ARGV[4]) - total))
  if granted > 0 then
    stamp = now_ms
    redis.call('HSET', KEYS[1], queue, entry(held + granted),
               TOTAL, string.format('%d', total + granted))
  end
  return { granted, total + granted }
end
local after
if op == 'set' then
  local freed = tonumber(ARGV[7])
  if amount and now_ms - stamp >= tonumber(ARGV[6]) then
    -- the pair's own figures, read together in its slot: every report up to `freed` is in
    -- `amount` and none after it, so `freed` is exactly what the entry has seen (which also
    -- starts a pair whose keys were dropped, and its count with them, afresh)
    after = amount
    seen = freed
  else
    after = math.max(0, held - math.max(0, freed - seen))
    seen = math.max(seen, freed)
  end
elseif op == 'cancel' then
  after = math.max(0, held - amount)
else
  return redis.error_reply('warm_ledger: unknown op ' .. tostring(op))
end
total = math.max(0, total - held + after)
if after > 0 or seen > 0 then
  -- (an entry of 0 keeps the count it saw, for the reports still on their way)
  redis.call('HSET', KEYS[1], queue, entry(after))
elseif raw then
  redis.call('HDEL', KEYS[1], queue)
end
if total > 0 then
  redis.call('HSET', KEYS[1], TOTAL, string.format('%d', total))
else
  redis.call('HDEL', KEYS[1], TOTAL)
end
return { after, total }
