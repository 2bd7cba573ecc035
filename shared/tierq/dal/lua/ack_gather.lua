-- An ack's delete joins its pair's acks committed together (logic/ack_gathering.py): the
-- first ack to find the pair's committer lock free takes it and commits the acks waiting
-- in the mailbox with its own; the others wait in the mailbox for their answer.
-- | mode | state                                      | answer            | after                  |
-- | join | the lock is free                           | commit, entries   | lock taken, entries out |
-- | join | the lock is held                           | wait              | the entry in line       |
-- | look | an answer waits in the reply list          | reply, the answer | the answer taken        |
-- | look | the lock is held                           | wait              | unchanged               |
-- | look | free, the entry still in line              | commit, entries   | the entry out, the lock |
-- |      |                                            |                   | taken, the others out   |
-- | look | free, the entry taken, no answer           | orphan            | unchanged: its taker    |
-- |      |                                            |                   | stopped; the caller    |
-- |      |                                            |                   | commits alone          |
-- "entries": the acks waiting in line, at most ARGV[3], oldest first. The mailbox and the
-- lock expire (a taker that stops leaves them); an entry names its request, so a request
-- finds its own.
-- KEYS: 1 mailbox (list), 2 lock (string), 3 this request's reply list
-- ARGV: 1 entry ('<request> <ids> <attempts>'), 2 lock_ms, 3 most entries taken,
--       4 mode ('join' or 'look')
-- Returns {'commit', entry...}, {'wait'}, {'reply', answer} or {'orphan'}.

local entry, lock_ms, most, mode = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local function commit()
  local out = {'commit'}
  if most > 0 then
    local got = redis.call('LRANGE', KEYS[1], 0, most - 1)
    if #got > 0 then
      redis.call('LTRIM', KEYS[1], #got, -1)
      for i = 1, #got do
        out[i + 1] = got[i]
      end
    end
  end
  return out
end

if mode == 'look' then
  local answer = redis.call('LPOP', KEYS[3])
  if answer then
    return {'reply', answer}
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'wait'}
  end
  if redis.call('LREM', KEYS[1], 1, entry) == 0 then
    return {'orphan'}
  end
  redis.call('SET', KEYS[2], entry, 'PX', lock_ms)
  return commit()
end

if redis.call('SET', KEYS[2], entry, 'NX', 'PX', lock_ms) then
  return commit()
end
redis.call('RPUSH', KEYS[1], entry)
redis.call('PEXPIRE', KEYS[1], 2 * lock_ms)
return {'wait'}
