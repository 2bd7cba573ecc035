-- tierq schema, version 14: a pair's drained move to another shard (tierq.logic.pair_moves).
--
-- A pair being moved carries the shard it goes to in every shard's copy of its home, so a
-- lookup on any shard sees the move: new work for the pair is refused (503) while its tasks
-- drain on the old home, and its home changes only once nothing of it is left there.
ALTER TABLE tierq_pair_homes ADD COLUMN IF NOT EXISTS moving_to text;
ALTER TABLE tierq_pair_homes ADD COLUMN IF NOT EXISTS moving_since timestamptz;
