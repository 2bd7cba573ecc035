-- An ack's check of one pair's leases (as lease_check.lua: each lease held with its deadline
-- ahead marked as ending, atomically with the check), then, for the leases held, its
-- delete's place among the pair's acks committed together (logic/ack_gathering.py):
-- | the leases held | the committer lock  | answer                   | after                 |
-- | none            | (not looked at)     | held, false, 'none'      | nothing more          |
-- | some            | free                | held, entry, 'commit',   | the lock taken (its   |
-- |                 |                     | the entries taken        | value the request),   |
-- |                 |                     |                          | the entries taken     |
-- | some            | the request's (a    | held, entry, 'commit'    | unchanged             |
-- |                 | call sent again)    |                          |                       |
-- | some            | another's           | held, entry, 'wait'      | the entry in line     |
-- "entries": the acks waiting in line, at most ARGV[4], oldest first; "entry": this ack's,
-- '<request> <ids> <attempts>' of the leases held (ids and attempts comma separated).
-- KEYS: 1 leased (lua/lease_keys.lua), 2 mailbox (list), 3 lock (string), 4 states (hash)
-- ARGV: 1 now_ms, 2 request, 3 lock_ms, 4 most entries taken,
--       then per lease: its member ('<id>|<token>') and its attempt
-- Returns {held (1 or 0 per lease, in order), entry or false, role, entry...}.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: lease_marks (the check and its marks: lua/lease_marks.lua)
-- include: ack_mailbox (the mailbox's join: lua/ack_mailbox.lua)

local now, request = tonumber(ARGV[1]), ARGV[2]
local lock_ms, most = tonumber(ARGV[3]), tonumber(ARGV[4])
local members, attempts, n = {}, {}, 0
for i = 5, #ARGV, 2 do
  n = n + 1
  members[n] = ARGV[i]
  attempts[n] = ARGV[i + 1]
end
local held = check_leases(KEYS[1], now, members, 1)
local ids, tries, k = {}, {}, 0
for i = 1, n do
  if held[i] == 1 then
    k = k + 1
    ids[k] = string.match(members[i], '^[^|]*')
    tries[k] = attempts[i]
  end
end
if k == 0 then
  return {held, false, 'none'}
end
local entry = request .. ' ' .. table.concat(ids, ',') .. ' ' .. table.concat(tries, ',')
local out = ack_join(KEYS[2], KEYS[3], KEYS[4], request, entry, lock_ms, most)
table.insert(out, 1, entry)
table.insert(out, 1, held)
return out
