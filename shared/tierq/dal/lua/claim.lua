#!lua flags=allow-oom
-- Claim up to N ready tasks of one (queue, tenant), in order, and lease each one.
-- The task data leaves Valkey with the claim: a retry is rebuilt from Postgres.
-- Called through `Claim` (dal/lua_calls.py), which names its keys and arguments in order:
-- | KEYS  | name           | what                                                          |
-- | 1-8   | ready .. started | the pair's keys: ready, data, leased, claims, meta, bucket (the tenant's token bucket), lease_of, started (lua/lease_keys.lua) |
-- | 9     | limits         | the pair's time limits of leases (lua/lease_keys.lua)          |
-- | 10-12 | pool, counts, bucket | the queue-wide take of the claim's first pair, on a single server only (the queue's slot) |
-- | ARGV  | name           | what                                                          |
-- | 1     | n              | tasks wanted                                                  |
-- | 2, 3  | now_ms, lease_ms | the caller's clock; the lease's length                      |
-- | 4     | token_prefix   | '<tenant>~<random>~'                                          |
-- | 5     | worker         | kept in the claim's record                                    |
-- | 6     | max_bytes      | what the tasks may cost in the response (0: no cap); past it a task and the rest go back in their places |
-- | 7     | strict_word    | 'strict': the first task is capped too (the caller already holds tasks of this claim) |
-- | 8     | per_task_bytes | the response's fields around a task's data                    |
-- | 9     | tenant_max_leased | this pair's leases whose deadline is ahead, at most (0: none) |
-- | 10, 11 | tenant_per_second, tenant_burst | the tenant's token bucket (KEYS 6, server clock, lua/token_bucket.lua; 0: none) |
-- | 12    | first_k        | the leases are numbered from first_k + 1                      |
-- | 13    | timeout_seconds | the queue's time limit of an attempt (0: none), for a task without one of its own ("to") |
-- | 14-19 | want, holder, max_held, rate_per_second, rate_burst, shares | with KEYS 10-12: the queue-wide take (lua/capacity_take.lua), made first with the lease's deadline; n is cut to ceil(granted / shares) |
-- The per-tenant limits are enforced here, atomically with the pop: n is cut to what they
-- allow before they are taken, and tokens taken for tasks not handed out are given back.
-- A task's cost is its JSON text's bytes, plus one byte for each quote and backslash (the
-- response body is a JSON string inside the runtime's JSON: each of those is escaped once
-- more), plus per_task_bytes. The count of quotes and backslashes comes with the blob
-- ('<attempts>|{"e":<count>,...', logic/admission.task_blob; taken as at most the JSON's
-- bytes); a blob written without it is counted here. While the tasks at their most (twice
-- their JSON's bytes, plus per_task_bytes) fit the budget, that decides as their costs
-- would and no count is read; from the first task that would not, the tasks handed out are
-- counted once and every later one exactly.
-- Returns { ready_left, mode, retry_ms, granted, then per task: id, attempt, lease_token,
--           json } (parsed by `Claim.parse`); a repeat (below) returns
--         { ready_left, 'repeat', 0, granted, then per lease: id, lease_token }.
-- A repeat is this very call run again after its reply was lost (a connection reset after
-- the send: dal/direct_calls.py and redis-py's cluster client send it once more). It pops
-- nothing and takes no limit: it answers the first run's leases, those of the claim's
-- record (claims[prefix]) that began at now (started) numbered past first_k, and the
-- caller gives them back through the release path (logic/claim.py). Its granted is what
-- a take riding with the first run granted, read from the pool's counts (KEYS 11); -1
-- without a take, or under a rate alone (no counts kept). A later pop of the same claim
-- and pair (the queue-wide limits keep the prefix) numbers its leases past those, so it
-- is no repeat.
-- retry_ms: 0, or the limits cut the claim and this is when trying again is worth it (the
-- next token; for a count, the earliest deadline, at most 1 s; the sooner of the
-- queue-wide take's and the tenant's). granted: what the queue-wide take granted, -1
-- without one (KEYS 10-12).
-- A lease is the member '<id>|<token>' of the leased set, scored by its deadline; the token
-- is '<prefix><attempt>~<k>', k = first_k + 1, first_k + 2, ... in the order handed out
-- (a claim under queue-wide limits numbers its leases on across its pairs: the k-th holds
-- its k-th reservation, lua/queue_capacity.lua). Checking or dropping a lease is then one ZMSCORE or ZREM of
-- that member (no script): a token that was not issued for this id names no member. Each
-- lease is also found by its task's id: lease_of[id] = token, and listed by when it began:
-- started[id] = now (running_page.lua reads them a page at a time). When and by whom the claim
-- was made is kept once per claim: claims[prefix] = '<now>|<worker>', with
-- claims[prefix .. '#'] counting its leases (the record goes with its last lease,
-- lua/lease_keys.lua).
-- A lease whose task has a time limit (its own "to", else the queue's, ARGV 13: the
-- caller's logic/time_limits.py) gets it here, with the lease: the member scored by
-- now + limit in `limits` (KEYS 9), and the lease's deadline is the sooner of its own and
-- that limit (the caller reports the same: now + min(lease_ms, limit)). No heartbeat
-- extends it past the limit (lease_extend.lua); the reaper tells a lease that ran out at
-- its limit from one that expired (lease_expired.lua, logic/time_limits.py split).
-- Valkey work is a fixed handful of variadic commands per claim, not several per task:
-- one HGET of the claim's count (a repeat, above), ZRANGE of the first in line, one HMGET
-- of the data, then ZREMRANGEBYRANK of those taken, HDEL and ZADD (leased), one HSET of
-- lease_of, one ZADD of started, one ZADD of limits (only when a task has a time limit)
-- and one HSET and HINCRBY of the claim.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: token_bucket (lua/token_bucket.lua)
-- include: capacity_pool (lua/capacity_pool.lua)
-- include: capacity_take (lua/capacity_take.lua)

local now = tonumber(ARGV[2])
local prefix = ARGV[4]
local budget = tonumber(ARGV[6] or '0')
local strict = ARGV[7] == 'strict'
local per_task = tonumber(ARGV[8] or '0')
local used = 0       -- what the tasks handed out cost: exactly once `exact`, else at most
local exact = false  -- (below: each task at its most, 2 bytes a JSON byte, until near the budget)
local freed = 0  -- bytes of the data handed out: the meta field 'bytes' (lua/warm_bytes.lua)
-- Formatted once per claim rather than once per task (number -> string is not cheap here).
-- '%.17g' is how Redis itself formats a Lua number argument, so ZADD gets the same score.
local deadline_arg = string.format('%.17g', now + tonumber(ARGV[3]))
local find = string.find
local byte, sub, match = string.byte, string.sub, string.match

-- What a task costs in the response (see above); sep is the position of the blob's '|'.
local function response_cost(blob, sep)
  local count = string.match(blob, '^{"e":(%d+),', sep + 1)
  if count then
    -- (no more than the JSON's bytes: the claim's bound below counts on it)
    count = math.min(tonumber(count), #blob - sep)
  else
    count = 0
    for _, char in ipairs({ '"', '\\' }) do
      local at = find(blob, char, sep + 1, true)
      while at do
        count = count + 1
        at = find(blob, char, at + 1, true)
      end
    end
  end
  return #blob - sep + count + per_task
end

-- A task's own time limit (its blob's "to", in seconds), or nil; sep is the position of the
-- blob's '|'. In a blob (logic/admission.task_blob) "to" is the last field but a trace
-- ("tr", an object), and nothing after the payload holds an unescaped '"to":' or '"tr":'
-- (JSON strings escape their quotes; a trace's keys are fixed names), so "to" is looked
-- for in the blob's last bytes only, or in those before its trace: a search reads at most
-- the blob's last TRACE_WINDOW bytes (more only for a longer trace), whatever the
-- payload's size.
local TO_FIELD_BYTES = 16  -- ',"to":' and a limit's digits (a week: 604800), at most
local TRACE_WINDOW = 2048  -- a trace's JSON is shorter (models/traces.py)
local function own_limit(blob, sep)
  local size = #blob
  local before = size  -- where "to" would end: at the blob's last '}', or at its trace
  if byte(blob, size - 1) == 125 then  -- '}}': a trace ends the blob (its field: the last ',"tr":{')
    local trace
    local window = TRACE_WINDOW
    while not trace do
      local from = math.max(sep + 1, size - window)
      local at = find(blob, ',"tr":{', from, true)
      while at do
        trace = at
        at = find(blob, ',"tr":{', at + 1, true)
      end
      if from == sep + 1 then break end
      window = window * 4
    end
    if not trace then return nil end
    before = trace
  end
  local at = find(blob, ',"to":', math.max(sep + 1, before - TO_FIELD_BYTES), true)
  if not at or at >= before then return nil end
  local seconds, ends = match(blob, '^,"to":(%d+)()', at)
  if ends ~= before then return nil end
  return tonumber(seconds)
end

local COUNT_RETRY_MS = 1000
local LEASE_OF_ENCODING = 'kept by tierq so that this hash stays in hashtable encoding '
  .. '(O(1) field access); see tierq/dal/lua/README.md'
local want = tonumber(ARGV[1])
local retry = 0
local tenant_max = tonumber(ARGV[9] or '0')
local rate = tonumber(ARGV[10] or '0')
local burst = tonumber(ARGV[11] or '0')
local first_k = tonumber(ARGV[12] or '0')
local granted = -1
local queue_retry = 0

-- The leases a first run of this call made (id, token, ...), or nil when it made none.
-- Read a page of the leases that began at now at a time, until the record's count of the
-- claim's leases is found: only the claims of this very millisecond are read.
local STARTED_PAGE = 1000
local function first_run()
  local held = tonumber(redis.call('HGET', KEYS[4], prefix .. '#') or '0')
  if held <= 0 then return nil end
  local found, n, seen, offset = {}, 0, 0, 0
  local len = #prefix
  while seen < held do
    local ids = redis.call('ZRANGEBYSCORE', KEYS[8], ARGV[2], ARGV[2], 'LIMIT', offset,
                           STARTED_PAGE)
    if #ids == 0 then break end
    local tokens = call_chunked('HMGET', KEYS[7], ids)
    for k = 1, #ids do
      local token = tokens[k]
      if token and sub(token, 1, len) == prefix then
        seen = seen + 1
        if tonumber(match(token, '~(%d+)$')) > first_k then
          found[n + 1] = ids[k]
          found[n + 2] = token
          n = n + 2
        end
      end
    end
    if #ids < STARTED_PAGE then break end
    offset = offset + STARTED_PAGE
  end
  if n == 0 then return nil end
  return found
end

local repeated = first_run()
if repeated then
  -- a take that rode with the first run: its grant, as the pool's counts keep it
  -- ('<granted>|<count>|<bitmap>', lua/capacity_pool.lua; none under a rate alone)
  local grant = -1
  if KEYS[10] then
    local entry = redis.call('HGET', KEYS[11], ARGV[15])
    if entry then grant = tonumber(match(entry, '^(%d+)|')) end
  end
  local out = { redis.call('ZCARD', KEYS[1]), 'repeat', 0, grant }
  for k = 1, #repeated do out[4 + k] = repeated[k] end
  return out
end

if KEYS[10] then
  granted, queue_retry = capacity_take(KEYS[10], KEYS[11], KEYS[12], tonumber(ARGV[14]), now,
                                       deadline_arg, ARGV[15], tonumber(ARGV[16]),
                                       tonumber(ARGV[17]), tonumber(ARGV[18]))
  local share = math.ceil(granted / tonumber(ARGV[19]))
  if share < want then want = share end
end
if tenant_max > 0 then
  local room = tenant_max - redis.call('ZCOUNT', KEYS[3], '(' .. ARGV[2], '+inf')
  if room < want then
    want = math.max(room, 0)
    local first = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[2], '+inf', 'WITHSCORES',
                             'LIMIT', 0, 1)
    retry = COUNT_RETRY_MS
    if first[2] then retry = math.max(1, math.min(COUNT_RETRY_MS, tonumber(first[2]) - now)) end
  end
end
if rate > 0 and want > 0 then
  local by_rate, rate_retry = bucket_take(KEYS[6], want, rate, burst)
  if by_rate < want then retry = rate_retry end
  want = by_rate
end
if queue_retry > 0 and (retry == 0 or queue_retry < retry) then retry = queue_retry end
local mode = redis.call('HGET', KEYS[5], 'mode') or 'cold'
if want <= 0 then
  return { redis.call('ZCARD', KEYS[1]), mode, retry, granted }
end

-- The first `want` in line, read by rank; the ones taken leave by rank after the loop
-- (ZREMRANGEBYRANK), so a task over the budget never leaves its place, and no score is
-- formatted for the reply (ZPOPMIN's scores cost more than the pop).
local popped = redis.call('ZRANGE', KEYS[1], 0, want - 1)
local out = { 0, mode, retry, granted }

local popped_ids = {}
local n_popped = #popped
for k = 1, n_popped do
  local member = popped[k]
  -- (task_of of lua/ready_member.lua, inline: once per task)
  if byte(member, 17) == 124 then member = sub(member, 18) end
  popped_ids[k] = member
end
-- HMGET keeps the order of its fields: blobs[k] belongs to popped_ids[k]
local blobs = call_chunked('HMGET', KEYS[2], popped_ids)

-- Per task the loop builds only what differs: a claim's tasks mostly share their attempt,
-- so '<prefix><attempt>~' is built once per attempt seen in a row, and the start is the
-- caller's text (a Lua number would be formatted once per task on its way to ZADD).
-- (tables are filled by counters: Lua's # operator searches for the border each time)
local n_taken = n_popped -- the first n_taken in line leave it (handed out, or without data)
local handed_ids = {}    -- for the variadic HDEL of their data
local n_handed = 0
local leased_args = {}   -- deadline, '<id>|<token>', ...
local lease_of_args = {} -- id, token, ...
local started_args = {}  -- now, id, ...
local now_arg = ARGV[2]
local attempts_seen, attempt, head = nil, 0, ''  -- the last blob's attempts, and its token head
-- k (the lease's place, first_k + 1, ...) as text: its tens formatted once per ten leases,
-- its last digit from DIGITS (a Lua number is formatted by sprintf each time it is joined)
local DIGITS = { '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' }
local k_tens, k_unit = math.floor(first_k / 10), first_k % 10  -- the last k handed out
local tens_text = k_tens > 0 and tostring(k_tens) or ''
-- time limits: the queue's (seconds, nil for none), each limit's score text by its seconds
-- (formatted once per claim and limit), and the pairs for `limits`
local lease_ms = tonumber(ARGV[3])
local queue_limit = tonumber(ARGV[13] or '0')
if queue_limit == 0 then queue_limit = nil end
local limit_texts = {}
local limits_args = {}   -- limit, '<id>|<token>', ...
local n_limited = 0
local n_out = 4
for k = 1, n_popped do
  local id = popped_ids[k]
  local blob = blobs[k]
  local sep = blob and find(blob, '|', 1, true)
  local cost = 0
  if blob and budget > 0 and not exact then
    -- far from the budget a task's most (its JSON's bytes twice) decides as its cost would;
    -- near it, the tasks handed out are counted once and every later one exactly
    local most = 2 * (#blob - sep) + per_task
    if used + most <= budget then
      cost = most
    else
      exact = true
      used = 0
      for j = 1, k - 1 do
        local before = blobs[j]
        if before then used = used + response_cost(before, find(before, '|', 1, true)) end
      end
    end
  end
  if blob and exact then
    cost = response_cost(blob, sep)
    if (n_out > 4 or strict) and used + cost > budget then
      -- over the budget: this one and the rest (even those without data, as before) keep
      -- their places in line
      n_taken = k - 1
      break
    end
  end
  if blob then
    used = used + cost
    freed = freed + #blob
    local attempts = sub(blob, 1, sep - 1)
    if attempts ~= attempts_seen then
      attempts_seen = attempts
      attempt = tonumber(attempts) + 1
      head = prefix .. attempt .. '~'
    end
    n_handed = n_handed + 1
    -- numbered on from first_k: a claim under queue-wide limits holds reservation k for lease k
    k_unit = k_unit + 1
    if k_unit == 10 then
      k_unit, k_tens = 0, k_tens + 1
      tens_text = tostring(k_tens)
    end
    local token = head .. tens_text .. DIGITS[k_unit + 1]
    local at = 2 * n_handed
    local member = id .. '|' .. token
    local deadline = deadline_arg
    local limit = own_limit(blob, sep) or queue_limit
    if limit then
      local limit_text = limit_texts[limit]
      if not limit_text then
        limit_text = string.format('%.17g', now + limit * 1000)
        limit_texts[limit] = limit_text
      end
      n_limited = n_limited + 1
      limits_args[2 * n_limited - 1] = limit_text
      limits_args[2 * n_limited] = member
      if limit * 1000 < lease_ms then deadline = limit_text end
    end
    handed_ids[n_handed] = id
    leased_args[at - 1] = deadline
    leased_args[at] = member
    lease_of_args[at - 1] = id
    lease_of_args[at] = token
    started_args[at - 1] = now_arg
    started_args[at] = id
    out[n_out + 1] = id
    out[n_out + 2] = attempt
    out[n_out + 3] = token
    out[n_out + 4] = sub(blob, sep + 1)
    n_out = n_out + 4
  end
  -- an id without data is a leftover of a partial loss; the reconciler re-dispatches it
end

if n_taken > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n_taken - 1) end
call_chunked('HDEL', KEYS[2], handed_ids)
if freed > 0 then redis.call('HINCRBY', KEYS[5], 'bytes', -freed) end
call_chunked('ZADD', KEYS[3], leased_args)
call_chunked('ZADD', KEYS[9], limits_args)
if n_handed > 0 then
  -- lease_of keeps a field '~encoding' longer than hash-max-listpack-value, as the data hash
  -- does (README, "Small calls"): its few dozen leases in flight are then found by hash, not
  -- by a scan of a listpack for each id a claim writes and a drop reads
  lease_of_args[2 * n_handed + 1] = '~encoding'
  lease_of_args[2 * n_handed + 2] = LEASE_OF_ENCODING
end
call_chunked('HSET', KEYS[7], lease_of_args)
call_chunked('ZADD', KEYS[8], started_args)
if n_handed > 0 then
  redis.call('HSET', KEYS[4], prefix, now .. '|' .. ARGV[5])
  redis.call('HINCRBY', KEYS[4], prefix .. '#', n_handed)
end
if rate > 0 then bucket_give(KEYS[6], want - n_handed, burst) end
out[1] = redis.call('ZCARD', KEYS[1])
return out
