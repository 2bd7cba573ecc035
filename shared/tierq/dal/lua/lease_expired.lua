#!lua flags=allow-oom
-- List leases whose deadline has passed (the reaper records the outcome in Postgres first,
-- then drops them: lease_drop.lua) and mark them as being reaped (deadline 0: REAPING). The
-- mark makes the expiry final whatever clock another caller compares with: no heartbeat can
-- extend a listed lease any more, and a release (release_leases.lua, which takes only leases
-- whose deadline is still ahead) cannot give its task back while the reaper records the
-- attempt. A later pass lists marked leases again (first): a reaper stopped in between
-- leaves nothing behind, and recording an attempt twice does nothing (lease_outcomes).
-- Claim records are not read here: each goes with its claim's last lease
-- (lua/lease_keys.lua).
-- A lease newly listed whose deadline came before its time limit (`limits`: claim.lua)
-- merely expired (its worker stopped heartbeating): its limit is removed here, where its
-- deadline is still known, so that only a lease that ran out at its limit keeps one and is
-- failed as timed out (logic/time_limits.py split), on this pass and on any later one.
-- Allowed while Valkey is out of memory: it only changes scores and deletes.
-- KEYS: 1 leased, 2 limits
-- ARGV: 1 now_ms, 2 limit
-- Returns the expired lease members ('<id>|<token>'), marked ones first, then by deadline.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)

local REAPING = 0
local listed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT',
                          0, tonumber(ARGV[2]))
-- A member without '|' is a lease written by a tierq from before leases named their token
-- (a bare id): no token can release it, so it is dropped here. Its task's row is still
-- warm and gone from Valkey: the reconciler re-dispatches it after its grace period.
local expired = {}
local marks = {}  -- REAPING, member, ...: every member was just listed, so ZADD updates
local fresh, deadlines = {}, {}  -- the leases listed for the first time, their deadlines
for i = 1, #listed, 2 do
  local member = listed[i]
  if string.find(member, '|', 1, true) then
    expired[#expired + 1] = member
    local deadline = tonumber(listed[i + 1])
    if deadline ~= REAPING then
      marks[#marks + 1] = REAPING
      marks[#marks + 1] = member
      fresh[#fresh + 1] = member
      deadlines[#fresh] = deadline
    end
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
call_chunked('ZADD', KEYS[1], marks)
if #fresh > 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  local limits = call_chunked('ZMSCORE', KEYS[2], fresh)
  local early = {}
  for j = 1, #fresh do
    if limits[j] and deadlines[j] < tonumber(limits[j]) then early[#early + 1] = fresh[j] end
  end
  call_chunked('ZREM', KEYS[2], early)
end
return expired
