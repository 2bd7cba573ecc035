-- Named queries of batch rows (migration 0030; tierq.dal.store.batches runs them). A member
-- is passed as its id with its batch's key and its place (tierq.core.batch_ids.batch_of),
-- three arrays zipped in order; tenants as a text[] literal, as the acks pass them. A
-- member's tenant is read by tierq_batch_tenant (migration 0030).

-- name: insert_batch
-- One batch row: the tasks of an enqueued batch admitted warm, by place, its seqs one block
-- of tierq_task_seq; and a row of tierq_batch_pairs per tenant it holds tasks of. Returns
-- (NULL, the batch's first seq), as insert_batch_keyed does.
WITH b AS (
    INSERT INTO tierq_batches (id, queue, tasks, first_seq, tenant_names, tenant_of,
                               priorities, payloads, max_attempts, timeout_seconds,
                               created_at)
    VALUES (%(batch)s::uuid, %(queue)s, cardinality(%(priorities)s::smallint[]),
            nextval('tierq_task_seq'), %(tenant_names)s::text[], %(tenant_of)s::bytea,
            %(priorities)s::smallint[], %(payloads)s::jsonb, %(max_attempts)s, %(timeout)s,
            %(now)s)
    RETURNING first_seq, tenant_names
),
p AS (
    INSERT INTO tierq_batch_pairs (queue, tenant, batch)
    SELECT %(queue)s, t.tenant, %(batch)s::uuid FROM b, unnest(b.tenant_names) AS t(tenant)
)
SELECT NULL::text AS id, first_seq AS seq FROM b;

-- name: insert_batch_keyed
-- insert_batch for a batch with keyed tasks: its keyless tasks in one batch row (each
-- place's offset in the batch in seq_offsets), its keyed ones as rows of tierq_tasks,
-- warm, each seq the batch's first plus its offset, as insert_tasks_uniform_keyed inserts
-- them (a live task with the same key wins: DO NOTHING). Returns the keyed rows inserted
-- (id, seq), then (NULL, the batch's first seq).
WITH b AS (
    INSERT INTO tierq_batches (id, queue, tasks, first_seq, seq_offsets, tenant_names,
                               tenant_of, priorities, payloads, max_attempts,
                               timeout_seconds, created_at)
    VALUES (%(batch)s::uuid, %(queue)s, cardinality(%(priorities)s::smallint[]),
            nextval('tierq_task_seq'), %(seq_offsets)s::smallint[],
            %(tenant_names)s::text[], %(tenant_of)s::bytea, %(priorities)s::smallint[],
            %(payloads)s::jsonb, %(max_attempts)s, %(timeout)s, %(now)s)
    RETURNING first_seq, tenant_names
),
p AS (
    INSERT INTO tierq_batch_pairs (queue, tenant, batch)
    SELECT %(queue)s, t.tenant, %(batch)s::uuid FROM b, unnest(b.tenant_names) AS t(tenant)
),
keyed AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, %(queue)s, v.tenant, v.key, v.priority, v.payload, 'warm', %(now)s,
           %(now)s, %(max_attempts)s, b.first_seq + v.offset_in_batch, %(now)s, %(now)s,
           %(now)s, NULL, %(timeout)s, NULL
    FROM b, ROWS FROM (unnest(%(keyed_ids)s::uuid[]),
                       jsonb_array_elements_text(%(keyed_tenants)s::jsonb),
                       jsonb_array_elements_text(%(keys)s::jsonb),
                       unnest(%(keyed_priorities)s::smallint[]),
                       jsonb_array_elements(%(keyed_payloads)s::jsonb),
                       unnest(%(keyed_offsets)s::int[]))
            AS v(id, tenant, key, priority, payload, offset_in_batch)
    ON CONFLICT (queue, tenant, key)
        WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
    DO NOTHING
    RETURNING id::text, seq
)
SELECT id, seq FROM keyed
UNION ALL SELECT NULL, first_seq FROM b;

-- name: lock_batches
-- The batches' advisory locks, each held alone, in key order: taken by a move before it
-- reads which places have ended (a statement of its own: it sees every end committed
-- before the locks).
SELECT count(pg_advisory_xact_lock(hashtextextended(b::text, 30)))
FROM (SELECT DISTINCT b FROM unnest(%(batches)s::uuid[]) AS b ORDER BY b) AS sorted;

-- name: move_out_of_batches
-- Members still in their batch rows (their queue and tenant as named, no end yet) become
-- rows of tierq_tasks as they stand: warm since the batch was made, the batch's attempts
-- (0: a claim counts in Valkey), their id and seq; their places are appended as moved.
-- Runs after lock_batches, in its transaction. A null queue or tenant names any (tierq's
-- own callers, whose ids come from its own keys). Returns the ids moved; a member that had
-- ended, an id of another queue or tenant, and an id whose batch row is gone are left out.
WITH v AS (
    SELECT DISTINCT v.id, v.batch, v.place, v.tenant
    FROM unnest(%(ids)s::uuid[], %(batches)s::uuid[], %(places)s::int[],
                %(tenants)s::text[]) AS v(id, batch, place, tenant)
),
m AS MATERIALIZED (
    SELECT v.id, v.batch, v.place, b.queue,
           tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) AS tenant,
           b.priorities[v.place + 1] AS priority, b.payloads -> v.place AS payload,
           tierq_batch_seq(b.first_seq, b.seq_offsets, v.place) AS seq, b.max_attempts,
           b.timeout_seconds, b.created_at
    FROM v JOIN tierq_batches b ON b.id = v.batch
    WHERE (b.queue = %(queue)s::text OR %(queue)s::text IS NULL) AND v.place < b.tasks
      AND (tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
           OR v.tenant IS NULL)
      AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                      WHERE e.batch = v.batch AND v.place = ANY(e.places))
    -- (a purge of the queue deleting the batch row waits for the move to commit, then
    -- deletes its rows too; a move after such a purge finds no batch row)
    FOR KEY SHARE OF b
),
ended AS (
    INSERT INTO tierq_batch_ends (batch, places, moved)
    SELECT batch, array_agg(place ORDER BY place), true FROM m GROUP BY batch
)
INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                         run_at_initially, max_attempts, seq, created_at, ready_since,
                         state_since, timeout_seconds)
SELECT m.id, m.queue, m.tenant, NULL, m.priority, m.payload, 'warm', m.created_at,
       m.created_at, m.max_attempts, m.seq, m.created_at, m.created_at, m.created_at,
       m.timeout_seconds
FROM m
RETURNING id::text;

-- name: end_batch_members
-- A plain ack of members and of tasks kept as rows (each with the tenant and attempt of
-- its lease), in one statement: tierq_end_batch_members_v3 (migration 0033) takes the
-- batches' advisory locks shared, then appends the places of the members still in their
-- batch rows and deletes, as ack_delete_by_attempt does, the rows of the others and of
-- the tasks named as rows. Each batch and tenant is named once, the long runs of members
-- of one batch, tenant and attempt as groups of places, the other members and the rows
-- packed in bytes (BatchQueries.end_batch_members). Returns (id, grp, NULL) of the rows
-- deleted, then (NULL, NULL, the members not ended, numbered as migration 0033 says).
SELECT id, grp, unended
FROM tierq_end_batch_members_v3(%(queue)s, %(batches)s::uuid[], %(tenants)s::text[],
                                %(groups)s::bytea, %(places)s::text[], %(members)s::bytea,
                                %(row_ids)s::uuid[], %(rows)s::bytea);

-- name: end_batch_members_v2
-- end_batch_members as migration 0031 made it, each member packed in ten bytes: where
-- migration 0033 has not run yet (code deployed before it). Returns (id, grp, NULL) of the
-- rows deleted, then (NULL, NULL, the indexes of the members not ended).
SELECT id, grp, unended
FROM tierq_end_batch_members_v2(%(queue)s, %(batches)s::uuid[], %(tenants)s::text[],
                                %(members)s::bytea, %(row_ids)s::uuid[], %(rows)s::bytea);

-- name: batch_members
-- Members as their batch rows hold them, for a read by id: (id, queue, tenant, priority,
-- payload, seq, max_attempts, timeout_seconds, created_at, ended), ended 'acked',
-- 'moved' or NULL (still in the row: warm). An id whose batch row is gone, or of another
-- tenant than those named, is left out. An empty tenants array is an admin's read, of
-- every tenant (BatchQueries.batch_members passes one only for None).
WITH v AS (
    SELECT DISTINCT v.id, v.batch, v.place
    FROM unnest(%(ids)s::uuid[], %(batches)s::uuid[], %(places)s::int[])
         AS v(id, batch, place)
)
SELECT v.id::text AS id, b.queue,
       tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) AS tenant,
       b.priorities[v.place + 1] AS priority, b.payloads -> v.place AS payload,
       tierq_batch_seq(b.first_seq, b.seq_offsets, v.place) AS seq, b.max_attempts,
       b.timeout_seconds, b.created_at,
       (SELECT CASE bool_or(e.moved) WHEN true THEN 'moved' WHEN false THEN 'acked' END
        FROM tierq_batch_ends e
        WHERE e.batch = v.batch AND v.place = ANY(e.places)) AS ended
FROM v JOIN tierq_batches b ON b.id = v.batch
WHERE v.place < b.tasks
  AND (cardinality(%(tenants)s::text[]) = 0
       OR tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place)
          = ANY(%(tenants)s::text[]));

-- name: lock_free_batches
-- The sweep's candidates: up to `budget` batches after `after`, in key order, each with
-- whether every place of it has an end and its advisory lock could then be taken alone
-- (one an ack or a move holds is passed over this pass; a batch still in use is never
-- locked by the sweep). (key, locked) in key order.
SELECT c.id::text,
       CASE WHEN c.ended THEN pg_try_advisory_xact_lock(hashtextextended(c.id::text, 30))
            ELSE false END
FROM (SELECT b.id,
             (SELECT count(DISTINCT p) FROM tierq_batch_ends e, unnest(e.places) AS p
              WHERE e.batch = b.id) >= b.tasks AS ended
      FROM tierq_batches b WHERE b.id > %(after)s::uuid ORDER BY b.id
      LIMIT %(budget)s) AS c
ORDER BY c.id;

-- name: delete_ended_batches
-- Of the batches named (locked by lock_free_batches, in its transaction: a statement of its
-- own, it sees every end committed before), those whose every place has an end are deleted
-- with their ends and their pairs' rows. Returns (batches deleted, their tasks).
WITH done AS MATERIALIZED (
    SELECT b.id, b.tasks, b.queue, b.tenant_names FROM tierq_batches b
    WHERE b.id = ANY(%(batches)s::uuid[])
      AND (SELECT count(DISTINCT p) FROM tierq_batch_ends e, unnest(e.places) AS p
           WHERE e.batch = b.id) >= b.tasks
),
ends AS (DELETE FROM tierq_batch_ends e USING done WHERE e.batch = done.id),
held AS (DELETE FROM tierq_batch_pairs p
         WHERE (p.queue, p.tenant, p.batch) IN (
             SELECT done.queue, t.tenant, done.id
             FROM done, unnest(done.tenant_names) AS t(tenant))),
gone AS (DELETE FROM tierq_batches b USING done WHERE b.id = done.id RETURNING b.tasks)
SELECT count(*) AS batches, coalesce(sum(tasks), 0) AS tasks FROM gone;

-- name: delete_orphan_ends
-- The ends whose batch row is gone: left by an ack that appended while a purge of the
-- queue deleted its batch row (an end is appended only to a batch row that was there, and
-- the sweep deletes a batch row with its ends). Run once the sweep has come round to the
-- last batch row; the ends are few (each lives until its batch row is swept).
DELETE FROM tierq_batch_ends e
WHERE NOT EXISTS (SELECT 1 FROM tierq_batches b WHERE b.id = e.batch);

-- name: purge_queue_batches
-- Every batch row of a queue with its pairs' rows (a purge of the queue, as
-- purge_queue_tasks): it waits for a move that holds one (FOR KEY SHARE). Returns each
-- batch row's key and tasks; purge_batch_ends, a statement of its own in the transaction,
-- then sees the ends such a move committed.
WITH held AS (DELETE FROM tierq_batch_pairs WHERE queue = %(queue)s)
DELETE FROM tierq_batches WHERE queue = %(queue)s RETURNING id::text, tasks;

-- name: purge_batch_ends
-- The ends of the batch rows a purge deleted (purge_queue_batches). Returns how many of
-- their places had ended (each place once).
WITH gone AS (
    DELETE FROM tierq_batch_ends WHERE batch = ANY(%(batches)s::uuid[])
    RETURNING batch, places
)
SELECT count(*) FROM (SELECT DISTINCT gone.batch, p FROM gone, unnest(gone.places) AS p)
    AS ended;

-- name: has_batch_rows
-- Whether any batch row is left: the reaper reconciles members only then.
SELECT EXISTS (SELECT 1 FROM tierq_batch_pairs) AS found;

-- name: unended_batch_members
-- A slice of batch rows after `after`, in key order, each with the places that have no end
-- yet (every tenant's; empty when none): what a downgrade moves out into rows
-- (tierq.maintenance.batch_unpack). (key, places) by the table's primary key.
SELECT b.id::text AS batch,
       ARRAY(SELECT p FROM generate_series(0, b.tasks - 1) AS p
             EXCEPT
             SELECT x FROM tierq_batch_ends e, unnest(e.places) AS x WHERE e.batch = b.id
             ORDER BY 1) AS places
FROM tierq_batches b
WHERE b.id > %(after)s::uuid
ORDER BY b.id
LIMIT %(limit)s;

-- name: batch_suspects
-- The reconciler's members of a pair, a slice of its batch rows in key order: those made
-- before `before` (their created_at, the enqueue's clock, as a row's state_since; not their
-- keys, whose milliseconds a process keeps increasing past a clock that went back) and
-- after the cursor `after`. Of the first `limit`, the statement keeps those whose places
-- (every tenant's), up to the one before, number fewer than `members`: a pass reads about
-- `members` places, whatever the size of the pair's batch rows. Each comes with the
-- places of the tenant's members without an end (empty when none) and how many batch rows
-- the statement looked at before that cut (key, places, looked). By tierq_batch_pairs'
-- primary key from the cursor on.
SELECT c.key::text AS batch,
       ARRAY(SELECT p FROM generate_series(0, b.tasks - 1) AS p
             WHERE tierq_batch_tenant(b.tenant_names, b.tenant_of, p) = %(tenant)s
             EXCEPT
             SELECT x FROM tierq_batch_ends e, unnest(e.places) AS x WHERE e.batch = c.key
             ORDER BY 1) AS places,
       c.looked
FROM (SELECT r.key, r.tasks, sum(r.tasks) OVER (ORDER BY r.key) AS upto,
             count(*) OVER () AS looked
      FROM (SELECT bp.batch AS key, b.tasks
            FROM tierq_batch_pairs bp JOIN tierq_batches b ON b.id = bp.batch
            WHERE bp.queue = %(queue)s AND bp.tenant = %(tenant)s
              AND bp.batch > %(after)s::uuid AND b.created_at < %(before)s
            ORDER BY bp.batch
            LIMIT %(limit)s) AS r) AS c
JOIN tierq_batches b ON b.id = c.key  -- (the tenants of the rows kept only)
WHERE c.upto - c.tasks < %(members)s
ORDER BY c.key;

-- ============================================================================================
-- The statements above that run as functions (migration 0032) where nothing is prepared
-- (behind RDS Proxy), as engine.sql's `routine_<name>` queries do (migration 0029).
-- ============================================================================================

-- name: routine_insert_batch
SELECT id, seq
FROM tierq_insert_batch_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_batch => %(batch)s::uuid,
    p_tenant_names => %(tenant_names)s::text[],
    p_tenant_of => %(tenant_of)s::bytea,
    p_priorities => %(priorities)s::smallint[],
    p_payloads => %(payloads)s::jsonb,
    p_max_attempts => %(max_attempts)s::integer,
    p_timeout => %(timeout)s::integer);

-- name: routine_insert_batch_keyed
SELECT id, seq
FROM tierq_insert_batch_keyed_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_batch => %(batch)s::uuid,
    p_seq_offsets => %(seq_offsets)s::smallint[],
    p_tenant_names => %(tenant_names)s::text[],
    p_tenant_of => %(tenant_of)s::bytea,
    p_priorities => %(priorities)s::smallint[],
    p_payloads => %(payloads)s::jsonb,
    p_max_attempts => %(max_attempts)s::integer,
    p_timeout => %(timeout)s::integer,
    p_keyed_ids => %(keyed_ids)s::uuid[],
    p_keyed_tenants => %(keyed_tenants)s::jsonb,
    p_keys => %(keys)s::jsonb,
    p_keyed_priorities => %(keyed_priorities)s::smallint[],
    p_keyed_payloads => %(keyed_payloads)s::jsonb,
    p_keyed_offsets => %(keyed_offsets)s::integer[]);

-- name: routine_lock_batches
SELECT count
FROM tierq_lock_batches_v1(
    p_batches => %(batches)s::uuid[]);

-- name: routine_move_out_of_batches
SELECT id
FROM tierq_move_out_of_batches_v1(
    p_queue => %(queue)s::text,
    p_ids => %(ids)s::uuid[],
    p_batches => %(batches)s::uuid[],
    p_places => %(places)s::integer[],
    p_tenants => %(tenants)s::text[]);
