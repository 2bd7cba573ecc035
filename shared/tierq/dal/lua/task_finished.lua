#!lua flags=allow-oom
-- Tasks of one pair that just finished (done, dead, or deleted): each gets a completion
-- marker and a message on its own sharded channel, which wakes whoever waits for it
-- (GET .../tasks/{id}?wait_seconds=N, logic/waits.py). The marker and the message are made
-- together, so a waiter that subscribed and then finds no marker is sure to get the message.
-- The channel `tq:{q|t}:finished:<id>` shares the pair's hash tag: SPUBLISH stays in the
-- pair's slot (ElastiCache Serverless has no keyspace notifications).
--
-- KEYS[1]  tq:{q|t}:finished     hash: id -> '<state>|<attempt>|<ms>'
-- KEYS[2]  tq:{q|t}:finished_at  sorted set: id -> ms (the server's clock)
-- ARGV[1]  how long a marker is kept (ms)
-- ARGV[2]  the most markers the pair keeps (the oldest go first)
-- ARGV[3..] per task: id, state, attempt
-- Returns  how many waiters the messages reached.
--
-- Markers older than ARGV[1] are dropped first (a bounded slice per call), and both keys
-- expire ARGV[1] after the last call: an idle pair keeps nothing. allow-oom: the work is
-- committed; a full cache must not leave its waiters asleep (the marker is small and capped).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl, 'LIMIT', 0, 1000)
if #old > 0 then
  redis.call('ZREM', KEYS[2], unpack(old))
  redis.call('HDEL', KEYS[1], unpack(old))
end
local woken = 0
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  redis.call('HSET', KEYS[1], id, ARGV[i + 1] .. '|' .. ARGV[i + 2] .. '|' .. now)
  redis.call('ZADD', KEYS[2], now, id)
  woken = woken + redis.call('SPUBLISH', KEYS[1] .. ':' .. id, ARGV[i + 1])
end
local over = redis.call('ZCARD', KEYS[2]) - cap
while over > 0 do
  local gone = redis.call('ZPOPMIN', KEYS[2], math.min(over, 1000))
  for j = 1, #gone, 2 do
    redis.call('HDEL', KEYS[1], gone[j])
  end
  over = over - #gone / 2
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return woken
