#!lua flags=allow-oom
-- Turn one (queue, tenant) cold because the warm tier cannot take its work: Valkey is out
-- of memory (push_ready was refused with OOM). As push_ready does when it refuses tasks: the
-- queue turns cold (new ready work waits cold behind these tasks), the epoch is bumped and
-- the caller's admission is registered as in flight until its rows are marked cold in
-- Postgres (the caller then calls admission_end).
-- Allowed while Valkey is out of memory: it writes a few bytes, and without it the rows
-- marked cold could be passed by later work and never promoted.
-- KEYS: 1 meta, 2 inflight
-- ARGV: 1 now_ms, 2 admission token
-- Returns the mode ('cold').
redis.call('HSET', KEYS[1], 'mode', 'cold')
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 'cold'
