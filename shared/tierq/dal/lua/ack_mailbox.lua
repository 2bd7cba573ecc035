-- Shared by the scripts that say `-- include: ack_mailbox`: a pair's mailbox of acks
-- committed together (logic/ack_gathering.py; lua/README.md, "Acks committed together").
-- The mailbox is a list of entries '<request> <ids> <attempts>'. The committer's lock holds
-- its request. `states` maps a request to '' while its entry waits in line, then to the
-- request of the committer that took it: a waiting ack tells so whether its committer is
-- gone, without reading the line.
-- ack_take(mailbox, states, owner, most, ttl_ms): the entries waiting (at most `most`,
-- oldest first) taken out, recorded as `owner`'s.
-- ack_commit(...): the same, as {'commit', entries...}.
-- ack_join(mailbox, lock, states, request, entry, lock_ms, most): {'commit', entries
-- taken...} when the lock was free (taken: its value the request). The same without
-- entries when the lock is the request's already: a join sent again after its reply was
-- lost. Else {'wait'}: the entry waits in line.
local function ack_request(entry)
  return string.match(entry, '^[^ ]*')
end

local function ack_take(mailbox, states, owner, most, ttl_ms)
  if most <= 0 then return {} end
  local got = redis.call('LRANGE', mailbox, 0, most - 1)
  if #got > 0 then
    redis.call('LTRIM', mailbox, #got, -1)
    local fields = {}
    for i, entry in ipairs(got) do
      fields[2 * i - 1] = ack_request(entry)
      fields[2 * i] = owner
    end
    redis.call('HSET', states, unpack(fields))
    redis.call('PEXPIRE', states, ttl_ms)
  end
  return got
end

local function ack_commit(mailbox, states, owner, most, ttl_ms)
  local out = {'commit'}
  for i, entry in ipairs(ack_take(mailbox, states, owner, most, ttl_ms)) do
    out[i + 1] = entry
  end
  return out
end

local function ack_join(mailbox, lock, states, request, entry, lock_ms, most)
  local holder = redis.call('GET', lock)
  if holder == request then
    return {'commit'}
  end
  if not holder then
    redis.call('SET', lock, request, 'PX', lock_ms)
    return ack_commit(mailbox, states, request, most, 2 * lock_ms)
  end
  redis.call('RPUSH', mailbox, entry)
  redis.call('PEXPIRE', mailbox, 2 * lock_ms)
  redis.call('HSET', states, request, '')
  redis.call('PEXPIRE', states, 2 * lock_ms)
  return {'wait'}
end
