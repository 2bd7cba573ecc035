#!lua flags=allow-oom
-- Take tasks out of the ready set only while they are still waiting: a task a worker has
-- already claimed (popped and leased) is left alone. Used to withdraw work nobody wants
-- any more (e.g. cron occurrences of an outdated schedule) without touching running tasks.
-- Allowed while Valkey is out of memory: it only frees memory.
-- KEYS: 1 ready, 2 data, 3 meta
-- ARGV: the tasks' ready-set members (core/ordering.py place)
-- Returns the ids of those that were waiting and are now removed.

-- include: warm_bytes (the meta field `bytes`: lua/warm_bytes.lua)
-- include: ready_member (members and ids: lua/ready_member.lua)

local out = {}
local freed = 0
for _, member in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], member) == 1 then
    local id = task_of(member)
    freed = freed + redis.call('HSTRLEN', KEYS[2], id)
    redis.call('HDEL', KEYS[2], id)
    out[#out + 1] = id
  end
end
add_warm_bytes(KEYS[3], -freed)
return out
