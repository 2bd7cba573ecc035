#!lua flags=allow-oom
-- Release: take back leases whose deadline is still ahead, so their tasks can go back in
-- line without counting an attempt. Taking is atomic with the check, and the reaper marks
-- what it lists (deadline 0, lease_expired.lua), so a lease is either released here or
-- expired by the reaper, never both: a released task cannot also be re-queued by a reaper
-- pass that listed its lease. Each task taken keeps a mark in lease_of, '~r<now_ms>', until
-- the release's push of it (or its next lease) replaces it: the reconciler leaves the task
-- to the release until its cutoff has passed now_ms (lua/lease_keys.lua, missing.lua), so
-- the release's push cannot add a task the reconciler has already put back.
-- Allowed while Valkey is out of memory: it deletes, lowers counts and writes a mark per
-- task in place of its token.
-- KEYS: 1 leased, 2 lease_of, 3 claims, 4 started, 5 progress, 6 meta, 7 limits
-- (lua/lease_keys.lua)
-- ARGV: 1 now_ms, then lease members ('<id>|<token>')
-- Returns the members taken (removed from the leased set), in the order given.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: lease_keys (a lease's four keys: lua/lease_keys.lua)

local members = {}
for i = 2, #ARGV do members[i - 1] = ARGV[i] end
return lease_drop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], members, tonumber(ARGV[1]),
                  '~r' .. ARGV[1], KEYS[5], KEYS[6], KEYS[7])
