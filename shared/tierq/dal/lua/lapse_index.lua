#!lua flags=allow-oom
-- Keep the index of lapses, `tq:{~}:lapses`: pair ('<queue>|<tenant>') -> when the reaper
-- is to sweep its lapsed `newer` entries and tombstones (ms; lua/pair_sweep.lua). One key
-- for every pair, in a slot of its own: the pairs' scripts cannot write it, so their
-- callers note a pair here after the call that made one of its two keys.
-- | seen   | next | what happens                                                        |
-- | ------ | ---- | ------------------------------------------------------------------- |
-- | ''     | ms   | a note: the pair is entered at next, or raised to it (ZADD GT)      |
-- | ms     | ms   | the sweep's: moved to next, only while its score is still seen      |
-- | ms     | ''   | the sweep's: taken out, only while its score is still seen          |
-- A note after a sweep read the pair raises its score past what the sweep saw, so the
-- sweep then leaves the pair in: a key made meanwhile is never left out of the index.
-- Allowed while Valkey is out of memory: an entry is a pair's name and a score (a note
-- follows a tombstone, which a full cache must not lose either).
-- KEYS: 1 the index.
-- ARGV: triples: member, seen, next.
-- Returns how many entries changed.

local changed = 0
for i = 1, #ARGV, 3 do
  local member, seen, next_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if seen == '' then
    changed = changed + redis.call('ZADD', KEYS[1], 'GT', 'CH', next_ms, member)
  elseif tonumber(redis.call('ZSCORE', KEYS[1], member) or '-1') == tonumber(seen) then
    if next_ms == '' then
      redis.call('ZREM', KEYS[1], member)
    else
      redis.call('ZADD', KEYS[1], next_ms, member)
    end
    changed = changed + 1
  end
end
return changed
