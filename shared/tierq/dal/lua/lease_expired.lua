#!lua flags=allow-oom
-- List leases whose deadline has passed (the reaper records the outcome in Postgres first,
-- then drops them) and mark them as being reaped (deadline 0: REAPING). The mark makes the
-- expiry final whatever clock another caller compares with: no heartbeat can extend a
-- listed lease any more, and a release (release_leases.lua, which takes only leases whose
-- deadline is still ahead) cannot give its task back while the reaper records the attempt.
-- A later pass lists marked leases again (first): a reaper stopped in between leaves
-- nothing behind, and recording an attempt twice does nothing (lease_outcomes).
-- Also forget the claim records none of whose leases is left, once they are worth it:
-- finding them reads every lease of the pair (~15 ms of Valkey at 10k leases, ~120 ms at
-- 100k), so it is done only when the claim records outnumber the leases twice over. Each
-- claim holds at least one lease, so by then at least half the records are finished ones:
-- the reading is paid for by the claims that made them, and between passes the hash holds
-- about twice the leases at most.
-- Allowed while Valkey is out of memory: it only changes scores and deletes.
-- KEYS: 1 leased, 2 claims
-- ARGV: 1 now_ms, 2 limit
-- Returns the expired lease members ('<id>|<token>'), marked ones first, then by deadline.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)

local REAPING = 0
local listed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0,
                           tonumber(ARGV[2]))
-- A member without '|' is a lease written by a tierq from before leases named their token
-- (a bare id): no token can release it, so it is dropped here. Its task's row is still
-- warm and no longer in Valkey: the reconciler re-dispatches it after its grace period.
local expired = {}
local marks = {}  -- REAPING, member, ...: every member was just listed, so ZADD updates
for _, member in ipairs(listed) do
  if string.find(member, '|', 1, true) then
    expired[#expired + 1] = member
    marks[#marks + 1] = REAPING
    marks[#marks + 1] = member
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
call_chunked('ZADD', KEYS[1], marks)
-- A claim record is kept while any lease of that claim is: the token prefix is the member
-- up to (and with) the '~' before the attempt: '<id>|<tenant>~<random>~'.
local records = redis.call('HLEN', KEYS[2])
if records > 0 and records > 2 * redis.call('ZCARD', KEYS[1]) then
  local live = {}
  for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local prefix = string.match(member, '|(.*~)%d+~%d+$')
    if prefix then live[prefix] = true end
  end
  local gone = {}
  for _, prefix in ipairs(redis.call('HKEYS', KEYS[2])) do
    if not live[prefix] then gone[#gone + 1] = prefix end
  end
  for first = 1, #gone, 4000 do
    redis.call('HDEL', KEYS[2], unpack(gone, first, math.min(first + 3999, #gone)))
  end
end
return expired
