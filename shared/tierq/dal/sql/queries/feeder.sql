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

-- name: feeder_insert_new_from_stage
-- The usual case of feeder_insert_from_stage, about a third cheaper in PostgreSQL: every
-- staged row inserted plainly (no speculative insertion, no sort: a row's place comes from
-- its ord, not from the order of insertion). Any staged key that a live task holds, or
-- that repeats inside the chunk, fails the statement with a unique violation on
-- tierq_tasks_live_key: the writer then writes the chunk again with
-- feeder_insert_from_stage. (No NOT EXISTS probe to skip live keys: a probe's plan
-- depends on the table's statistics, and one made while the table was empty read the
-- whole table once per staged row.)
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
                     CASE WHEN t.run_at > %(now)s THEN 'delayed' ELSE 'cold' END AS state) AS r;

-- name: feeder_insert_from_stage
-- Staged rows into the queue, in their order: each row's place is its ord mapped onto the
-- load's reserved blocks (an ord past them has no place: the NOT NULL on seq refuses the
-- chunk). A live task with the same key keeps its place (DO NOTHING); inside the chunk the
-- ORDER BY makes the first occurrence of a key the one inserted. Rows due now land cold,
-- the others delayed, as an enqueue decides; the cold -> warm mover warms them.
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
ON CONFLICT (queue, tenant, key)
    WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
DO NOTHING;

-- name: feeder_settle_plan
-- For the rest of the chunk's transaction: feeder_settle_repeats probes tierq_tasks_live_key
-- once per staged key and updates by primary key, whatever the table's statistics say (a
-- plan made while the table looked empty read the whole table instead).
-- (The costs that follow from it would make PostgreSQL compile the statement with LLVM:
-- jit goes off too.)
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('jit', 'off', true);

-- name: feeder_settle_repeats
-- First occurrence wins across the chunks of one load: a staged row that met a live task
-- of the same load placed later (another writer's chunk, committed first) takes that task
-- over — the earlier row's id, place and fields, as if it had been inserted first. A task
-- of the load is one whose seq lies in the load's reserved blocks (no other caller gets
-- those places); a live task from before the load keeps its place, as always. Only run
-- when the insert created fewer tasks than were staged, after feeder_settle_plan. Only cold
-- and delayed tasks are taken over: they are not claimable (the load keeps its pairs cold
-- until it ends), and a task already promoted to warm stays as it is.
WITH later AS MATERIALIZED (
    SELECT l.target, s.id, s.priority, s.payload, s.seq, r.run_at, r.state
    FROM (SELECT DISTINCT ON (tenant, key) id, tenant, key, priority, payload, run_at_us,
                 (%(blocks)s::bigint[])[ord / %(block)s + 1] + ord %% %(block)s AS seq
          FROM tierq_bulk_stage
          ORDER BY tenant, key, ord) s,
         LATERAL (SELECT t.id AS target FROM tierq_tasks t
                  WHERE t.queue = %(queue)s AND t.tenant = s.tenant AND t.key = s.key
                    AND t.key IS NOT NULL AND t.state IN ('delayed', 'cold')
                    AND t.seq > s.seq
                    AND EXISTS (SELECT 1 FROM unnest(%(blocks)s::bigint[]) AS b(first)
                                WHERE t.seq >= b.first AND t.seq < b.first + %(block)s)
                  OFFSET 0) l,
         LATERAL (SELECT COALESCE('epoch'::timestamptz + s.run_at_us * interval '1 microsecond',
                                  %(now)s) AS run_at) AS u,
         LATERAL (SELECT u.run_at,
                         CASE WHEN u.run_at > %(now)s THEN 'delayed' ELSE 'cold' END AS state) AS r
)
UPDATE tierq_tasks t
SET id = later.id, priority = later.priority, payload = later.payload, state = later.state,
    run_at = later.run_at, run_at_initially = later.run_at, seq = later.seq,
    created_at = %(now)s,
    ready_since = CASE WHEN later.state = 'delayed' THEN NULL ELSE %(now)s::timestamptz END,
    state_since = %(now)s
FROM later
WHERE t.id = ANY(ARRAY(SELECT target FROM later)) AND t.id = later.target
  AND t.state IN ('delayed', 'cold') AND t.seq > later.seq;
