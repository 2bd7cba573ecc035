#!lua flags=allow-oom
-- One wait for a task's end (logic/waits.py): register it, look for the task's completion
-- marker, or take the registration back. A wait registers only once the server has
-- confirmed its subscription to the task's channel, and looks for the marker in the same
-- atomic call: task_finished.lua, in the same slot, either ran before (the marker is
-- found) or runs after and sees the registration (it publishes to the subscription).
--
-- KEYS[1]  tq:{q|t}:finished       hash: the current generation of markers.
-- KEYS[2]  tq:{q|t}:finished_prev  hash: the previous generation.
-- KEYS[3]  tq:{q|t}:waiters        hash: id -> how many waits registered for it.
-- KEYS[4]  tq:{q|t}:meta           hash: its field `markers_dropped`, when the pair's
--                                   markers last went early (lua/warm_usage.lua).
-- ARGV[1]  the task's id.
-- ARGV[2]  1: register and look; 0: only look; -1: take a registration back.
-- ARGV[3]  how long the waiters hash is kept after a registration (ms): longer than a wait.
-- Returns  the marker '<state>|<attempt>|<ms>' (current generation first), '~dropped' (none,
--          but the pair's markers went early within DROPPED_WITHIN_MS: the wait reads its
--          task's row once more, as it does after a marker), or nil (none, or a
--          registration taken back).
--
-- The count is best-effort: task_finished.lua drops an id it published to, and the hash
-- expires ARGV[3] after the pair's last registration, so a wait that never took its
-- registration back costs at most a useless publish. allow-oom: a registration is one
-- small field per wait (waits are bounded by the long-poll places), and a full cache must
-- not keep a wait from its message.
-- how recent an early drop of the pair's markers makes a wait read its row again
local DROPPED_WITHIN_MS = 30000
local id = ARGV[1]
local step = tonumber(ARGV[2])
if step < 0 then
  if redis.call('HEXISTS', KEYS[3], id) == 1 and redis.call('HINCRBY', KEYS[3], id, -1) <= 0 then
    redis.call('HDEL', KEYS[3], id)
  end
  return nil
end
if step > 0 then
  redis.call('HINCRBY', KEYS[3], id, 1)
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[3]))
end
local mark = redis.call('HGET', KEYS[1], id)
if not mark then
  mark = redis.call('HGET', KEYS[2], id)
end
if not mark then
  local dropped = tonumber(redis.call('HGET', KEYS[4], 'markers_dropped') or '')
  local t = redis.call('TIME')
  if dropped and tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - dropped
      <= DROPPED_WITHIN_MS then
    return '~dropped'
  end
end
return mark
