-- Push ready tasks into the warm set of one (queue, tenant), never beyond warm_max tasks
-- nor warm_max_bytes bytes of task data (an empty warm set takes one task whatever its size,
-- so that no task is too large to ever be delivered).
-- Called through `PushReady` (dal/lua_calls.py), which names its keys and arguments in order:
-- | KEYS | ready, data, meta, inflight, leased, lease_of, gone, newer, newer_at, finished, finished_prev |
-- | ARGV | name           | what                                                             |
-- | 1    | warm_max       | tasks the warm set holds at most                                 |
-- | 2    | kind           | 'new', 'enqueue', 'promote' or 'restore' (below)                 |
-- | 3, 4 | now_ms, token  | the caller's clock; the admission's token                        |
-- | 5    | warm_max_bytes | bytes of task data the warm set holds at most                    |
-- | 6    | since_ms       | when the admission began (at or before its rows' `state_since`)  |
-- | 7    | bound          | the tenant's bound: '' (none), 'ask' or 'strict' (below)         |
-- | 8    | grant          | bytes just taken for this pair from its tenant's ledger (lua/warm_ledger.lua), added to the allotment first |
-- | 9, 10 | charge, keep  | per task charge; allotment kept beyond usage (lua/warm_usage.lua) |
-- | then | score, member .. | per task (score, member) as ZADD takes them (core/ordering.py place), then per task (id, blob) as HSET does, in the same order |
--   enqueue: work that became ready (due, retried, replayed); refused outright while the
--            queue is in cold mode (hysteresis).
--   new: tasks created by this very enqueue, as 'enqueue'; their ids were just made, so no
--        copy can be in line already: the look-up is skipped, and the pairs go to ZADD and
--        HSET as they came (no table built per task). An enqueue whose admission found
--        room (the meta field `rsv:<token>`, lua/admission_begin.lua) is not refused for
--        the cold mode: it began while the pair was warm.
--   promote: the cold -> warm mover; restore: the reconciler re-pushing rows Valkey lost.
--            Both only need room: they are the oldest work of their line.
-- One live lease per task (docs/architecture.md §8):
--   a push whose admission began before the pair's fence is late. The fence is the meta
--     field `fence`, raised by the reconciler when it takes rows over (missing.lua). Nothing
--     of a late push is written, and { 'late' } is returned (the reconciler pushes those
--     rows itself);
--   a task that holds a lease for a later attempt than the one its blob carries (found by
--     id: lease_of, lua/lease_keys.lua) is left out, as one already in line is: a worker
--     holds it. ('new' tasks are not looked up: their ids were made by this admission, so
--     only the reconciler can have put them in Valkey before, and that fenced this push.)
-- A task cancelled or deleted meanwhile (its id in `gone`, the tombstones lua/remove.lua
-- writes for a cancel or delete) is left out: neither accepted nor refused, so its row is
-- not marked cold either (a push may have read it as ready before the cancel committed).
-- That costs one EXISTS of `gone` per call, and while the pair holds a tombstone the
-- removal of the lapsed ones and one ZMSCORE of the ids.
-- A task replaced (on_conflict = replace) while it was not waiting has its replacement in
-- `newer` (lua/update_ready.lua): a push that read it before the replace committed carries
-- the old blob, so a task whose entry has a seq at least its push's (the same readiness, or
-- a later one) is written with the entry's score, member and blob instead, and the entry
-- goes. A task whose entry is a mark (a replacement the pair could not keep,
-- lua/newer_entries.lua) is refused instead, and every later one with it: it waits cold,
-- and its promotion reads the replaced row. An entry with a smaller seq is older than the
-- push's read and goes unused, as does the entry of a task the call refuses (it waits
-- cold, read again from PostgreSQL when promoted). That costs one EXISTS of `newer_at` per
-- call; while the pair holds entries, one HMGET of the ids and the removal of at most 100
-- lapsed ones.
-- A task already waiting keeps its place (ZADD NX semantics, by id: its blob is in the data
-- hash, lua/ready_member.lua); so does the second copy of an id listed twice (the first
-- copy is the one accepted). Once one task is refused, every later one is too (a smaller
-- one that would still fit must not pass it).
-- Anything refused makes the queue cold and registers the caller's admission as in flight
-- (the caller marks those rows cold in Postgres, then calls admission_end).
-- The meta field `bytes` counts the data held (lua/warm_bytes.lua).
-- A tenant's share (bound, grant, charge, keep; lua/warm_usage.lua): the pair's usage stays within its
-- allotment (meta `allot`). The usage counts the pair's tombstones, `newer` entries and
-- completion markers; an entry the push writes leaves them as its task's data joins.
-- Markers give way to the tasks it accepts when these would pass the allotment and the
-- drop makes the room (lua/warm_usage.lua); otherwise none goes. A push refused for the
-- cold mode or its own bounds drops none.
--   ask: when the tasks that fit the pair's own bounds would take the usage past the
--        allotment even with the markers gone (else those go, and the push goes on), no
--        task is written and { 'allot', bytes short } is returned: the
--        caller takes that much from the ledger and pushes again, 'strict', with it as
--        `grant`. A caller that expects to be short takes a grant first and asks with it
--        (the grant is added to the allotment even when the push is still short).
--   strict: a task that would take the usage past the allotment is refused (and every
--        later one, as above). The rule that an empty warm set takes one task does not
--        lift this bound.
--   Either way, an allotment more than 2 * keep over the usage after the push is lowered
--   to usage + keep, and the difference returned, with the pair's count of bytes given
--   back so far (meta `freed`): the caller reports that count to the ledger.
-- Returns { mode_after, bytes given back, freed count (0 when none given back), tasks
-- waiting before the push, allotment left beyond the usage after it (0 without a bound),
-- tasks left out as cancelled or deleted, refused_id, ... }, { 'late' } or
-- { 'allot', bytes short }. The
-- tasks waiting before tell the caller whether the pair's tenant must be entered in its
-- queue's ready-tenant index (logic/ready_tenants.py): only a push into an empty line must.
-- Valkey work for the tasks: one ZCARD of `gone` (its ZMSCORE while it exists); not for
-- 'new': one HMGET of lease_of (and one ZMSCORE of the
-- leases it names: Redis >= 6.2) and one HEXISTS per task; then one ZADD and one HSET of
-- the accepted ones, however many tasks.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)
-- include: lease_keys (a lease's three keys: lua/lease_keys.lua)
-- include: warm_usage (a tenant's share: lua/warm_usage.lua)
-- include: newer_entries (replacements for pushes on their way: lua/newer_entries.lua)

-- One field whose value is longer than hash-max-listpack-value (64 bytes by default) keeps
-- the data hash in hashtable encoding even while it is small. A listpack finds a field by
-- scanning, and up to hash-max-listpack-entries (512) fields that made every HSET and HMGET
-- of a batch a scan per task. It also keeps the hash from being deleted and made again each
-- time the warm set runs empty. No task id looks like it.
local ENCODING_FIELD = '~encoding'
local ENCODING_VALUE = 'kept by tierq so that this hash stays in hashtable encoding '
  .. '(O(1) field access); see tierq/dal/lua/README.md'

local warm_max = tonumber(ARGV[1])
local kind = ARGV[2]
local max_bytes = tonumber(ARGV[5])
local n = (#ARGV - 10) / 4
local ZS = 11             -- ARGV[ZS + 2k - 2] = score of task k, ARGV[ZS + 2k - 1] = member
local HS = 11 + 2 * n     -- ARGV[HS + 2k - 2] = id of task k, ARGV[HS + 2k - 1] = its blob
local bound = ARGV[7]     -- '' | 'ask' | 'strict'
local charge = tonumber(ARGV[9])

if tonumber(ARGV[6]) < tonumber(redis.call('HGET', KEYS[3], 'fence') or '0') then
  return { 'late' }
end
-- an admission that found room in the warm set (admission_begin.lua) is pushed even if
-- the pair turned cold since: it began before that (its first call that writes uses the
-- record up)
-- the tasks cancelled or deleted since the caller read them (k -> true): left out
local gone, n_gone = {}, 0
local stones = redis.call('ZCARD', KEYS[7])  -- (they count against the tenant's share)
if stones > 0 then
  -- lapsed tombstones go first (scored by when they lapse, lua/remove.lua): a pair whose
  -- cancels stopped loses the key, and its pushes the look-up
  stones = stones - redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', '(' .. ARGV[3])
  local names = {}
  for k = 1, n do names[k] = ARGV[HS + 2 * k - 2] end
  local at = call_chunked('ZMSCORE', KEYS[7], names)
  for k = 1, n do
    if at[k] then
      gone[k] = true
      n_gone = n_gone + 1
    end
  end
end
-- the replacements written since the caller read them (k -> { score, member, blob, the
-- entry's cost }; a mark's blob is false), and the ids whose entries go
local newer, n_newer = {}, 0
local spent, n_spent = {}, 0
if redis.call('EXISTS', KEYS[9]) == 1 then
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', '(' .. ARGV[3], 'LIMIT', 0, 100)
  newer_drop(KEYS[3], KEYS[8], KEYS[9], lapsed)
  local names = {}
  for k = 1, n do names[k] = ARGV[HS + 2 * k - 2] end
  local got = call_chunked('HMGET', KEYS[8], names)
  for k = 1, n do
    if got[k] and not gone[k] then
      local score, member, blob = newer_parse(got[k])
      if score and seq_key(score, member)
          >= seq_key(ARGV[ZS + 2 * k - 2], ARGV[ZS + 2 * k - 1]) then
        newer[k] = { score, member, blob, newer_cost(#got[k]) }
        n_newer = n_newer + 1
      else  -- older than this push's read
        n_spent = n_spent + 1
        spent[n_spent] = names[k]
      end
    end
  end
end
-- what task k is pushed as: its (score, member, blob), the replacement's when it has one
local function score_of(k) return newer[k] and newer[k][1] or ARGV[ZS + 2 * k - 2] end
local function member_of(k) return newer[k] and newer[k][2] or ARGV[ZS + 2 * k - 1] end
local function blob_of(k) return newer[k] and newer[k][3] or ARGV[HS + 2 * k - 1] end
-- whether task k's replacement could not be kept (a mark): it is refused
local function marked(k) return newer[k] ~= nil and not newer[k][3] end
-- what task k's entry counts against the share: it goes once the task is written
local function credit(k) return newer[k] and newer[k][4] or 0 end
-- a replacement used: its entry goes
local function used(k)
  if newer[k] then
    n_spent = n_spent + 1
    spent[n_spent] = ARGV[HS + 2 * k - 2]
  end
end
local reserved = kind == 'new' and redis.call('HEXISTS', KEYS[3], 'rsv:' .. ARGV[4]) == 1
local mode = redis.call('HGET', KEYS[3], 'mode')
if not mode then
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold', 'epoch', 0)
end
local size = redis.call('ZCARD', KEYS[1])
local ready_before = size
local bytes = warm_bytes(KEYS[3], KEYS[2], size)
local bytes_before = bytes
local allot_before, allot, usage, markers = 0, 0, 0, 0
if bound ~= '' then
  allot_before = warm_allot(KEYS[3])
  allot = allot_before + tonumber(ARGV[8])
  markers = warm_markers(KEYS[10], KEYS[11])
  usage = warm_usage(size, KEYS[5], bytes, charge, KEYS[3], stones, markers)
end
-- the pair's completion markers give way to tasks `over` bytes past the allotment
-- (lua/warm_usage.lua); whether any went
local function make_room(over)
  local freed = warm_markers_give_way(KEYS[3], KEYS[10], KEYS[11], over, markers)
  markers = markers - freed / MARKER_CHARGE
  usage = usage - freed
  return freed > 0
end
-- whether one more task of this many bytes fits (count, bytes and, strict, the allotment;
-- `paid`: what its entry, which goes, counts already)
local function fits(blob_bytes, paid)
  if not (size < warm_max and (size == 0 or bytes + blob_bytes <= max_bytes)) then
    return false
  end
  local over = usage + blob_bytes + charge - paid - allot
  return bound ~= 'strict' or over <= 0
    or (make_room(over) and usage + blob_bytes + charge - paid <= allot)
end
-- 'ask': the accepted tasks would pass the allotment: nothing written, how much is short
-- (a grant that came with the asking push is the pair's all the same: written first)
local function short()
  if bound == 'ask' and usage > allot and usage - markers * MARKER_CHARGE <= allot then
    make_room(usage - allot)  -- (short only for the markers: they give way)
  end
  if bound == 'ask' and usage > allot then
    if allot ~= allot_before then redis.call('HSET', KEYS[3], ALLOT_FIELD, allot) end
    return usage - allot
  end
  return nil
end
local admits = (kind == 'enqueue' or kind == 'new')
local refused = {}
local n_refused = 0
-- the ids, and the leases they hold (lua/lease_keys.lua): not for 'new' (see above)
local ids, held = {}, {}
if kind ~= 'new' then
  for k = 1, n do ids[k] = ARGV[HS + 2 * k - 2] end
  held = lease_held(KEYS[5], KEYS[6], ids)  -- k -> the token of its lease
end
-- whether task k is held by a worker for a later attempt than its blob carries
local function held_later(k)
  return held[k] ~= nil and lease_attempt(held[k])
    > tonumber(string.match(ARGV[HS + 2 * k - 1], '^(%d+)|') or '0')
end

if admits and mode == 'cold' and not reserved then
  for k = 1, n do
    if not (gone[k] or held_later(k)) then
      n_refused = n_refused + 1
      refused[n_refused] = ARGV[HS + 2 * k - 2]
    end
  end
elseif kind == 'new' then
  -- the first tasks that fit are accepted, the rest refused; read from ARGV as it came,
  -- or, when some are left out as gone, from a copy of the others' arguments in the same
  -- two columns
  local src, zs, hs, m = ARGV, ZS, HS, n
  local kept = {}  -- j -> k: the task of the copy's j-th row
  if n_gone > 0 or n_newer > 0 then
    src, m = {}, n - n_gone
    local j = 0
    for k = 1, n do
      if not gone[k] then
        j = j + 1
        kept[j] = k
        src[2 * j - 1] = score_of(k)
        src[2 * j] = member_of(k)
        src[2 * m + 2 * j - 1] = ARGV[HS + 2 * k - 2]
        src[2 * m + 2 * j] = blob_of(k)
      end
    end
    zs, hs = 1, 2 * m + 1
  end
  local take = 0
  while take < m do
    local k = kept[take + 1]
    local paid = k and credit(k) or 0
    if k and marked(k) then break end
    local blob_bytes = #src[hs + 2 * take + 1]
    if not fits(blob_bytes, paid) then break end
    take = take + 1
    size = size + 1
    bytes = bytes + blob_bytes
    usage = usage + blob_bytes + charge - paid
  end
  local missing = short()
  if missing then return { 'allot', missing } end
  if take > 0 then
    redis.call('HSET', KEYS[2], ENCODING_FIELD, ENCODING_VALUE)
    call_chunked('ZADD', KEYS[1], src, zs, zs + 2 * take - 1)
    call_chunked('HSET', KEYS[2], src, hs, hs + 2 * take - 1)
    if n_newer > 0 then
      for j = 1, take do used(kept[j]) end
    end
  end
  for k = take + 1, m do
    n_refused = n_refused + 1
    refused[n_refused] = src[hs + 2 * k - 2]
  end
else
  local accepted = {}      -- id -> true: a later copy in this batch finds it in line
  local ready_args = {}    -- score, member, ...
  local data_args = {}     -- id, blob, ...
  local n_args = 0
  for k = 1, n do
    local id = ids[k]
    local blob = blob_of(k)
    if gone[k] then
      -- cancelled or deleted since the caller read it: left out
    elseif accepted[id] or waiting(KEYS[2], id) then
      -- already waiting in line: it keeps its place
    elseif held_later(k) then
      -- a worker holds it for a later attempt than this push knows: it is not added
    elseif n_refused == 0 and not marked(k) and fits(#blob, credit(k)) then
      accepted[id] = true
      used(k)
      ready_args[n_args + 1] = score_of(k)
      ready_args[n_args + 2] = member_of(k)
      data_args[n_args + 1] = id
      data_args[n_args + 2] = blob
      n_args = n_args + 2
      size = size + 1
      bytes = bytes + #blob
      usage = usage + #blob + charge - credit(k)
    else
      n_refused = n_refused + 1
      refused[n_refused] = id
    end
  end
  local missing = short()
  if missing then return { 'allot', missing } end
  if n_args > 0 then
    redis.call('HSET', KEYS[2], ENCODING_FIELD, ENCODING_VALUE)
  end
  call_chunked('ZADD', KEYS[1], ready_args)
  call_chunked('HSET', KEYS[2], data_args)
end
-- a refused task waits cold and is read again from PostgreSQL when promoted: its entry is
-- stale (kept, a later replace of the cold row would lose to it)
if n_newer > 0 then
  for _, id in ipairs(refused) do
    n_spent = n_spent + 1
    spent[n_spent] = id
  end
end
newer_drop(KEYS[3], KEYS[8], KEYS[9], spent)
if reserved then redis.call('HDEL', KEYS[3], 'rsv:' .. ARGV[4]) end
add_warm_bytes(KEYS[3], bytes - bytes_before)
local given_back, freed = 0, 0
if bound ~= '' then
  local keep = tonumber(ARGV[10])
  if allot > usage + 2 * keep then
    given_back = allot - (usage + keep)
    freed = warm_give_back(KEYS[3], allot, usage + keep)
  elseif allot ~= allot_before then
    redis.call('HSET', KEYS[3], ALLOT_FIELD, allot)
  end
end
if n_refused > 0 then
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold')
  redis.call('HINCRBY', KEYS[3], 'epoch', 1)
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
elseif admits and mode == 'warm' and (size >= warm_max or bytes >= max_bytes) then
  -- the warm set reached 100% of warm_max or warm_max_bytes: what comes next goes cold
  mode = 'cold'
  redis.call('HSET', KEYS[3], 'mode', 'cold')
  redis.call('HINCRBY', KEYS[3], 'epoch', 1)
end
table.insert(refused, 1, n_gone)
table.insert(refused, 1, bound ~= '' and math.max(0, allot - usage) or 0)
table.insert(refused, 1, ready_before)
table.insert(refused, 1, freed)
table.insert(refused, 1, given_back)
table.insert(refused, 1, mode)
return refused
