-- A waiting ack looks at its pair's mailbox again (logic/ack_gathering.py): it joined with
-- ack_check_join.lua and had no answer within its wait.
-- | state                                   | answer            | after                    |
-- | an answer waits in its reply list       | reply, the answer | the answer taken         |
-- | the lock is its own (a look sent again) | commit            | unchanged                |
-- | in line, the lock held                  | wait              | unchanged                |
-- | in line, the lock free                  | commit, entries   | the entry out, the lock  |
-- |                                         |                   | taken, the others out    |
-- | taken, its taker holds the lock         | wait              | unchanged                |
-- | taken, the lock not its taker's,        | orphan            | unchanged: the taker     |
-- | no answer                               |                   | stopped; the caller      |
-- |                                         |                   | commits alone            |
-- "entries": the other acks waiting in line, at most ARGV[3], oldest first.
-- KEYS: 1 mailbox (list), 2 lock (string), 3 taken (hash), 4 this request's reply list
-- ARGV: 1 entry ('<request> <ids> <attempts>'), 2 lock_ms, 3 most entries taken
-- Returns {'reply', answer}, {'wait'}, {'commit', entry...} or {'orphan'}.

-- include: ack_mailbox (the mailbox's take: lua/ack_mailbox.lua)

local entry, lock_ms, most = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local answer = redis.call('LPOP', KEYS[4])
if answer then
  return {'reply', answer}
end
local holder = redis.call('GET', KEYS[2])
if holder == entry then
  return {'commit'}
end
if redis.call('LPOS', KEYS[1], entry) then
  if holder then
    return {'wait'}
  end
  redis.call('LREM', KEYS[1], 1, entry)
  redis.call('SET', KEYS[2], entry, 'PX', lock_ms)
  return ack_commit(KEYS[1], KEYS[3], entry, most, 2 * lock_ms)
end
local taker = redis.call('HGET', KEYS[3], string.match(entry, '^[^ ]*'))
if taker and taker == holder then
  return {'wait'}
end
return {'orphan'}
