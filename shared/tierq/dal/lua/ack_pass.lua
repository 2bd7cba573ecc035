-- The committer of a pair's acks, its commit done and the answers sent (in the same round
-- trip, before this call): go on with the acks that came meanwhile, or let the lock go
-- (logic/ack_gathering.py).
-- | state                                   | answer   | after                            |
-- | the lock is this committer's, entries   | entries  | entries out, the lock extended    |
-- | wait and it may take more (ARGV[2] > 0) |          |                                  |
-- | the lock is this committer's, otherwise | (empty)  | the lock let go: the next ack to  |
-- |                                         |          | look (ack_gather.lua) takes it    |
-- | the lock is not this committer's (it    | (empty)  | unchanged                        |
-- | expired, another took it)               |          |                                  |
-- KEYS: 1 mailbox (list), 2 lock (string)
-- ARGV: 1 the lock's value (the committer's entry), 2 most entries taken (0: none),
--       3 lock_ms
-- Returns the entries taken, oldest first.

local owner, most, lock_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('GET', KEYS[2]) ~= owner then
  return {}
end
if most > 0 then
  local got = redis.call('LRANGE', KEYS[1], 0, most - 1)
  if #got > 0 then
    redis.call('LTRIM', KEYS[1], #got, -1)
    redis.call('PEXPIRE', KEYS[2], lock_ms)
    return got
  end
end
redis.call('DEL', KEYS[2])
return {}
