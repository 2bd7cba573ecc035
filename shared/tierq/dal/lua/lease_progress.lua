-- Keep the progress a heartbeat carries with its lease: progress[id] = '<token>|<now_ms>|<json>'
-- for each lease still held with its deadline ahead (a lease the reaper is expiring has
-- deadline 0: refused). The bytes of the entries are counted in the meta field `progress`,
-- part of the pair's usage of its tenant's share (lua/warm_usage.lua); the entry and its
-- bytes go with the lease (lease_drop in lua/lease_keys.lua).
-- Not allowed while Valkey is out of memory (it grows the data): the caller keeps the
-- heartbeat's extension and drops the progress.
-- KEYS: 1 leased, 2 progress, 3 meta
-- ARGV: 1 now_ms, then pairs: lease member ('<id>|<token>'), progress (JSON text)
-- Returns one number per pair: 1 kept, 0 not held or expired.
local now = tonumber(ARGV[1])
local out = {}
local grown = 0
for i = 2, #ARGV, 2 do
  local member = ARGV[i]
  local kept = 0
  local deadline = redis.call('ZSCORE', KEYS[1], member)
  if deadline and tonumber(deadline) > now then
    local bar = string.find(member, '|', 1, true)
    local id = string.sub(member, 1, bar - 1)
    local value = string.sub(member, bar + 1) .. '|' .. ARGV[1] .. '|' .. ARGV[i + 1]
    grown = grown + #value - redis.call('HSTRLEN', KEYS[2], id)
    redis.call('HSET', KEYS[2], id, value)
    kept = 1
  end
  out[#out + 1] = kept
end
if grown ~= 0 then redis.call('HINCRBY', KEYS[3], 'progress', grown) end
return out
