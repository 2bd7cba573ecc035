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

-- name: feeder_reserve_blocks
-- Places in line for one bulk load (logic/bulk.py), taken before any of its rows is
-- written: tierq_task_seq steps by 512 (migration 0004), so each value is a block of 512
-- places no other caller gets. Row ord of the load has place blocks[ord / 512] + ord % 512,
-- in the load's order however its writers' commits interleave with others.
SELECT nextval('tierq_task_seq') AS seq FROM generate_series(1, %(n)s) ORDER BY 1;

-- name: feeder_create_stage
-- The per-connection staging table of a bulk writer (emptied at each commit). Its columns
-- are logic/bulk.STAGE_COLUMNS.
CREATE TEMP TABLE IF NOT EXISTS tierq_bulk_stage (
    id        uuid,
    ord       bigint,
    tenant    text,
    key       text,
    priority  smallint,
    payload   jsonb,
    run_at_us bigint
) ON COMMIT DELETE ROWS;

-- name: feeder_copy_stage
COPY tierq_bulk_stage (id, ord, tenant, key, priority, payload, run_at_us) FROM STDIN;

-- name: feeder_insert_from_stage
-- Staged rows into the queue, in their order: each row's place is its ord mapped onto the
-- load's reserved blocks (an ord past them has no place: the NOT NULL on seq refuses the
-- chunk). A live task with the same key keeps its place (DO NOTHING). Rows due now land
-- cold, the others delayed, as an enqueue decides; the cold -> warm mover warms them.
INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                         run_at_initially, max_attempts, seq, created_at, ready_since,
                         state_since)
SELECT s.id, %(queue)s, s.tenant, s.key, s.priority, s.payload, r.state, r.run_at, r.run_at,
       %(max_attempts)s, (%(blocks)s::bigint[])[s.ord / %(block)s + 1] + s.ord %% %(block)s,
       %(now)s, CASE WHEN r.state = 'delayed' THEN NULL ELSE %(now)s::timestamptz END,
       %(now)s
FROM tierq_bulk_stage s,
     LATERAL (SELECT COALESCE('epoch'::timestamptz + s.run_at_us * interval '1 microsecond',
                              %(now)s) AS run_at) AS t,
     LATERAL (SELECT t.run_at,
                     CASE WHEN t.run_at > %(now)s THEN 'delayed' ELSE 'cold' END AS state) AS r
ORDER BY s.ord
ON CONFLICT (queue, tenant, key) WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm')
DO NOTHING;
