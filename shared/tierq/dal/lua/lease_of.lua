#!lua flags=no-writes,allow-oom
-- The lease of one task, found by its id (a task's view): lease_of names its token, the
-- leased set its deadline, the claims hash when and by whom it was claimed
-- (lua/lease_keys.lua). Changes nothing.
-- KEYS: 1 lease_of, 2 leased, 3 claims
-- ARGV: 1 id
-- Returns {} when the task holds no lease, else { token, deadline_ms, claim record ('' when
-- none: '<started_ms>|<worker>') }. A deadline of 0 marks a lease the reaper is reaping.
local token = redis.call('HGET', KEYS[1], ARGV[1])
if not token then return {} end
local deadline = redis.call('ZSCORE', KEYS[2], ARGV[1] .. '|' .. token)
if not deadline then return {} end
local prefix = string.match(token, '^(.*~)%d+~%d+$')
local record = prefix and redis.call('HGET', KEYS[3], prefix) or ''
return { token, deadline, record or '' }
