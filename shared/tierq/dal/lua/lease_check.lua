#!lua flags=allow-oom
-- An ack's or a nack's check of its leases: each lease held with its deadline ahead is
-- marked as ending (its deadline plus ENDING), atomically with the check. A release
-- (release_leases.lua) takes no marked lease, so one lease ends by its outcome or by a
-- release, never both: a task acked (or failed) while the same lease is given back is not
-- put back in line by the release, and runs no second time.
-- | the lease's score          | answer | after                                        |
-- | deadline after now_ms      | 1      | marked: deadline + ENDING                     |
-- | marked, deadline after now | 1      | unchanged (a retried ack checks again)        |
-- | at or before now_ms, 0     | 0      | unchanged (expired, or the reaper reaps it)   |
-- | not held                   | 0      | nothing written                               |
-- A deadline is whole milliseconds (claim.lua, lease_extend.lua), so the mark's half
-- millisecond tells a marked lease apart and moves its expiry by nothing that matters.
-- Allowed while Valkey is out of memory: it only changes the scores of existing members.
-- KEYS: 1 leased (lua/lease_keys.lua)
-- ARGV: 1 now_ms, then lease members ('<id>|<token>')
-- Returns one number per member, in order: 1 held, 0 not.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: lease_marks (the check and its marks: lua/lease_marks.lua)

return check_leases(KEYS[1], tonumber(ARGV[1]), ARGV, 2)
