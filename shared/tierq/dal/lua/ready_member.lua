-- Shared by the scripts that say `-- include: ready_member` (see lua/README.md).
-- A member of a ready set is the task's id while its seq is below 2^49, and
-- '<seq as 16 lowercase hex digits>|<id>' from 2^49 on; callers build members and scores
-- (core/ordering.py: place), the scripts only take the id out of a member. Task ids are
-- UUIDs: their 17th byte is never '|'.
-- Whether a task is waiting in line is asked of the data hash, by id: it holds the blob of
-- exactly the ready tasks, whatever their member's form.
local function task_of(member)
  if string.byte(member, 17) == 124 then  -- '|'
    return string.sub(member, 18)
  end
  return member
end
local function waiting(data, id)
  return redis.call('HEXISTS', data, id) == 1
end
-- A task's seq as 16 lowercase hex digits, from its (score, member) (core/ordering.py):
-- two of them compare as their seqs do. The short form's seq is its score modulo 2^49
-- (every score is below 2^53: exact).
local function seq_key(score, member)
  if string.byte(member, 17) == 124 then  -- '|'
    return string.sub(member, 1, 16)
  end
  return string.format('%016x', tonumber(score) % 562949953421312)
end
