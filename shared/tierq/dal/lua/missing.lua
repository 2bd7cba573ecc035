-- Which of these ids are neither waiting nor leased? (the reconciler's question)
-- KEYS: 1 data (a waiting task's blob: lua/ready_member.lua), 2 leased
-- ARGV: ids
-- Returns the ids neither waiting nor in the leased set.

-- include: ready_member (members and ids: lua/ready_member.lua)

local leased = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  leased[string.match(member, '^[^|]*')] = true
end
local out = {}
for _, id in ipairs(ARGV) do
  if not leased[id] and not waiting(KEYS[1], id) then
    out[#out + 1] = id
  end
end
return out
