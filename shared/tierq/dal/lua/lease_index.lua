#!lua flags=allow-oom
-- Complete a pair's lease_of and claim counts (lua/lease_keys.lua) for leases and claims
-- made by a tierq that kept neither, one slice per call: the reconciler calls it until it
-- answers 1 (missing.lua answers nothing before). Flagged done in meta (`leases_indexed`);
-- a pair with no lease and no claim record is done at once (a new pair, or one whose keys
-- Valkey lost).
--   1. ZSCAN the leased set: each lease lease_of does not know yet (one HMGET of the
--      slice's ids) is entered (one HSET) and counted for its claim (an HINCRBY per claim);
--   2. HSCAN the claims hash: a record whose claim has no count holds no lease (every lease
--      is counted by now) and is removed.
-- The cursor is kept in meta (`lease_index_at`: the step, then SCAN's cursor).
-- Allowed while Valkey is out of memory: a few small writes per lease of the slice.
-- KEYS: 1 leased, 2 lease_of, 3 claims, 4 meta
-- ARGV: 1 how many members a slice asks SCAN for
-- Returns 1 when the pair's lease_of is complete, else 0.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)

local FLAG = 'leases_indexed'
local AT = 'lease_index_at'
if redis.call('HGET', KEYS[4], FLAG) == '1' then return 1 end
local at = redis.call('HGET', KEYS[4], AT)
if not at then
  if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
    redis.call('HSET', KEYS[4], FLAG, '1')
    return 1
  end
  at = 'z0'
end
local step, cursor = string.sub(at, 1, 1), string.sub(at, 2)
local count = tonumber(ARGV[1])
local reply
if step == 'z' then
  reply = redis.call('ZSCAN', KEYS[1], cursor, 'COUNT', count)
  local found = reply[2]
  local ids, tokens, n = {}, {}, 0
  for i = 1, #found, 2 do
    local member = found[i]
    local bar = string.find(member, '|', 1, true)
    if bar then
      n = n + 1
      ids[n] = string.sub(member, 1, bar - 1)
      tokens[n] = string.sub(member, bar + 1)
    end
  end
  local named = call_chunked('HMGET', KEYS[2], ids)
  local enter, n_enter = {}, 0  -- id, token, ... of the leases lease_of does not know
  local per_claim, claim_order = {}, {}
  for k = 1, n do
    if not named[k] then
      enter[n_enter + 1] = ids[k]
      enter[n_enter + 2] = tokens[k]
      n_enter = n_enter + 2
      local prefix = string.match(tokens[k], '^(.*~)%d+~%d+$')
      if prefix then
        if not per_claim[prefix] then
          per_claim[prefix] = 0
          claim_order[#claim_order + 1] = prefix
        end
        per_claim[prefix] = per_claim[prefix] + 1
      end
    end
  end
  call_chunked('HSET', KEYS[2], enter)
  for _, prefix in ipairs(claim_order) do
    redis.call('HINCRBY', KEYS[3], prefix .. '#', per_claim[prefix])
  end
  redis.call('HSET', KEYS[4], AT, reply[1] == '0' and 'c0' or 'z' .. reply[1])
  return 0
end
reply = redis.call('HSCAN', KEYS[3], cursor, 'COUNT', count)
local found = reply[2]
for i = 1, #found, 2 do
  local field = found[i]
  if string.sub(field, -1) ~= '#' and redis.call('HEXISTS', KEYS[3], field .. '#') == 0 then
    redis.call('HDEL', KEYS[3], field)
  end
end
if reply[1] == '0' then
  redis.call('HSET', KEYS[4], FLAG, '1')
  redis.call('HDEL', KEYS[4], AT)
  return 1
end
redis.call('HSET', KEYS[4], AT, 'c' .. reply[1])
return 0
