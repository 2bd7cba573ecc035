#!lua flags=allow-oom
-- One page of a pair's running leases, in the order they started (then by id), after a
-- position: reads at most `scan` entries of `started`, whatever the pair holds
-- (lua/README.md, "Running leases a page at a time").
-- Called through `RunningPage` (dal/lua_calls.py):
-- | KEYS | started, lease_of, leased, claims (lua/lease_keys.lua)                           |
-- | ARGV | after_ms ('': from the first lease), after_id ('': after every lease that started at after_ms), limit (leases wanted), scan (entries read at most) |
-- Returns { state, last_ms, last_id, then per lease: id, token, deadline, started_ms,
--           claim record ('<started_ms>|<worker>', '' when none) }
-- state: 'end' when the set holds nothing after the entries read, else 'more'; last_ms and
-- last_id: the last entry read ('' when none), where the next page starts after. A lease
-- the reaper is expiring (deadline 0) is read but not returned. An entry whose lease has
-- ended (its id's lease_of entry names no lease `leased` holds: left by a tierq that ended
-- leases without `started`) is removed on the way.
-- Allowed while Valkey is out of memory: it only reads and deletes.
-- Work: O(log N) to find the position (ZSCORE and ZRANK of the cursor's entry, or when it
-- has gone two ZCOUNTs and a binary search over the entries of that very ms, one ZRANGE of
-- one entry each), then per window of entries one ZRANGE, HMGET, ZMSCORE and HMGET.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)

local started, lease_of, leased, claims = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local after_ms, after_id = ARGV[1], ARGV[2]
local limit = tonumber(ARGV[3])
local scan = tonumber(ARGV[4])

-- the index of the first entry after (after_ms, after_id)
local function start_rank()
  if after_ms == '' then return 0 end
  if after_id == '' then return redis.call('ZCOUNT', started, '-inf', after_ms) end
  local score = redis.call('ZSCORE', started, after_id)
  if score and tonumber(score) == tonumber(after_ms) then
    return redis.call('ZRANK', started, after_id) + 1
  end
  -- the cursor's lease has ended: entries of one score are ordered by their bytes, so the
  -- first one of after_ms past after_id is found by halving
  local lo = redis.call('ZCOUNT', started, '-inf', '(' .. after_ms)
  local hi = lo + redis.call('ZCOUNT', started, after_ms, after_ms)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if redis.call('ZRANGE', started, mid, mid)[1] <= after_id then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return lo
end

local rank = start_rank()
local out = { 'more', '', '' }
local n_out, found, read = 3, 0, 0
local stale, n_stale = {}, 0
local state = 'more'
while found < limit and read < scan do
  local want = math.min(limit - found, scan - read)
  local window = redis.call('ZRANGE', started, rank, rank + want - 1, 'WITHSCORES')
  local n = #window / 2
  if n == 0 then
    state = 'end'
    break
  end
  rank = rank + n
  read = read + n
  local ids = {}
  for k = 1, n do ids[k] = window[2 * k - 1] end
  local tokens = call_chunked('HMGET', lease_of, ids)
  local members, at, n_members = {}, {}, 0
  for k = 1, n do
    local token = tokens[k]
    if token and string.sub(token, 1, 1) ~= '~' then
      n_members = n_members + 1
      members[n_members] = ids[k] .. '|' .. token
      at[n_members] = k
    else
      n_stale = n_stale + 1
      stale[n_stale] = ids[k]
    end
  end
  local deadlines = n_members > 0 and call_chunked('ZMSCORE', leased, members) or {}
  local live, prefixes, n_live = {}, {}, 0  -- the members (j) of live leases
  for j = 1, n_members do
    local deadline = deadlines[j]
    if not deadline then
      n_stale = n_stale + 1
      stale[n_stale] = ids[at[j]]
    elseif tonumber(deadline) > 0 then
      n_live = n_live + 1
      live[n_live] = j
      prefixes[n_live] = string.match(tokens[at[j]], '^(.*~)%d+~%d+$') or ''
    end
  end
  local records = n_live > 0 and call_chunked('HMGET', claims, prefixes) or {}
  for m = 1, n_live do
    local j = live[m]
    local k = at[j]
    out[n_out + 1] = ids[k]
    out[n_out + 2] = tokens[k]
    out[n_out + 3] = deadlines[j]
    out[n_out + 4] = window[2 * k]
    out[n_out + 5] = records[m] or ''
    n_out = n_out + 5
  end
  found = found + n_live
  out[2] = window[2 * n]
  out[3] = window[2 * n - 1]
  if n < want then
    state = 'end'
    break
  end
end
if state ~= 'end' and redis.call('ZCARD', started) <= rank then state = 'end' end
out[1] = state
call_chunked('ZREM', started, stale)
return out
