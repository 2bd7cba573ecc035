-- Named queries of the bulk feeder (spark_glue/jobs/feed_queue.py). Placeholders are
-- psycopg's %(name)s.

-- name: feeder_try_lock
-- One run per feed at a time: a session-level advisory lock held by the driver for the
-- run (no transaction stays open while it is held).
SELECT pg_try_advisory_lock(hashtextextended('tierq-feed|' || %(feed)s, 11)) AS locked;

-- name: feeder_unlock
SELECT pg_advisory_unlock(hashtextextended('tierq-feed|' || %(feed)s, 11)) AS released;

-- name: feeder_offsets
SELECT source, part, rows_done, last_value
FROM tierq_feeder_offsets
WHERE feed = %(feed)s
ORDER BY source, part;

-- name: feeder_save_offsets
-- After each round: where every source stopped, in one statement.
INSERT INTO tierq_feeder_offsets (feed, source, part, rows_done, last_value, updated_at)
SELECT %(feed)s, v.source, v.part, v.rows_done, v.last_value, now()
FROM unnest(%(sources)s::text[], %(parts)s::text[], %(rows_done)s::bigint[],
            %(last_values)s::text[]) AS v(source, part, rows_done, last_value)
ON CONFLICT (feed, source, part) DO UPDATE
SET rows_done = EXCLUDED.rows_done, last_value = EXCLUDED.last_value, updated_at = now();

-- name: feeder_reset_offsets
DELETE FROM tierq_feeder_offsets WHERE feed = %(feed)s;

-- name: feeder_backlog_pg
-- The part of a queue's backlog that lives only in Postgres (cold and delayed rows), each
-- counted on its partial index and capped: the feeder only needs to know whether the
-- backlog is below its limit, and by how much.
SELECT
    (SELECT count(*) FROM (SELECT 1 FROM tierq_tasks
                           WHERE queue = %(queue)s AND state = 'cold' LIMIT %(cap)s) c)
        AS cold,
    (SELECT count(*) FROM (SELECT 1 FROM tierq_tasks
                           WHERE queue = %(queue)s AND state = 'delayed' LIMIT %(cap)s) d)
        AS delayed;

-- name: feeder_reserve_seqs
-- Places in line for one round, taken before any of its rows is written, so every row gets
-- its place in the round's order however its partition's writes interleave with others.
SELECT nextval('tierq_task_seq') AS seq FROM generate_series(1, %(n)s) ORDER BY 1;

-- name: feeder_create_stage
-- The per-connection staging table of a partition writer (emptied at each commit).
CREATE TEMP TABLE IF NOT EXISTS tierq_feed_stage (
    id       uuid,
    seq      bigint,
    tenant   text,
    key      text,
    priority smallint,
    payload  jsonb,
    state    text,
    run_at   timestamptz
) ON COMMIT DELETE ROWS;

-- name: feeder_copy_stage
COPY tierq_feed_stage (id, seq, tenant, key, priority, payload, state, run_at) FROM STDIN;

-- name: feeder_insert_from_stage
-- Staged rows into the queue, in their order; a live task with the same key keeps its place
-- (DO NOTHING). Ready rows land cold; the cold -> warm mover warms them.
INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                         run_at_initially, max_attempts, seq, created_at, ready_since,
                         state_since)
SELECT s.id, %(queue)s, s.tenant, s.key, s.priority, s.payload, s.state,
       COALESCE(s.run_at, %(now)s), COALESCE(s.run_at, %(now)s), %(max_attempts)s, s.seq,
       %(now)s, CASE WHEN s.state = 'delayed' THEN NULL ELSE %(now)s::timestamptz END, %(now)s
FROM tierq_feed_stage s
ORDER BY s.seq
ON CONFLICT (queue, tenant, key) WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm')
DO NOTHING;
