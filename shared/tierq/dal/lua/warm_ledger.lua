#!lua flags=allow-oom
-- A tenant's warm-tier ledger (logic/tenant_budget.py): the bytes allotted to each of its
-- (queue, tenant) pairs, whose sum never passes the tenant's bound. A pair's keys live in
-- its own slot, the ledger in the tenant's (`{~tenant}`), so no script sees both: a pair
-- takes an allotment here first, then consumes it in its own scripts (push_ready's `grant`);
-- it gives back in the other order (allot_shrink, then 'set'). A caller that stops between
-- the two steps leaves the ledger counting more than the pair holds: the tenant gets less,
-- never more, until a 'set' corrects the entry.
-- Called through `WarmLedger` (dal/lua_calls.py):
-- | KEYS | warm: the ledger, hash `~total` -> the sum of the entries, and per queue `<queue>` -> `<allotted>|<epoch ms of its last grant>` |
-- | ARGV | op ('take' or 'set'), queue, amount, bound, now_ms, quiet_ms, freed              |
--   take: grant min(amount, bound - total) (none below 0) to the queue; its stamp is now.
--   set:  the pair's allotment is `amount` now (allot_shrink's answer): the entry becomes it
--         when its last grant is older than quiet_ms (no grant can be on its way to the
--         pair), else it is only lowered by `freed` (what that shrink gave back); with
--         `amount` '' (a push that gave back `freed`: push_ready) it is only lowered.
-- Allowed at maxmemory (a few bytes per pair; giving back must not fail for want of memory).
-- Returns { granted (take) or the entry after (set), total after }

local TOTAL = '~total'
local op, queue, amount = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now_ms = tonumber(ARGV[5])
local total = tonumber(redis.call('HGET', KEYS[1], TOTAL) or '0') or 0
local raw = redis.call('HGET', KEYS[1], queue)
local held, stamp = 0, 0
if raw then
  local a, s = string.match(raw, '^(%d+)|(%d+)$')
  held, stamp = tonumber(a) or 0, tonumber(s) or 0
end
local after
if op == 'take' then
  local granted = math.max(0, math.min(amount, tonumber(ARGV[4]) - total))
  if granted > 0 then
    redis.call('HSET', KEYS[1], queue, string.format('%d|%d', held + granted, now_ms),
               TOTAL, string.format('%d', total + granted))
  end
  return { granted, total + granted }
elseif op == 'set' then
  if amount and now_ms - stamp >= tonumber(ARGV[6]) then
    after = amount
  else
    after = math.max(0, held - tonumber(ARGV[7]))
  end
  total = math.max(0, total - held + after)
  if after > 0 then
    redis.call('HSET', KEYS[1], queue, string.format('%d|%d', after, stamp))
  elseif raw then
    redis.call('HDEL', KEYS[1], queue)
  end
  if total > 0 then
    redis.call('HSET', KEYS[1], TOTAL, string.format('%d', total))
  else
    redis.call('HDEL', KEYS[1], TOTAL)
  end
  return { after, total }
end
return redis.error_reply('warm_ledger: unknown op ' .. tostring(op))
