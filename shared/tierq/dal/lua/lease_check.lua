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

local ENDING = 0.5
local now = tonumber(ARGV[1])
local scores = call_chunked('ZMSCORE', KEYS[1], ARGV, 2)
local held, marks, n_marks = {}, {}, 0
for i = 2, #ARGV do
  local score = scores[i - 1] and tonumber(scores[i - 1])
  if score and score > now then
    held[i - 1] = 1
    if score % 1 == 0 then
      -- (one decimal: exact for a whole number of milliseconds and the mark's half)
      marks[n_marks + 1] = string.format('%.1f', score + ENDING)
      marks[n_marks + 2] = ARGV[i]
      n_marks = n_marks + 2
    end
  else
    held[i - 1] = 0
  end
end
-- (every member marked was just read: ZADD updates it)
call_chunked('ZADD', KEYS[1], marks)
return held
