-- The committer of a pair's acks, its commit done and the answers sent (in the same round
-- trip, before this call): it forgets the requests it answered, then goes on with the acks
-- that came meanwhile, or lets the lock go (logic/ack_gathering.py).
-- | state                                   | answer   | after                            |
-- | the lock is this committer's, entries   | entries  | entries out (taken: this         |
-- | wait and it may take more (ARGV[2] > 0) |          | committer's), the lock extended  |
-- | the lock is this committer's, otherwise | (empty)  | the lock let go: the next ack to |
-- |                                         |          | look (ack_look.lua) takes it     |
-- | the lock is not this committer's (it    | (empty)  | the lock unchanged               |
-- | expired, another took it)               |          |                                  |
-- KEYS: 1 mailbox (list), 2 lock (string), 3 states (hash)
-- ARGV: 1 the lock's value (the committer's request), 2 most entries taken (0: none),
--       3 lock_ms, then the requests it answered
-- Returns the entries taken, oldest first.

-- include: call_chunked (variadic commands in chunks: lua/call_chunked.lua)
-- include: ack_mailbox (the mailbox's take: lua/ack_mailbox.lua)

local owner, most, lock_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
call_chunked('HDEL', KEYS[3], ARGV, 4)
if redis.call('GET', KEYS[2]) ~= owner then
  return {}
end
local got = ack_take(KEYS[1], KEYS[3], owner, most, 2 * lock_ms)
if #got > 0 then
  redis.call('PEXPIRE', KEYS[2], lock_ms)
  return got
end
redis.call('DEL', KEYS[2])
return {}
