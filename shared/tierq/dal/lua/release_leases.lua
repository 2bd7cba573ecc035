-- Release: take back leases whose deadline is still ahead, so their tasks can go back in
-- line without counting an attempt. Taking is atomic with the check, and the reaper marks
-- what it lists (deadline 0, lease_expired.lua), so a lease is either released here or
-- expired by the reaper, never both: a released task cannot also be re-queued by a reaper
-- pass that listed its lease.
-- KEYS: 1 leased
-- ARGV: 1 now_ms, then lease members ('<id>|<token>')
-- Returns the members taken (removed from the leased set), in the order given.
local now = tonumber(ARGV[1])
local taken = {}
for i = 2, #ARGV do
  local deadline = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if deadline and tonumber(deadline) > now then
    redis.call('ZREM', KEYS[1], ARGV[i])
    taken[#taken + 1] = ARGV[i]
  end
end
return taken
