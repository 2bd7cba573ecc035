-- Each pair's delayed rows in the order they fall due, so the delayed mover finds a pair's
-- oldest due row with one index entry and locks a pair's share of a batch from the front
-- of its line (walk_delayed_pairs, lock_due_of_pairs), whatever the pair's backlog:
-- tierq_tasks_delayed_pair is rebuilt with (run_at, seq) after its leading columns. The
-- delayed counts and walk_gauge_pairs read its leading columns as before.
DROP INDEX tierq_tasks_delayed_pair;
CREATE INDEX tierq_tasks_delayed_pair
    ON tierq_tasks (queue, tenant, run_at, seq) WITH (fillfactor = 70)
    WHERE state = 'delayed';
