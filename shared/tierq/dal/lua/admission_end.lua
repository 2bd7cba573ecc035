-- Finish an admission registered by admission_begin or push_ready.
-- KEYS: 1 inflight
-- ARGV: 1 admission token
return redis.call('ZREM', KEYS[1], ARGV[1])
