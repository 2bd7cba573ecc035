-- A waiting ack looks at its pair's mailbox again (logic/ack_gathering.py): it joined with
-- ack_check_join.lua and had no answer within its wait.
-- | state                                   | answer            | after                    |
-- | an answer waits in its reply list       | reply, the answer | the answer taken         |
-- | the lock is its own (a look sent again) | commit            | unchanged                |
-- | in line, the lock held                  | wait              | unchanged                |
-- | in line, the lock free                  | commit, entries   | the entry out, the lock  |
-- |                                         |                   | taken, the others out    |
-- | taken, the lock its taker's             | wait              | unchanged                |
-- | taken, the lock not its taker's, or     | orphan            | its state dropped: the   |
-- | no state, and no answer                 |                   | taker stopped; the       |
-- |                                         |                   | caller commits alone     |
-- "entries": the other acks waiting in line, at most ARGV[3], oldest first.
-- KEYS: 1 mailbox (list), 2 lock (string), 3 states (hash), 4 this request's reply list
-- ARGV: 1 entry ('<request> <ids> <attempts>'), 2 lock_ms, 3 most entries taken
-- Returns {'reply', answer}, {'wait'}, {'commit', entry...} or {'orphan'}.

-- include: ack_mailbox (the mailbox's take: lua/ack_mailbox.lua)

local entry, lock_ms, most = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local request = ack_request(entry)
local answer = redis.call('LPOP', KEYS[4])
if answer then
  return {'reply', answer}
end
local holder = redis.call('GET', KEYS[2])
if holder == request then
  return {'commit'}
end
local state = redis.call('HGET', KEYS[3], request)
if state == '' then
  if holder then
    return {'wait'}
  end
  redis.call('LREM', KEYS[1], 1, entry)
  redis.call('HDEL', KEYS[3], request)
  redis.call('SET', KEYS[2], request, 'PX', lock_ms)
  return ack_commit(KEYS[1], KEYS[3], request, most, 2 * lock_ms)
end
if state and state == holder then
  return {'wait'}
end
redis.call('HDEL', KEYS[3], request)
return {'orphan'}
