-- Shared by the scripts that say `-- include: lease_keys` (after call_chunked; lua/README.md,
-- "Leases"). A pair's leases live in three keys that the scripts always change together,
-- and a fourth that lists them:
-- | key      | type       | holds                                                         |
-- | leased   | sorted set | '<id>|<token>' -> deadline (epoch ms; 0 while the reaper reaps it; half a millisecond more once an ack or a nack checked it: lease_check.lua) |
-- | lease_of | hash       | id -> the token of its lease (one HGET, then one ZSCORE of '<id>|<token>', finds a task's lease by its id), or '~r<ms>' for a lease a release took back at <ms> and whose task it is about to push again (the reconciler leaves it to the release until its cutoff has passed <ms>: missing.lua; the task's next lease or push replaces it) |
-- | claims   | hash       | '<prefix>' -> '<started_ms>|<worker>', and '<prefix>#' -> how many of that claim's leases `leased` holds; both go with the claim's last lease |
-- | started  | sorted set | id -> when its lease's claim began (epoch ms): the running leases a page at a time in start order (running_page.lua) |
-- | progress | hash       | id -> '<token>|<ms>|<json>': the last progress its lease's heartbeats carried (lease_progress.lua); its bytes are counted in the meta field `progress` (lua/warm_usage.lua) |
-- | limits   | sorted set | '<id>|<token>' -> the attempt's time limit (epoch ms) of a lease that has one (written by claim.lua with the lease): no deadline passes it (lease_extend.lua) |
-- A token is '<tenant>~<random>~<attempt>~<k>'; its claim's prefix is '<tenant>~<random>~'.
-- Every path that ends a lease ends it here: the member leaves `leased` (and `limits`), its id
-- leaves `lease_of` and `started` only while that entry still names this very token (an older
-- token never erases a newer lease's entries), and its claim's count goes down; given the
-- pair's `progress` and `meta`, the lease's progress goes with it (only while it names this
-- token).

-- The meta field that counts the bytes of the pair's progress entries (lua/warm_usage.lua).
local PROGRESS_FIELD = 'progress'

-- Removes the progress entries of `ids` that name the token at the same place in `tokens`
-- (a newer lease's entry stays) and takes their bytes off the meta field `progress`.
local function lease_progress_drop(progress, meta, ids, tokens)
  local values = call_chunked('HMGET', progress, ids)
  local gone, n, freed = {}, 0, 0
  for k = 1, #ids do
    local value = values[k]
    if value and string.sub(value, 1, #tokens[k] + 1) == tokens[k] .. '|' then
      n = n + 1
      gone[n] = ids[k]
      freed = freed + #value
    end
  end
  if n == 0 then return end
  call_chunked('HDEL', progress, gone)
  if redis.call('HINCRBY', meta, PROGRESS_FIELD, -freed) < 0 then
    redis.call('HSET', meta, PROGRESS_FIELD, 0)  -- (drift: never below nothing)
  end
end

-- The claim prefix of a token, or nil for a token of another shape.
local function lease_prefix(token)
  return string.match(token, '^(.*~)%d+~%d+$')
end

-- The attempt a token leases (0 for a token of another shape).
local function lease_attempt(token)
  return tonumber(string.match(token, '~(%d+)~%d+$') or '0')
end

-- Ends those of `members` ('<id>|<token>') that `leased` holds and, when `after` is given,
-- whose deadline is after it and unmarked (a release: an ack or a nack that checked the lease,
-- lease_check.lua, ends it instead); a member named twice is ended once. An id whose lease_of
-- entry named the lease ended is removed from lease_of (or set to `mark` when given) and
-- from started. With `progress` (and `meta`), each lease's progress entry is removed too and
-- its bytes taken off the meta field `progress`. Returns the members ended, in the order
-- given. Work: ZMSCORE, ZREM, HMGET, HDEL (or HSET), ZREM, and an HINCRBY per claim; when
-- `limits` is given, an EXISTS and, while the key exists, a ZREM; with `progress`, an EXISTS
-- and, while the key exists, an HMGET and, when some lease had progress, an HDEL and an
-- HINCRBY.
local function lease_drop(leased, lease_of, claims, started, members, after, mark, progress,
                          meta, limits)
  if #members == 0 then return {} end
  local scores = call_chunked('ZMSCORE', leased, members)
  local gone, ids, tokens, n_gone = {}, {}, {}, 0
  local seen = {}
  for i = 1, #members do
    local member = members[i]
    local score = scores[i]
    if score and not seen[member]
        and (after == nil or (tonumber(score) > after and tonumber(score) % 1 == 0)) then
      seen[member] = true
      local bar = string.find(member, '|', 1, true)
      n_gone = n_gone + 1
      gone[n_gone] = member
      ids[n_gone] = bar and string.sub(member, 1, bar - 1) or member
      tokens[n_gone] = bar and string.sub(member, bar + 1) or ''
    end
  end
  if n_gone == 0 then return gone end
  call_chunked('ZREM', leased, gone)
  -- (a pair whose tasks have no time limit nor progress holds neither key: one EXISTS each
  -- spares the variadic command of every member)
  if limits and redis.call('EXISTS', limits) == 1 then call_chunked('ZREM', limits, gone) end
  local named = call_chunked('HMGET', lease_of, ids)
  local clear, n_clear = {}, 0  -- ids, or id, mark, ... with a mark
  local unstarted, n_unstarted = {}, 0  -- the ids whose lease this was
  local per_claim, claim_order = {}, {}
  local last_prefix, last_len = nil, 0  -- the claim of the lease before: most share it
  for k = 1, n_gone do
    if named[k] == tokens[k] then
      n_unstarted = n_unstarted + 1
      unstarted[n_unstarted] = ids[k]
      n_clear = n_clear + 1
      clear[n_clear] = ids[k]
      if mark then
        n_clear = n_clear + 1
        clear[n_clear] = mark
      end
    end
    local token = tokens[k]
    local prefix
    if last_prefix and string.sub(token, 1, last_len) == last_prefix
        and string.find(token, '^%d+~%d+$', last_len + 1) then
      prefix = last_prefix  -- (what lease_prefix answers: the rest has no room for a '~' more)
    else
      prefix = lease_prefix(token)
      if prefix then last_prefix, last_len = prefix, #prefix end
    end
    if prefix then
      if per_claim[prefix] == nil then
        per_claim[prefix] = 0
        claim_order[#claim_order + 1] = prefix
      end
      per_claim[prefix] = per_claim[prefix] + 1
    end
  end
  call_chunked(mark and 'HSET' or 'HDEL', lease_of, clear)
  call_chunked('ZREM', started, unstarted)
  if progress and redis.call('EXISTS', progress) == 1 then
    lease_progress_drop(progress, meta, ids, tokens)
  end
  for _, prefix in ipairs(claim_order) do
    -- (a claim made before the counts existed has none: its record goes with its first
    -- lease to end, which only costs the view its worker and start)
    if redis.call('HINCRBY', claims, prefix .. '#', -per_claim[prefix]) <= 0 then
      redis.call('HDEL', claims, prefix, prefix .. '#')
    end
  end
  return gone
end

-- The leases `lease_of` names for `ids` that `leased` holds: a table k -> token for the ids
-- (by position) that hold one. With `released_after`, a release's mark ('~r<ms>') of <ms> at
-- or after it counts too (k -> the mark). Other entries — a mark older than that (or any,
-- without it), an entry naming a lease `leased` does not hold (left by a tierq that ended
-- leases without this piece) — are removed on the way: the task holds no lease.
-- Work: HMGET, and a ZMSCORE and HDEL when some id has an entry.
local function lease_held(leased, lease_of, ids, released_after)
  local held = {}
  if #ids == 0 then return held end
  local named = call_chunked('HMGET', lease_of, ids)
  local members, at, n = {}, {}, 0
  local stale, n_stale = {}, 0
  for k = 1, #ids do
    local value = named[k]
    if value and string.sub(value, 1, 2) == '~r' then
      if released_after and tonumber(string.sub(value, 3)) >= released_after then
        held[k] = value
      else
        n_stale = n_stale + 1
        stale[n_stale] = ids[k]
      end
    elseif value then
      n = n + 1
      members[n] = ids[k] .. '|' .. value
      at[n] = k
    end
  end
  local scores = n > 0 and call_chunked('ZMSCORE', leased, members) or {}
  for j = 1, n do
    local k = at[j]
    if scores[j] then
      held[k] = named[k]
    else
      n_stale = n_stale + 1
      stale[n_stale] = ids[k]
    end
  end
  call_chunked('HDEL', lease_of, stale)
  return held
end
