#!lua flags=allow-oom
-- End leases whose outcome is recorded (ack, nack, the reaper's expiry): each member leaves
-- the leased set, its id leaves lease_of while that entry still names it, and its claim's
-- count goes down, and its progress and time limit go (lua/lease_keys.lua). A lease that was
-- issued again since has another token, and so another member: it is left alone.
-- The replacement a task of an ended lease kept for a push (`newer`, lua/newer_entries.lua)
-- goes too: the task is done, or made ready again with a new seq, which no entry of the
-- replaced readiness serves; so its bytes leave its tenant's share.
-- That costs one EXISTS of `newer_at` per call, the look-up only while the pair holds one.
-- Allowed while Valkey is out of memory: it only deletes and lowers counts.
-- KEYS: 1 leased, 2 lease_of, 3 claims, 4 started, 5 progress, 6 meta, 7 limits
-- (lua/lease_keys.lua), 8 newer, 9 newer_at
-- ARGV: lease members ('<id>|<token>')
-- Returns how many were ended.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: lease_keys (a lease's four keys: lua/lease_keys.lua)
-- include: newer_entries (replacements for pushes on their way: lua/newer_entries.lua)

local function drop(members)
  return lease_drop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], members, nil, nil, KEYS[5], KEYS[6],
                    KEYS[7])
end
local ended = drop(ARGV)
if #ended > 0 and redis.call('EXISTS', KEYS[9]) == 1 then
  local ids = {}
  for k, member in ipairs(ended) do ids[k] = string.match(member, '^([^|]*)') end
  newer_drop(KEYS[6], KEYS[8], KEYS[9], ids)
end
return #ended
