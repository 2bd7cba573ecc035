-- tierq schema, version 28: each pair's delayed rows in the order they fall due.
-- tierq: no-transaction
--
-- The delayed mover shares each batch among the pairs with a row due and takes each pair's
-- share from the front of its line, oldest due first (engine.sql lock_due_of_pairs), so one
-- pair's due backlog never holds back another's rows: one descent of this index per pair,
-- then its share, whatever else the pair has delayed. It replaces tierq_tasks_delayed_pair
-- (queue, tenant), whose readers (the delayed counts, walk_gauge_pairs, pair_left_on_shard)
-- use its leading columns: a delayed row keeps two index entries, this one and
-- tierq_tasks_delayed_due, by which the mover finds the pairs with rows due.
--
-- Built and dropped CONCURRENTLY, outside a transaction, so writes to tierq_tasks go on
-- during the build. A failed run is run again whole: a build that failed leaves an invalid
-- index, dropped first.
DROP INDEX CONCURRENTLY IF EXISTS tierq_tasks_delayed_line;
CREATE INDEX CONCURRENTLY tierq_tasks_delayed_line
    ON tierq_tasks (queue, tenant, run_at, seq) WITH (fillfactor = 70)
    WHERE state = 'delayed';
DROP INDEX CONCURRENTLY IF EXISTS tierq_tasks_delayed_pair;
