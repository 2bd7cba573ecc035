-- Finish an admission registered by admission_begin or push_ready, and drop the record of
-- the tasks it was about to push into a warm set (admission_begin.lua: a caller that did
-- not push them).
-- KEYS: 1 inflight, 2 meta.
-- ARGV: 1 admission token.
redis.call('HDEL', KEYS[2], 'rsv:' .. ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
