-- Claim up to N ready tasks of one (queue, tenant), in order, and lease each one.
-- The task data leaves Valkey with the claim: a retry is rebuilt from Postgres.
-- KEYS: 1 ready, 2 data, 3 leased, 4 leases, 5 meta
-- ARGV: 1 n, 2 now_ms, 3 lease_ms, 4 token prefix, 5 worker, 6 byte budget (0: none) —
--       once the task data handed out would exceed it, the rest go back in their places
--       (the first task is always handed out unless 7 is 'strict': the caller already
--       holds tasks of this claim)
-- Returns { ready_left, mode, then per task: id, attempt, lease_token, json }
local now = tonumber(ARGV[2])
local deadline = now + tonumber(ARGV[3])
local budget = tonumber(ARGV[6] or '0')
local used = 0
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
local out = { 0, redis.call('HGET', KEYS[5], 'mode') or 'cold' }
for i = 1, #popped, 2 do
  local id = popped[i]
  local blob = redis.call('HGET', KEYS[2], id)
  if blob and budget > 0 and (#out > 2 or ARGV[7] == 'strict') and used + #blob > budget then
    -- over the budget: this one and the rest keep their places in line
    for j = i, #popped, 2 do
      redis.call('ZADD', KEYS[1], popped[j + 1], popped[j])
    end
    break
  end
  if blob then
    used = used + #blob
    local sep = string.find(blob, '|', 1, true)
    local attempt = tonumber(string.sub(blob, 1, sep - 1)) + 1
    local token = ARGV[4] .. ((i + 1) / 2)
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZADD', KEYS[3], deadline, id)
    redis.call('HSET', KEYS[4], id, token .. '|' .. attempt .. '|' .. now .. '|' .. ARGV[5])
    out[#out + 1] = id
    out[#out + 1] = attempt
    out[#out + 1] = token
    out[#out + 1] = string.sub(blob, sep + 1)
  end
  -- an id without data is a leftover of a partial loss; the reconciler re-dispatches it
end
out[1] = redis.call('ZCARD', KEYS[1])
return out
