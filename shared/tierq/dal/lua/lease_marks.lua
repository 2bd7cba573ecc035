-- Shared by the scripts that say `-- include: lease_marks` (after call_chunked): an ack's or
-- a nack's check of its leases, each lease held with its deadline ahead marked as ending
-- (its deadline plus ENDING) atomically with the check (lease_check.lua says why).
-- check_leases(leased, now, members, first): the members args[first..] ('<id>|<token>');
-- returns one number per member, in order: 1 held, 0 not.
local ENDING = 0.5
local function check_leases(leased, now, members, first)
  local scores = call_chunked('ZMSCORE', leased, members, first)
  local held, marks, n_marks = {}, {}, 0
  for i = first, #members do
    local score = scores[i - first + 1] and tonumber(scores[i - first + 1])
    if score and score > now then
      held[i - first + 1] = 1
      if score % 1 == 0 then
        -- (one decimal: exact for a whole number of milliseconds and the mark's half)
        marks[n_marks + 1] = string.format('%.1f', score + ENDING)
        marks[n_marks + 2] = members[i]
        n_marks = n_marks + 2
      end
    else
      held[i - first + 1] = 0
    end
  end
  -- (every member marked was just read: ZADD updates it)
  call_chunked('ZADD', leased, marks)
  return held
end
