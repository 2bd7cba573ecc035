#!lua flags=allow-oom
-- End leases whose outcome is recorded (ack, nack, the reaper's expiry): each member leaves
-- the leased set, its id leaves lease_of while that entry still names it, and its claim's
-- count goes down, and its progress and time limit go (lua/lease_keys.lua). A lease that was
-- issued again since has another token, and so another member: it is left alone.
-- Allowed while Valkey is out of memory: it only deletes and lowers counts.
-- KEYS: 1 leased, 2 lease_of, 3 claims, 4 started, 5 progress, 6 meta, 7 limits
-- (lua/lease_keys.lua)
-- ARGV: lease members ('<id>|<token>')
-- Returns how many were ended.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: lease_keys (a lease's four keys: lua/lease_keys.lua)

local function drop(members)
  return lease_drop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], members, nil, nil, KEYS[5], KEYS[6],
                    KEYS[7])
end
return #drop(ARGV)
