-- Named queries of the engine. Placeholders are psycopg's %(name)s; arrays are passed whole
-- and unnested, so every batch is one statement.

-- name: insert_tasks
-- New tasks, one statement per batch. The rows come as one array per column, zipped by
-- ROWS FROM in batch order (logic/enqueue.row_columns). Uuid, smallint, text and float
-- arrays come as literals; names and keys as JSON arrays of strings (any text, no quoting
-- rules to get wrong); payloads as one JSON array. That costs ~1 µs of PostgreSQL CPU per
-- row, where a JSON record per row costs ~3 µs looking up its fields. The batch
-- takes one value of tierq_task_seq (it steps by 512, migration 0004) and numbers its rows
-- from it in batch order. A live task with the same key, held in its group or not, wins
-- (DO NOTHING; the predicate names tierq_tasks_live_key's states); the caller reads
-- the rows that were not returned as conflicts. A batch without keys uses
-- insert_tasks_keyless: ON CONFLICT costs a speculative insertion per row even where no key
-- can conflict.
INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                         run_at_initially, max_attempts, seq, created_at, ready_since,
                         state_since, grp, timeout_seconds, trace)
SELECT v.id, %(queue)s, v.tenant, v.key, v.priority, v.payload, v.state, r.run_at, r.run_at,
       v.max_attempts, b.seq + v.n - 1, %(now)s,
       CASE WHEN v.state IN ('delayed', 'waiting', 'held') THEN NULL
            ELSE %(now)s::timestamptz END,
       %(now)s, v.grp, v.timeout_seconds, v.trace
FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
     ROWS FROM (unnest(%(ids)s::uuid[]),
                jsonb_array_elements_text(%(tenants)s::jsonb),
                jsonb_array_elements_text(%(keys)s::jsonb),
                unnest(%(priorities)s::smallint[]),
                jsonb_array_elements(%(payloads)s::jsonb),
                unnest(%(states)s::text[]),
                unnest(%(run_ats)s::double precision[]),
                unnest(%(max_attempts)s::int[]),
                -- each task's group, or null (logic/groups.py)
                jsonb_array_elements_text(%(grps)s::jsonb),
                -- each task's time limit, or null (migration 0021)
                unnest(%(timeouts)s::int[]),
                -- each task's trace context, or null (models/traces.py); a batch without
                -- any passes [], which ROWS FROM pads with nulls
                jsonb_array_elements_text(%(traces)s::jsonb))
     WITH ORDINALITY AS v(id, tenant, key, priority, payload, state, run_at, max_attempts,
                          grp, timeout_seconds, trace, n),
     -- a ready task's run_at is never after its ready_since: the float seconds may round
     -- a microsecond past "now" (a waiting or held task keeps its own)
     LATERAL (SELECT CASE WHEN v.state IN ('delayed', 'waiting', 'held')
                          THEN to_timestamp(v.run_at)
                          ELSE LEAST(to_timestamp(v.run_at), %(now)s::timestamptz)
                     END AS run_at) AS r
ON CONFLICT (queue, tenant, key)
    WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
DO NOTHING
RETURNING id::text, seq;

-- name: insert_tasks_keyless
-- insert_tasks for a batch in which no task has a key: the same rows, no ON CONFLICT. No
-- row can be refused, so it returns only the batch's first seq: the n-th row of the batch
-- has that seq + n - 1.
WITH inserted AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, %(queue)s, v.tenant, NULL, v.priority, v.payload, v.state, r.run_at,
           r.run_at, v.max_attempts, b.seq + v.n - 1, %(now)s,
           CASE WHEN v.state IN ('delayed', 'waiting', 'held') THEN NULL
                ELSE %(now)s::timestamptz END,
           %(now)s, v.grp, v.timeout_seconds, v.trace
    FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
         ROWS FROM (unnest(%(ids)s::uuid[]),
                    jsonb_array_elements_text(%(tenants)s::jsonb),
                    unnest(%(priorities)s::smallint[]),
                    jsonb_array_elements(%(payloads)s::jsonb),
                    unnest(%(states)s::text[]),
                    unnest(%(run_ats)s::double precision[]),
                    unnest(%(max_attempts)s::int[]),
                    jsonb_array_elements_text(%(grps)s::jsonb),
                    unnest(%(timeouts)s::int[]),
                    jsonb_array_elements_text(%(traces)s::jsonb))
         WITH ORDINALITY AS v(id, tenant, priority, payload, state, run_at, max_attempts,
                              grp, timeout_seconds, trace, n),
         LATERAL (SELECT CASE WHEN v.state IN ('delayed', 'waiting', 'held')
                              THEN to_timestamp(v.run_at)
                              ELSE LEAST(to_timestamp(v.run_at), %(now)s::timestamptz)
                         END AS run_at) AS r
    RETURNING seq
)
SELECT min(seq), count(*) FROM inserted;

-- name: insert_tasks_uniform
-- insert_tasks_keyless for a batch whose tasks share their state, run_at, max_attempts and
-- time limit, with no key, group nor trace context (logic/enqueue.uniform_columns): those come
-- as single values, so each row evaluates four array elements where the general statement
-- evaluates ten (about 14% less PostgreSQL CPU per row, python -m bench.pg_layouts). It
-- returns as insert_tasks_keyless does.
WITH inserted AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, %(queue)s, v.tenant, NULL, v.priority, v.payload, r.state, r.run_at,
           r.run_at, %(max_attempts)s, b.seq + v.n - 1, %(now)s, r.ready_since,
           %(now)s, NULL, %(timeout)s, NULL
    FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
         -- as insert_tasks_keyless computes them per row
         (SELECT s.state,
                 CASE WHEN s.state IN ('delayed', 'waiting', 'held')
                      THEN to_timestamp(%(run_at)s::double precision)
                      ELSE LEAST(to_timestamp(%(run_at)s::double precision),
                                 %(now)s::timestamptz)
                 END AS run_at,
                 CASE WHEN s.state IN ('delayed', 'waiting', 'held') THEN NULL
                      ELSE %(now)s::timestamptz END AS ready_since
          FROM (SELECT %(state)s::text AS state) AS s) AS r,
         ROWS FROM (unnest(%(ids)s::uuid[]),
                    jsonb_array_elements_text(%(tenants)s::jsonb),
                    unnest(%(priorities)s::smallint[]),
                    jsonb_array_elements(%(payloads)s::jsonb))
         WITH ORDINALITY AS v(id, tenant, priority, payload, n)
    RETURNING seq
)
SELECT min(seq), count(*) FROM inserted;

-- name: insert_tasks_uniform_keyed
-- insert_tasks for a uniform batch (as insert_tasks_uniform) in which some tasks have a
-- key: the rows without one go in without ON CONFLICT, whose speculative insertion would
-- cost each of them (about 16% less PostgreSQL CPU per row of a batch with a key on one
-- task in ten). It returns the keyed rows inserted (id, seq), then one row (NULL, the
-- batch's first seq): the n-th row of the batch has that seq + n - 1. Its rows are kept
-- once more for its two inserts, so a batch of big payloads takes insert_tasks
-- (logic/enqueue.UNIFORM_KEYED_MAX_BYTES).
WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
v AS (
    SELECT v.id, v.tenant, v.key, v.priority, v.payload, b.seq + v.n - 1 AS seq
    FROM b, ROWS FROM (unnest(%(ids)s::uuid[]),
                       jsonb_array_elements_text(%(tenants)s::jsonb),
                       jsonb_array_elements_text(%(keys)s::jsonb),
                       unnest(%(priorities)s::smallint[]),
                       jsonb_array_elements(%(payloads)s::jsonb))
            WITH ORDINALITY AS v(id, tenant, key, priority, payload, n)
),
-- as insert_tasks computes them per row
r AS (
    SELECT s.state,
           CASE WHEN s.state IN ('delayed', 'waiting', 'held')
                THEN to_timestamp(%(run_at)s::double precision)
                ELSE LEAST(to_timestamp(%(run_at)s::double precision), %(now)s::timestamptz)
           END AS run_at,
           CASE WHEN s.state IN ('delayed', 'waiting', 'held') THEN NULL
                ELSE %(now)s::timestamptz END AS ready_since
    FROM (SELECT %(state)s::text AS state) AS s
),
plain AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, %(queue)s, v.tenant, NULL, v.priority, v.payload, r.state, r.run_at,
           r.run_at, %(max_attempts)s, v.seq, %(now)s, r.ready_since, %(now)s, NULL,
           %(timeout)s, NULL
    FROM r, v WHERE v.key IS NULL
),
keyed AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, %(queue)s, v.tenant, v.key, v.priority, v.payload, r.state, r.run_at,
           r.run_at, %(max_attempts)s, v.seq, %(now)s, r.ready_since, %(now)s, NULL,
           %(timeout)s, NULL
    FROM r, v WHERE v.key IS NOT NULL
    ON CONFLICT (queue, tenant, key)
        WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
    DO NOTHING
    RETURNING id::text, seq
)
SELECT id, seq FROM keyed
UNION ALL SELECT NULL, seq FROM b;

-- name: live_by_keys
SELECT t.id, t.tenant, t.key, t.state
FROM tierq_tasks t
JOIN unnest(%(tenants)s::text[], %(keys)s::text[]) AS v(tenant, key)
  ON t.tenant = v.tenant AND t.key = v.key
WHERE t.queue = %(queue)s AND t.state IN ('delayed', 'cold', 'warm', 'held');

-- name: replace_tasks
-- on_conflict = replace: update live tasks in place; seq is untouched, so a task never moves
-- back in line. A new schedule in the future turns a ready task delayed. Unchanged rows are
-- not returned (outcome "ignored").
UPDATE tierq_tasks t
SET payload = v.payload,
    priority = v.priority,
    max_attempts = v.max_attempts,
    timeout_seconds = v.timeout_seconds,
    run_at = COALESCE(v.run_at, t.run_at),
    run_at_initially = COALESCE(v.run_at, t.run_at_initially),
    state = CASE WHEN t.state IN ('cold', 'warm') AND v.run_at > %(now)s THEN 'delayed'
                 ELSE t.state END,
    state_since = CASE WHEN t.state IN ('cold', 'warm') AND v.run_at > %(now)s
                       THEN %(now)s::timestamptz ELSE t.state_since END,
    ready_since = CASE WHEN t.state IN ('cold', 'warm') AND v.run_at > %(now)s THEN NULL
                       ELSE t.ready_since END
FROM unnest(%(ids)s::uuid[], %(payloads)s::jsonb[], %(priorities)s::smallint[],
            %(run_ats)s::timestamptz[], %(max_attempts)s::int[], %(timeouts)s::int[])
     AS v(id, payload, priority, run_at, max_attempts, timeout_seconds)
WHERE t.id = v.id
  AND t.state IN ('delayed', 'cold', 'warm', 'held')  -- (a held task stays held)
  AND (t.payload, t.priority, t.max_attempts, t.run_at, t.timeout_seconds)
      IS DISTINCT FROM (v.payload, v.priority, v.max_attempts, COALESCE(v.run_at, t.run_at),
                        v.timeout_seconds)
RETURNING t.id, t.tenant, t.key, t.state, t.seq, t.priority, t.payload, t.attempts,
          t.max_attempts, t.created_at, t.run_at, t.grp, t.timeout_seconds, t.trace;

-- name: mark_cold
-- Rows the warm tier refused go (or go back) to the cold line, keeping their seq.
-- By primary key only: `(state = 'warm') IS TRUE` means `state = 'warm'` (state is NOT NULL)
-- but implies no partial index's predicate, so the planner cannot scan
-- tierq_tasks_warm_since by queue instead (a fresh table's missing statistics make it
-- guess one warm row; it would read every warm row of the queue per call). A join with
-- unnest() also names the ids with = ANY, so that the table side is a primary-key lookup.
-- The ids go through ARRAY(SELECT unnest(...)), which is costed as a few ids whatever it
-- holds. A plan made for the values given (every plan behind RDS Proxy, the first ones of
-- a connection otherwise) would cost each id of a literal array at the default selectivity
-- of a table without statistics. It would take 400 ids for most of a 20,000-row table and
-- read all of it: 13 ms a batch, against 0.5 ms by key.
UPDATE tierq_tasks SET state = 'cold', state_since = %(now)s
WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND (state = 'warm') IS TRUE;

-- name: make_ready
-- Tasks becoming ready (due, retried, re-queued, replayed) take a new seq, in the order
-- given: the back of their line. The CTE is not inlined (nextval is volatile), so seqs
-- follow the array order.
WITH s AS (
    SELECT v.id, v.state, nextval('tierq_task_seq') AS seq
    FROM unnest(%(ids)s::uuid[], %(states)s::text[]) AS v(id, state)
)
UPDATE tierq_tasks t
SET state = s.state, seq = s.seq, ready_since = %(now)s, state_since = %(now)s
FROM s
WHERE t.id = s.id AND t.state = ANY(%(from_states)s::text[])
RETURNING t.id, t.queue, t.tenant, t.key, t.state, t.seq, t.priority, t.payload, t.attempts,
          t.max_attempts, t.created_at, t.parents::text, t.grp, t.timeout_seconds, t.trace;

-- name: lease_outcomes
-- Nack and lease expiry: record the attempt and error, then retry later or dead-letter.
-- By primary key only (see mark_cold). Only an attempt not recorded yet: two reaper passes
-- (or a nack and the reaper) that both saw one lease record it once, and the later one
-- cannot put back in line a task already leased again for its next attempt. A task that
-- others wait on (waiters > 0) only when %(waited)s: its settlement runs in the same
-- transaction (logic/flows.py). Each row only when it is the tenant given with it (its
-- lease's), whatever the caller checked before.
UPDATE tierq_tasks t
SET attempts = v.attempt,
    last_error = v.error,
    state = CASE WHEN v.dead OR v.attempt >= t.max_attempts THEN 'dead' ELSE 'delayed' END,
    run_at = CASE WHEN v.dead OR v.attempt >= t.max_attempts THEN t.run_at ELSE v.retry_at END,
    finished_at = CASE WHEN v.dead OR v.attempt >= t.max_attempts
                       THEN %(now)s::timestamptz ELSE NULL END,
    ready_since = NULL,
    state_since = %(now)s
FROM unnest(%(ids)s::uuid[], %(tenants)s::text[], %(attempts)s::int[], %(errors)s::text[],
            %(retry_ats)s::timestamptz[], %(deads)s::bool[])
     AS v(id, tenant, attempt, error, retry_at, dead)
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.id = v.id
  AND t.queue = %(queue)s AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
  AND (t.waiters = 0 OR %(waited)s)  -- (waited: logic/flows.py, with the settlement)
RETURNING t.id, t.tenant, t.state, t.run_at, t.grp;

-- name: release_leased
-- Release: tasks whose leases the caller gave back (taken from Valkey first) return to line
-- in their old place (their seq); no attempt is recorded. By primary key only (see
-- mark_cold); not an attempt already recorded; only the tenant given with each (its lease's).
UPDATE tierq_tasks t
SET state_since = %(now)s
FROM unnest(%(ids)s::uuid[], %(tenants)s::text[], %(attempts)s::int[]) AS v(id, tenant, attempt)
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.id = v.id
  AND t.queue = %(queue)s AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
RETURNING t.id, t.queue, t.tenant, t.key, t.state, t.seq, t.priority, t.payload, t.attempts,
          t.max_attempts, t.created_at, t.parents::text, t.grp, t.timeout_seconds, t.trace;

-- name: ack_delete
-- Acks whose leases all have one attempt number (the usual batch). By primary key only
-- (see mark_cold). Not an attempt already recorded as failed: an ack checked just before
-- its lease's deadline can reach here after the reaper expired that lease and put the task
-- back in line; deleting the row then would leave the task in line without it (delivered
-- again after an accepted ack). The ack is refused instead. A task that others wait on
-- (waiters > 0) is left to ack_keep_waited (logic/flows.py), which keeps it and settles it.
-- Only rows of the tenant given: the batch's leases' one tenant (a batch over several, an
-- admin's, goes to ack_delete_by_attempt, which pairs each row with its own). Not joined
-- row by row: that join costs what this form saves.
DELETE FROM tierq_tasks
WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND queue = %(queue)s
  AND tenant = ANY(%(tenant_set)s::text[])
  AND (state = 'warm') IS TRUE AND attempts < %(attempt)s AND waiters = 0
RETURNING id::text, grp;

-- name: ack_delete_by_attempt
-- ack_delete for a batch whose leases have different attempt numbers, each row checked
-- against its own (the join costs ~2.5 µs per row, so the usual batch does without it),
-- and against the tenant given with it (its lease's).
DELETE FROM tierq_tasks t
USING unnest(%(ids)s::uuid[], %(tenants)s::text[], %(attempts)s::int[])
      AS v(id, tenant, attempt)
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.id = v.id
  AND t.queue = %(queue)s AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt AND t.waiters = 0
RETURNING t.id::text, t.grp;

-- name: ack_keep
-- An ack with a result keeps the task (state done) until the queue's retention ends.
-- By primary key only (see mark_cold). Not an attempt already recorded as failed (the
-- reaper expired it meanwhile: the task is in line again). Only the tenant given with each
-- row (its lease's).
UPDATE tierq_tasks t
SET state = 'done', result = v.result, attempts = v.attempt, finished_at = %(now)s,
    state_since = %(now)s, ready_since = NULL
FROM unnest(%(ids)s::uuid[], %(tenants)s::text[], %(results)s::jsonb[], %(attempts)s::int[])
     AS v(id, tenant, result, attempt)
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.id = v.id
  AND t.queue = %(queue)s AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt AND t.waiters = 0
RETURNING t.id::text, t.grp;

-- name: write_progress
-- The last progress of leases whose attempt ends (logic/leases.record_progress), written
-- before the outcome: only to a row still leased for that attempt (warm, the attempt not
-- recorded) of the tenant given with it (its lease's), by primary key.
UPDATE tierq_tasks t
SET progress = v.progress, progress_at = v.progress_at
FROM unnest(%(ids)s::uuid[], %(tenants)s::text[], %(attempts)s::int[], %(progress)s::jsonb[],
            %(progress_at)s::timestamptz[]) AS v(id, tenant, attempt, progress, progress_at)
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.id = v.id
  AND t.queue = %(queue)s AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt;

-- name: try_pair_lock
-- One promoter per (queue, tenant) at a time: a session lock, held from selecting a batch
-- until it is pushed, so two movers never interleave their batches.
SELECT pg_try_advisory_lock(hashtextextended(%(queue)s || '|' || %(tenant)s, 7)) AS locked;

-- name: release_pair_lock
SELECT pg_advisory_unlock(hashtextextended(%(queue)s || '|' || %(tenant)s, 7)) AS released;

-- name: promote_cold
-- Cold -> warm: the oldest of the line (priority desc, seq), in one large batch. Returns
-- what the warm tier takes of each task: the id, the priority and seq (its place in the
-- ready set, core/ordering.py) and the task's blob in the layout of
-- logic/admission.task_blob (`<attempts>|{"e":…,"p":…,"k":…,"pr":…,"m":…,"c":<created ms>}`,
-- then "pa", "g" and "gs", "to" when the task has them),
-- built here rather than row by row in Python (tests/integration/test_tiers_and_order.py
-- checks the two agree).
-- No FOR UPDATE: locking the picked rows first wrote each row twice (a lock record, then
-- the new version), about a third of the statement's cost. The UPDATE locks each row itself
-- and re-checks that it is cold on a row changed meanwhile (a replaced task is moved with
-- its new content, a cancelled one is skipped). The caller holds the pair's promotion lock
-- and runs this under local_lock_timeout, so it never waits long on a row another writer
-- holds: it gives up the batch instead (logic/tiering.py). The ids go through ARRAY(...) so
-- the update finds its rows by primary key (a join with the picked rows chose a hash join
-- over the whole table).
UPDATE tierq_tasks t
SET state = 'warm', state_since = %(now)s
WHERE t.id = ANY(ARRAY(
        SELECT id FROM tierq_tasks
        WHERE queue = %(queue)s AND tenant = %(tenant)s AND state = 'cold'
        ORDER BY priority DESC, seq
        LIMIT %(limit)s))
  AND (t.state = 'cold') IS TRUE  -- implies no partial index (see ack_delete)
RETURNING t.id::text AS id, t.priority, t.seq,
          t.attempts || '|{"e":'
              -- the quotes and backslashes of the JSON text (task_blob's `e`): 12 of its keys
              || (12 + length(t.payload::text) - length(translate(t.payload::text, '"\', ''))
                  + length(COALESCE(to_json(t.key)::text, ''))
                  - length(translate(COALESCE(to_json(t.key)::text, ''), '"\', ''))
                  -- a released task's parents ("pa", logic/flows.py), its key's quotes too
                  + COALESCE(2 + length(t.parents::text)
                             - length(translate(t.parents::text, '"\', '')), 0)
                  -- a grouped task's group and seq ("g", "gs", logic/groups.py), their
                  -- keys' quotes too
                  + COALESCE(4 + length(to_json(t.grp)::text)
                             - length(translate(to_json(t.grp)::text, '"\', '')), 0)
                  -- a time limit's key ("to", migration 0021)
                  + CASE WHEN t.timeout_seconds IS NULL THEN 0 ELSE 2 END
                  -- a traced task's trace context ("tr", models/traces.py), its key's
                  -- quotes too
                  + COALESCE(2 + length(t.trace) - length(translate(t.trace, '"\', '')), 0))
              || ',"p":' || t.payload::text
              || ',"k":' || COALESCE(to_json(t.key)::text, 'null')
              || ',"pr":' || t.priority || ',"m":' || t.max_attempts
              || ',"c":' || floor(extract(epoch FROM t.created_at) * 1000)::bigint
              || COALESCE(',"pa":' || t.parents::text, '')
              || COALESCE(',"g":' || to_json(t.grp)::text || ',"gs":' || t.seq, '')
              || COALESCE(',"to":' || t.timeout_seconds, '')
              || COALESCE(',"tr":' || t.trace, '') || '}'
              AS blob;

-- name: local_lock_timeout
-- For the caller's transaction only: how long its statements may wait for a row lock (the
-- promotion's promote_cold, the batch sweep's deletes).
SELECT set_config('lock_timeout', %(timeout)s, true);

-- name: has_cold
SELECT EXISTS (
    SELECT 1 FROM tierq_tasks WHERE queue = %(queue)s AND tenant = %(tenant)s AND state = 'cold'
) AS has_cold;

-- name: warm_suspects
-- Warm rows old enough that Valkey should know them (the reconciler checks which it lost),
-- one slice after the reconciler's cursor (a state_since): the rows of the next `limit`
-- rows' state_since values, whole (the rows of one state_since, written by one statement,
-- are never split between slices, so a slice may hold that many more). Every pass reads
-- the next slice (the caller starts over once one comes back short), so a pair of many
-- leased rows is checked all through, not only its oldest slice over and over. Both reads
-- go by tierq_tasks_warm_since from the cursor on.
SELECT id, state_since FROM tierq_tasks
WHERE queue = %(queue)s AND tenant = %(tenant)s AND state = 'warm' AND state_since > %(after)s
  AND state_since <= (  -- (a scalar subquery: an index condition of the outer scan)
      SELECT max(state_since)
      FROM (SELECT state_since FROM tierq_tasks
            WHERE queue = %(queue)s AND tenant = %(tenant)s AND state = 'warm'
              AND state_since > %(after)s AND state_since < %(before)s
            ORDER BY state_since
            LIMIT %(limit)s) AS s)
ORDER BY state_since;

-- name: take_over_for_restore
-- The reconciler takes over rows Valkey lost: their state_since moves to now (committed
-- before they are pushed), so no other reconciler takes them again before its grace has
-- passed, and a late push of any of them is refused by the fence (lua/missing.lua). Only
-- rows still warm and older than the cutoff: a release that wrote one meanwhile
-- (release_leased) keeps it. Locked rows are skipped (the writer holding them has them in
-- hand). By primary key only (see mark_cold).
UPDATE tierq_tasks t
SET state_since = %(now)s
WHERE t.id = ANY(ARRAY(
        SELECT id FROM tierq_tasks
        WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND (state = 'warm') IS TRUE
          AND state_since < %(before)s
        FOR UPDATE SKIP LOCKED))
  AND (t.state = 'warm') IS TRUE AND t.state_since < %(before)s
RETURNING t.id, t.key, t.seq, t.priority, t.payload, t.attempts, t.max_attempts,
          t.created_at, t.parents::text, t.grp, t.timeout_seconds, t.trace;

-- name: all_pairs
SELECT queue, tenant FROM tierq_queue_tenants ORDER BY queue, tenant;

-- name: tenants_of_queue
SELECT tenant FROM tierq_queue_tenants WHERE queue = %(queue)s ORDER BY tenant;

-- name: queue_settings_row
-- (Columns named, not *: a column a migration adds must not reach code that predates it.)
SELECT q.queue, q.warm_max, q.lease_seconds, q.max_attempts, q.backoff_kind,
       q.backoff_base_seconds, q.backoff_cap_seconds, q.backoff_jitter, q.retention_seconds,
       q.paused, q.created_at, q.updated_at, q.warm_max_bytes, l.max_leased, l.rate_per_second,
       l.rate_burst, l.tenant_max_leased, l.tenant_rate_per_second, l.tenant_rate_burst,
       q.consumer, l.group_max_leased, q.timeout_seconds
FROM tierq_queues q LEFT JOIN tierq_queue_limits l ON l.queue = q.queue
WHERE q.queue = %(queue)s;

-- name: upsert_queue_settings
-- The queue's row (the consumer and the time limit are written when set_consumer and
-- set_timeout are true, NULL removing them; the other settings keep their stored value when given NULL), and its limits row
-- (tierq_queue_limits) when any set_* flag of a limit is true: those limits are written,
-- NULL clearing them, the others kept. The row after, both tables read as one.
WITH q AS (
    INSERT INTO tierq_queues AS q (queue, warm_max, warm_max_bytes, lease_seconds,
                                   max_attempts, backoff_kind, backoff_base_seconds,
                                   backoff_cap_seconds, backoff_jitter, retention_seconds,
                                   paused, consumer, timeout_seconds)
    VALUES (%(queue)s, %(warm_max)s, %(warm_max_bytes)s, %(lease_seconds)s, %(max_attempts)s,
            %(backoff_kind)s, %(backoff_base_seconds)s, %(backoff_cap_seconds)s,
            %(backoff_jitter)s, %(retention_seconds)s, COALESCE(%(paused)s, false),
            %(consumer)s::jsonb, %(timeout_seconds)s)
    ON CONFLICT (queue) DO UPDATE SET
        warm_max = COALESCE(EXCLUDED.warm_max, q.warm_max),
        warm_max_bytes = COALESCE(EXCLUDED.warm_max_bytes, q.warm_max_bytes),
        lease_seconds = COALESCE(EXCLUDED.lease_seconds, q.lease_seconds),
        max_attempts = COALESCE(EXCLUDED.max_attempts, q.max_attempts),
        backoff_kind = COALESCE(EXCLUDED.backoff_kind, q.backoff_kind),
        backoff_base_seconds = COALESCE(EXCLUDED.backoff_base_seconds, q.backoff_base_seconds),
        backoff_cap_seconds = COALESCE(EXCLUDED.backoff_cap_seconds, q.backoff_cap_seconds),
        backoff_jitter = COALESCE(EXCLUDED.backoff_jitter, q.backoff_jitter),
        retention_seconds = COALESCE(EXCLUDED.retention_seconds, q.retention_seconds),
        paused = COALESCE(%(paused)s, q.paused),
        consumer = CASE WHEN %(set_consumer)s THEN EXCLUDED.consumer ELSE q.consumer END,
        timeout_seconds = CASE WHEN %(set_timeout)s THEN EXCLUDED.timeout_seconds
                               ELSE q.timeout_seconds END,
        updated_at = now()
    RETURNING queue, warm_max, lease_seconds, max_attempts, backoff_kind,
              backoff_base_seconds, backoff_cap_seconds, backoff_jitter, retention_seconds,
              paused, created_at, updated_at, warm_max_bytes, consumer, timeout_seconds
), l AS (
    INSERT INTO tierq_queue_limits AS l (queue, max_leased, rate_per_second, rate_burst,
                                         tenant_max_leased, tenant_rate_per_second,
                                         tenant_rate_burst, group_max_leased)
    SELECT %(queue)s, %(max_leased)s, %(rate_per_second)s, %(rate_burst)s,
           %(tenant_max_leased)s, %(tenant_rate_per_second)s, %(tenant_rate_burst)s,
           %(group_max_leased)s
    WHERE %(set_max_leased)s OR %(set_rate)s OR %(set_tenant_max_leased)s
       OR %(set_tenant_rate)s OR %(set_group_max_leased)s
    ON CONFLICT (queue) DO UPDATE SET
        max_leased = CASE WHEN %(set_max_leased)s THEN EXCLUDED.max_leased
                          ELSE l.max_leased END,
        rate_per_second = CASE WHEN %(set_rate)s THEN EXCLUDED.rate_per_second
                               ELSE l.rate_per_second END,
        rate_burst = CASE WHEN %(set_rate)s THEN EXCLUDED.rate_burst ELSE l.rate_burst END,
        tenant_max_leased = CASE WHEN %(set_tenant_max_leased)s THEN EXCLUDED.tenant_max_leased
                                 ELSE l.tenant_max_leased END,
        tenant_rate_per_second = CASE WHEN %(set_tenant_rate)s
                                      THEN EXCLUDED.tenant_rate_per_second
                                      ELSE l.tenant_rate_per_second END,
        tenant_rate_burst = CASE WHEN %(set_tenant_rate)s THEN EXCLUDED.tenant_rate_burst
                                 ELSE l.tenant_rate_burst END,
        group_max_leased = CASE WHEN %(set_group_max_leased)s THEN EXCLUDED.group_max_leased
                                ELSE l.group_max_leased END
    RETURNING queue, max_leased, rate_per_second, rate_burst, tenant_max_leased,
              tenant_rate_per_second, tenant_rate_burst, group_max_leased
)
-- (a limits row this statement did not write is read as it was before it)
SELECT q.queue, q.warm_max, q.lease_seconds, q.max_attempts, q.backoff_kind,
       q.backoff_base_seconds, q.backoff_cap_seconds, q.backoff_jitter, q.retention_seconds,
       q.paused, q.created_at, q.updated_at, q.warm_max_bytes,
       CASE WHEN l.queue IS NULL THEN o.max_leased ELSE l.max_leased END AS max_leased,
       CASE WHEN l.queue IS NULL THEN o.rate_per_second ELSE l.rate_per_second END
           AS rate_per_second,
       CASE WHEN l.queue IS NULL THEN o.rate_burst ELSE l.rate_burst END AS rate_burst,
       CASE WHEN l.queue IS NULL THEN o.tenant_max_leased ELSE l.tenant_max_leased END
           AS tenant_max_leased,
       CASE WHEN l.queue IS NULL THEN o.tenant_rate_per_second
            ELSE l.tenant_rate_per_second END AS tenant_rate_per_second,
       CASE WHEN l.queue IS NULL THEN o.tenant_rate_burst ELSE l.tenant_rate_burst END
           AS tenant_rate_burst,
       q.consumer,
       CASE WHEN l.queue IS NULL THEN o.group_max_leased ELSE l.group_max_leased END
           AS group_max_leased,
       q.timeout_seconds
FROM q
LEFT JOIN l ON true
LEFT JOIN tierq_queue_limits o ON o.queue = q.queue;

-- name: known_queues
SELECT queue FROM tierq_queues
UNION
SELECT queue FROM tierq_queue_tenants
ORDER BY queue;

-- name: metric_queues
-- The queues whose CloudWatch metrics and alarms carry their own name (logic/metric_queues.py):
-- those an admin configured (a settings row, never a name a tenant merely used), the first
-- `limit` by when their settings were first stored, so a queue keeps its series once it has it.
SELECT queue FROM tierq_queues ORDER BY created_at, queue LIMIT %(limit)s;

-- name: task_by_id
-- The task's row, when it is the tenant's given (NULL: any tenant's; an admin's read); or,
-- for a member still in its batch row (`batch` and `place` of its id, NULL for any other
-- id: migration 0030), the row it would have, warm since its batch was made. One of the
-- two at most: a member that ended has its end, and only a moved one has a row.
-- (Columns named, not *: a column a migration adds must not reach code that predates it.)
SELECT id, queue, tenant, key, priority, payload, state, run_at, run_at_initially, attempts,
       max_attempts, seq, created_at, ready_since, state_since, finished_at, last_error,
       result, grp, progress, progress_at, trace, timeout_seconds
FROM tierq_tasks
WHERE queue = %(queue)s AND id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
UNION ALL
SELECT %(id)s::uuid, b.queue, tierq_batch_tenant(b.tenant_names, b.tenant_of, p.place), NULL,
       b.priorities[p.place + 1], b.payloads -> p.place, 'warm', b.created_at, b.created_at,
       0, b.max_attempts, tierq_batch_seq(b.first_seq, b.seq_offsets, p.place), b.created_at,
       b.created_at, b.created_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, b.timeout_seconds
FROM tierq_batches b, (SELECT %(place)s::int AS place) AS p
WHERE b.id = %(batch)s::uuid AND b.queue = %(queue)s AND p.place < b.tasks
  AND (%(tenant)s::text IS NULL
       OR tierq_batch_tenant(b.tenant_names, b.tenant_of, p.place) = %(tenant)s)
  AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                  WHERE e.batch = b.id AND p.place = ANY(e.places));

-- name: cancel_task
-- DELETE …/tasks/{id}: the task's row, when it is the tenant's given (NULL: any tenant's).
DELETE FROM tierq_tasks
WHERE queue = %(queue)s AND id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
RETURNING id, queue, tenant, key, priority, payload, state, run_at, run_at_initially,
          attempts, max_attempts, seq, created_at, ready_since, state_since, finished_at,
          last_error, result, grp, progress, progress_at, trace, timeout_seconds;

-- name: cancel_mark
-- POST …/cancel: the task marked cancelled (kept until its queue's retention ends), when
-- it is not finished and is the tenant's given (NULL: any tenant's). Returns the row with
-- the state it had before (what the caller takes it out of), or nothing: not found, not
-- the tenant's, or finished already (the caller reads the row to tell which).
WITH old AS (
    SELECT id, state FROM tierq_tasks
    WHERE queue = %(queue)s AND id = %(id)s
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
    FOR UPDATE
)
UPDATE tierq_tasks t
SET state = 'cancelled', finished_at = %(now)s, state_since = %(now)s, ready_since = NULL
FROM old
WHERE t.id = old.id AND old.state IN ('waiting', 'held', 'delayed', 'cold', 'warm')
RETURNING t.id, t.queue, t.tenant, t.key, t.priority, t.payload, old.state, t.run_at,
          t.run_at_initially, t.attempts, t.max_attempts, t.seq, t.created_at,
          t.ready_since, t.state_since, t.finished_at, t.last_error, t.result, t.grp,
          t.progress, t.progress_at, t.trace, t.timeout_seconds;

-- name: cancelled_progress
-- The last progress of a cancelled task's lease, which the cancel ended (logic/tasks.cancel):
-- written to the row cancelled while that attempt ran (its attempt not recorded), unless the
-- row holds a later progress already.
UPDATE tierq_tasks
SET progress = %(progress)s::jsonb, progress_at = %(progress_at)s
WHERE queue = %(queue)s AND id = %(id)s AND (state = 'cancelled') IS TRUE
  AND attempts < %(attempt)s
  AND (progress_at IS NULL OR progress_at < %(progress_at)s);

-- name: cancelled_among
-- Which of these (id, tenant) tasks of the queue are cancelled: what a heartbeat, an ack or
-- a nack whose lease was refused tells its worker (logic/leases.py). Only a task of the
-- tenant its item names counts: a made-up token must not tell a tenant about another's
-- task. By primary key (see mark_cold).
SELECT DISTINCT t.id::text
FROM tierq_tasks t
JOIN unnest(%(ids)s::uuid[], %(tenants)s::text[]) AS v(id, tenant)
  ON t.id = v.id AND t.tenant = v.tenant
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.queue = %(queue)s
  AND (t.state = 'cancelled') IS TRUE;

-- name: dlq_page
-- A queue's dead letters, newest first, before the cursor (the first page passes the
-- greatest position: 'infinity' and the greatest id).
SELECT id, queue, tenant, key, priority, payload, state, run_at, run_at_initially, attempts,
       max_attempts, seq, created_at, ready_since, state_since, finished_at, last_error,
       result, grp, progress, progress_at, trace, timeout_seconds
FROM tierq_tasks
WHERE queue = %(queue)s AND state = 'dead'
  AND (finished_at, id) < (%(after)s::timestamptz, %(after_id)s::uuid)
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s;

-- name: dlq_page_of_tenant
-- One tenant's dead letters of a queue, newest first, before the cursor: a statement of its
-- own so that even a generic plan walks that tenant's part of tierq_tasks_dead_line.
SELECT id, queue, tenant, key, priority, payload, state, run_at, run_at_initially, attempts,
       max_attempts, seq, created_at, ready_since, state_since, finished_at, last_error,
       result, grp, progress, progress_at, trace, timeout_seconds
FROM tierq_tasks
WHERE queue = %(queue)s AND tenant = %(tenant)s AND state = 'dead'
  AND (finished_at, id) < (%(after)s::timestamptz, %(after_id)s::uuid)
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s;

-- name: lock_dead
-- DLQ replay: dead rows of a queue (all, or the ids given; of one tenant when given) whose
-- key no task holds in tierq_tasks_live_key (a replay must not create a second live task
-- with the same key). The states probed are exactly that index's: a held task holds its
-- key too. Two dead rows may share a key (it died, was enqueued again and died again):
-- the caller replays only the first of them per key.
SELECT d.id, d.tenant, d.key
FROM tierq_tasks d
WHERE d.queue = %(queue)s AND d.state = 'dead'
  AND (%(tenant)s::text IS NULL OR d.tenant = %(tenant)s)
  AND (%(all)s OR d.id = ANY(%(ids)s::uuid[]))
  AND (d.key IS NULL OR NOT EXISTS (
        SELECT 1 FROM tierq_tasks l
        WHERE l.queue = d.queue AND l.tenant = d.tenant AND l.key = d.key
          AND l.state IN ('delayed', 'cold', 'warm', 'held')))
ORDER BY d.finished_at, d.seq
LIMIT %(limit)s
FOR UPDATE OF d SKIP LOCKED;

-- name: reset_dead
-- DLQ replay: the dead rows lock_dead locked go back to delayed, attempts reset; the ids
-- reset. A row whose key a task holds in tierq_tasks_live_key stays dead: one committed
-- since lock_dead's snapshot (the caller skips the row). One committed while this statement
-- runs still fails it on the index; the caller runs it again in a savepoint (logic/dlq.py).
-- By primary key only (see mark_cold); the key probe reads tierq_tasks_live_key.
UPDATE tierq_tasks d
SET attempts = 0, finished_at = NULL, state = 'delayed', run_at = %(now)s, state_since = %(now)s
WHERE d.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND (d.state = 'dead') IS TRUE
  AND (d.key IS NULL OR NOT EXISTS (
        SELECT 1 FROM tierq_tasks l
        WHERE l.queue = d.queue AND l.tenant = d.tenant AND l.key = d.key
          AND l.state IN ('delayed', 'cold', 'warm', 'held')))
RETURNING d.id;

-- name: purge_dead
-- DLQ purge: at most %(limit)s dead rows of a queue (all, or the ids given; of one tenant
-- when given). The rows are picked once (MATERIALIZED): a LIMIT in an IN (...) subquery may
-- be evaluated again and delete more.
WITH picked AS MATERIALIZED (
    SELECT id FROM tierq_tasks
    WHERE queue = %(queue)s AND state = 'dead'
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
      AND (%(all)s OR id = ANY(%(ids)s::uuid[]))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM tierq_tasks t
USING picked
WHERE t.id = picked.id AND t.state = 'dead'
RETURNING t.id;

-- name: purge_queue_tasks
-- Every task of a queue, whatever its state (SQS's PurgeQueue).
DELETE FROM tierq_tasks WHERE queue = %(queue)s;

-- ============================================================================================
-- Listings of the HTTP API (queues, metrics, running leases): keyset pages in (queue, tenant)
-- order after a cursor, filtered by tenant (and queue) here, never after reading all. The
-- route fills a page until it would overrun a Lambda response (tierq.aws.http.paging).
-- ============================================================================================

-- name: queue_known
-- Whether a queue has settings or has had tasks (of the tenant given, or of any).
SELECT EXISTS (SELECT 1 FROM tierq_queues
               WHERE queue = %(queue)s AND %(tenant)s::text IS NULL)
    OR EXISTS (SELECT 1 FROM tierq_queue_tenants
               WHERE queue = %(queue)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s))
    AS known;

-- Each filter has a statement of its own, so that a cached generic plan still walks the
-- index that matches it (a "tenant IS NULL OR …" condition would not be an index bound).

-- name: queue_names_page
-- Queue names after `after` in name order: every queue with settings or tasks.
SELECT queue FROM (
    (SELECT queue FROM tierq_queues
     WHERE queue > %(after)s
     ORDER BY queue LIMIT %(limit)s)
    UNION
    (SELECT DISTINCT queue FROM tierq_queue_tenants
     WHERE queue > %(after)s
     ORDER BY queue LIMIT %(limit)s)
) AS q
ORDER BY queue
LIMIT %(limit)s;

-- name: queue_names_of_tenant_page
-- The queues one tenant has had tasks in, after `after` (tierq_queue_tenants_by_tenant).
SELECT queue FROM tierq_queue_tenants
WHERE tenant = %(tenant)s AND queue > %(after)s
ORDER BY tenant, queue
LIMIT %(limit)s;

-- name: pairs_page
-- Registered (queue, tenant) pairs after the cursor.
SELECT queue, tenant FROM tierq_queue_tenants
WHERE (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
ORDER BY queue, tenant
LIMIT %(limit)s;

-- name: pairs_of_queue_page
-- One queue's pairs after the cursor's tenant.
SELECT queue, tenant FROM tierq_queue_tenants
WHERE queue = %(queue)s AND tenant > %(after_tenant)s
ORDER BY queue, tenant
LIMIT %(limit)s;

-- name: pairs_of_tenant_page
-- One tenant's pairs after the cursor's queue (tierq_queue_tenants_by_tenant).
SELECT queue, tenant FROM tierq_queue_tenants
WHERE tenant = %(tenant)s AND queue >= %(after_queue)s
  AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
ORDER BY tenant, queue
LIMIT %(limit)s;

-- name: pair_of_queue_and_tenant_page
-- The one pair of a queue and a tenant, if registered and after the cursor.
SELECT queue, tenant FROM tierq_queue_tenants
WHERE queue = %(queue)s AND tenant = %(tenant)s
  AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
LIMIT %(limit)s;

-- name: pairs_with_warm_rows
-- Which of the pairs given have warm rows (ready in Valkey or leased) or batch rows
-- (migration 0030: warm members): where leases can be.
SELECT p.queue, p.tenant
FROM unnest(%(queues)s::text[], %(tenants)s::text[]) WITH ORDINALITY AS p(queue, tenant, n)
WHERE EXISTS (SELECT 1 FROM tierq_tasks t
              WHERE t.queue = p.queue AND t.tenant = p.tenant AND t.state = 'warm')
   OR EXISTS (SELECT 1 FROM tierq_batch_pairs b  -- (OFFSET 0: one descent per pair)
              WHERE b.queue = p.queue AND b.tenant = p.tenant OFFSET 0)
ORDER BY p.n;

-- name: pair_state_counts
-- Waiting, held, cold, delayed and dead counts of the pairs given (one partial index each;
-- held by tierq_tasks_group_held), and of tierq_groups (migration 0019) the pair's groups
-- with work and the earliest time one of them had its head made active (the primary key's
-- range of the pair: one entry per group, never a task).
SELECT p.queue, p.tenant,
       (SELECT count(*) FROM tierq_tasks t
        WHERE t.queue = p.queue AND t.tenant = p.tenant AND t.state = 'waiting') AS waiting,
       (SELECT count(*) FROM tierq_tasks t
        WHERE t.queue = p.queue AND t.tenant = p.tenant AND t.state = 'held') AS held,
       (SELECT count(*) FROM tierq_tasks t
        WHERE t.queue = p.queue AND t.tenant = p.tenant AND t.state = 'cold') AS cold,
       (SELECT count(*) FROM tierq_tasks t
        WHERE t.queue = p.queue AND t.tenant = p.tenant AND t.state = 'delayed') AS delayed,
       (SELECT count(*) FROM tierq_tasks t
        WHERE t.queue = p.queue AND t.tenant = p.tenant AND t.state = 'dead') AS dead,
       g.groups, g.oldest_head
FROM unnest(%(queues)s::text[], %(tenants)s::text[]) AS p(queue, tenant),
     LATERAL (SELECT count(*) AS groups, min(r.head_since) AS oldest_head
              FROM tierq_groups r
              WHERE r.queue = p.queue AND r.tenant = p.tenant
                AND r.active + r.held > 0) AS g;

-- name: pair_oldest_ready
-- When the longest-waiting ready task of each pair given became ready: of its cold rows,
-- and of the warm tasks given (`heads`: the first in line of each priority of the pairs'
-- ready sets, logic/queues.pair_counts; a line is in the order its tasks became ready),
-- found by primary key, so leased warm rows are never read. LEAST ignores NULLs.
SELECT p.queue, p.tenant,
       LEAST((SELECT min(t.ready_since) FROM tierq_tasks t
              WHERE t.queue = p.queue AND t.tenant = p.tenant AND t.state = 'cold'),
             (SELECT min(t.ready_since) FROM tierq_tasks t
              WHERE t.id = ANY(ARRAY(SELECT unnest(%(heads)s::uuid[])))
                AND t.queue = p.queue AND t.tenant = p.tenant
                AND (t.state = 'warm') IS TRUE),
             -- (heads still in batch rows, migration 0030: ready since their batch was
             -- made; each of the pair's tenant, by its place)
             (SELECT min(b.created_at)
              FROM unnest(%(head_batches)s::uuid[], %(head_places)s::int[])
                   AS h(batch, place)
              JOIN tierq_batches b ON b.id = h.batch
              WHERE b.id = ANY(ARRAY(SELECT unnest(%(head_batches)s::uuid[])))
                AND b.queue = p.queue AND h.place < b.tasks
                AND tierq_batch_tenant(b.tenant_names, b.tenant_of, h.place) = p.tenant
                AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                                WHERE e.batch = b.id AND h.place = ANY(e.places))))
       AS oldest
FROM unnest(%(queues)s::text[], %(tenants)s::text[]) AS p(queue, tenant);

-- ============================================================================================
-- Maintenance by activity (migration 0006): the pairs and queues with work, in slices after
-- a cursor; the pair registry with its per-tenant cap on queues; forgetting idle pairs.
-- The skip scans below jump from one (queue, tenant) of a partial index to the next with one
-- index descent each (a recursive CTE, LIMIT 1 per step): their cost follows the pairs that
-- have rows in that state, never the pairs ever seen.
-- ============================================================================================

-- name: walk_warm_pairs
-- The reaper's walk: pairs with warm rows (ready tasks or leases in Valkey, rows to
-- reconcile) or batch rows (migration 0030: warm members), in (queue, tenant) order after
-- the cursor.
WITH RECURSIVE walk AS (
    (SELECT queue, tenant FROM tierq_tasks
     WHERE state = 'warm' AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM walk, LATERAL (
        SELECT t.queue, t.tenant FROM tierq_tasks t
        WHERE t.state = 'warm' AND (t.queue, t.tenant) > (walk.queue, walk.tenant)
        ORDER BY t.queue, t.tenant LIMIT 1) AS step
), batch_walk AS (
    (SELECT queue, tenant FROM tierq_batch_pairs
     WHERE (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM batch_walk w, LATERAL (
        SELECT p.queue, p.tenant FROM tierq_batch_pairs p
        WHERE (p.queue, p.tenant) > (w.queue, w.tenant)
        ORDER BY p.queue, p.tenant LIMIT 1) AS step
)
SELECT queue, tenant FROM (
    (SELECT queue, tenant FROM walk LIMIT %(limit)s)
    UNION
    (SELECT queue, tenant FROM batch_walk LIMIT %(limit)s)
) AS with_rows
ORDER BY queue, tenant
LIMIT %(limit)s;

-- name: walk_cold_to_warm_pairs
-- The mover's walk: pairs with cold rows, and pairs it left in cold mode (their cold line
-- may have drained since; one more visit returns them to warm mode). `marked` says whether
-- the pair is recorded in cold mode.
WITH RECURSIVE walk AS (
    (SELECT queue, tenant FROM tierq_tasks
     WHERE state = 'cold' AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM walk, LATERAL (
        SELECT t.queue, t.tenant FROM tierq_tasks t
        WHERE t.state = 'cold' AND (t.queue, t.tenant) > (walk.queue, walk.tenant)
        ORDER BY t.queue, t.tenant LIMIT 1) AS step
), cold AS (
    SELECT queue, tenant, false AS marked FROM walk LIMIT %(limit)s
), marked AS (
    SELECT queue, tenant, true AS marked FROM tierq_queue_tenants
    WHERE cold_mode_since IS NOT NULL AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
    ORDER BY queue, tenant LIMIT %(limit)s
)
SELECT queue, tenant, bool_or(marked) AS marked
FROM (SELECT * FROM cold UNION ALL SELECT * FROM marked) AS both_walks
GROUP BY queue, tenant
ORDER BY queue, tenant
LIMIT %(limit)s;

-- name: walk_finished_queues
-- The retention purge's walk: queues with done, dead or cancelled rows, after the cursor.
WITH RECURSIVE done_walk AS (
    SELECT (SELECT queue FROM tierq_tasks
            WHERE state = 'done' AND queue > %(after_queue)s ORDER BY queue LIMIT 1) AS queue
    UNION ALL
    SELECT (SELECT t.queue FROM tierq_tasks t
            WHERE t.state = 'done' AND t.queue > d.queue ORDER BY t.queue LIMIT 1)
    FROM done_walk d WHERE d.queue IS NOT NULL
), dead_walk AS (
    SELECT (SELECT queue FROM tierq_tasks
            WHERE state = 'dead' AND queue > %(after_queue)s ORDER BY queue LIMIT 1) AS queue
    UNION ALL
    SELECT (SELECT t.queue FROM tierq_tasks t
            WHERE t.state = 'dead' AND t.queue > d.queue ORDER BY t.queue LIMIT 1)
    FROM dead_walk d WHERE d.queue IS NOT NULL
), cancelled_walk AS (
    SELECT (SELECT queue FROM tierq_tasks
            WHERE state = 'cancelled' AND queue > %(after_queue)s ORDER BY queue LIMIT 1)
           AS queue
    UNION ALL
    SELECT (SELECT t.queue FROM tierq_tasks t
            WHERE t.state = 'cancelled' AND t.queue > d.queue ORDER BY t.queue LIMIT 1)
    FROM cancelled_walk d WHERE d.queue IS NOT NULL
)
SELECT queue FROM (
    (SELECT queue FROM done_walk WHERE queue IS NOT NULL LIMIT %(limit)s)
    UNION
    (SELECT queue FROM dead_walk WHERE queue IS NOT NULL LIMIT %(limit)s)
    UNION
    (SELECT queue FROM cancelled_walk WHERE queue IS NOT NULL LIMIT %(limit)s)
) AS q
ORDER BY queue
LIMIT %(limit)s;

-- name: purge_done_before
-- Retention of acked tasks kept with a result, one queue, bounded (tierq_tasks_done_since).
DELETE FROM tierq_tasks
WHERE id = ANY(ARRAY(
    SELECT id FROM tierq_tasks
    WHERE queue = %(queue)s AND state = 'done' AND finished_at < %(before)s
    LIMIT %(limit)s))
  AND (state = 'done') IS TRUE AND waiters = 0;  -- (its children read its result)

-- name: purge_cancelled_before
-- Retention of cancelled tasks, one queue, bounded (tierq_tasks_cancelled_since).
DELETE FROM tierq_tasks
WHERE id = ANY(ARRAY(
    SELECT id FROM tierq_tasks
    WHERE queue = %(queue)s AND state = 'cancelled' AND finished_at < %(before)s
    LIMIT %(limit)s))
  AND (state = 'cancelled') IS TRUE AND waiters = 0;  -- (its children read its state)

-- name: purge_dead_before
-- Retention of dead letters, one queue, bounded (tierq_tasks_dead_line).
DELETE FROM tierq_tasks
WHERE id = ANY(ARRAY(
    SELECT id FROM tierq_tasks
    WHERE queue = %(queue)s AND state = 'dead' AND finished_at < %(before)s
    LIMIT %(limit)s))
  AND (state = 'dead') IS TRUE;

-- name: maintenance_cursors
SELECT walk, queue, tenant FROM tierq_maintenance_cursors;

-- name: save_maintenance_cursor
INSERT INTO tierq_maintenance_cursors (walk, queue, tenant, updated_at)
VALUES (%(walk)s, %(queue)s, %(tenant)s, now())
ON CONFLICT (walk) DO UPDATE
SET queue = EXCLUDED.queue, tenant = EXCLUDED.tenant, updated_at = EXCLUDED.updated_at;

-- name: refresh_pairs
-- A process that uses known pairs registers them again now and then: last_seen stays
-- recent while a pair is in use, so it is never forgotten under a process that remembers
-- it. Returns the tenants that were registered (the others are new, or were forgotten).
UPDATE tierq_queue_tenants SET last_seen = %(now)s
WHERE queue = %(queue)s AND tenant = ANY(%(tenants)s::text[])
RETURNING tenant;

-- name: lock_tenant_quota
-- Taken before adding pairs: two new queues of one tenant at once cannot both pass the cap.
-- Tenants in order, so that two registrations never wait on each other crosswise.
SELECT count(pg_advisory_xact_lock(hashtextextended(t, 8)))
FROM (SELECT DISTINCT t FROM unnest(%(tenants)s::text[]) AS t ORDER BY t) AS sorted;

-- name: insert_pairs_within_quota
-- New pairs, each only while its tenant has fewer than `cap` queues (cap 0: no cap); a pair
-- registered meanwhile by another process is refreshed. Runs after lock_tenant_quota, in
-- its transaction (a statement of its own: it sees the pairs other holders of the lock
-- added). Returns the tenants registered; the missing ones are over the cap.
INSERT INTO tierq_queue_tenants AS p (queue, tenant, created_at, last_seen)
SELECT %(queue)s, w.tenant, %(now)s, %(now)s
FROM unnest(%(tenants)s::text[]) AS w(tenant)
WHERE %(cap)s <= 0
   OR EXISTS (SELECT 1 FROM tierq_queue_tenants e
              WHERE e.queue = %(queue)s AND e.tenant = w.tenant)
   OR (SELECT count(*) FROM tierq_queue_tenants c WHERE c.tenant = w.tenant) < %(cap)s
ON CONFLICT (queue, tenant) DO UPDATE SET last_seen = EXCLUDED.last_seen
RETURNING p.tenant;

-- name: touch_pairs
-- Pairs maintenance found busy: seen now (written at most once per `stale` interval). A row
-- another transaction holds (a registration refreshing it, a move) is passed over, never
-- waited for: its holder is at work on the pair, and the next pass touches it.
WITH picked AS MATERIALIZED (
    SELECT p.queue, p.tenant FROM tierq_queue_tenants p
    JOIN unnest(%(queues)s::text[], %(tenants)s::text[]) AS v(queue, tenant)
      ON p.queue = v.queue AND p.tenant = v.tenant
    WHERE p.last_seen < %(stale)s
    ORDER BY p.queue, p.tenant
    FOR UPDATE OF p SKIP LOCKED
)
UPDATE tierq_queue_tenants p SET last_seen = %(now)s
FROM picked
WHERE p.queue = picked.queue AND p.tenant = picked.tenant;

-- name: mark_cold_mode
-- Pairs the mover left in cold mode (`cold`), or found warm again (not `cold`).
UPDATE tierq_queue_tenants p
SET cold_mode_since = CASE WHEN v.cold THEN COALESCE(p.cold_mode_since, %(now)s) END
FROM unnest(%(queues)s::text[], %(tenants)s::text[], %(cold)s::bool[]) AS v(queue, tenant, cold)
WHERE p.queue = v.queue AND p.tenant = v.tenant
  AND (p.cold_mode_since IS NOT NULL) IS DISTINCT FROM v.cold;

-- name: mark_cold_mode_unless_held
-- The mover's record of the pairs it left in cold mode (`cold`) or found warm again (not
-- `cold`). A row another transaction holds (a registration refreshing it, a move) is passed
-- over, never waited for: one held row would otherwise end the pass at the lock timeout,
-- before its walk saved its cursor, and so every pass at the same slice. Returns the pairs
-- passed over, whose record still differs (the next visit writes it).
WITH wanted AS MATERIALIZED (
    SELECT p.queue, p.tenant, v.cold FROM tierq_queue_tenants p
    JOIN unnest(%(queues)s::text[], %(tenants)s::text[], %(cold)s::bool[])
      AS v(queue, tenant, cold) ON p.queue = v.queue AND p.tenant = v.tenant
    WHERE (p.cold_mode_since IS NOT NULL) IS DISTINCT FROM v.cold
), picked AS MATERIALIZED (
    SELECT p.queue, p.tenant FROM tierq_queue_tenants p
    JOIN wanted w ON p.queue = w.queue AND p.tenant = w.tenant
    ORDER BY p.queue, p.tenant
    FOR UPDATE OF p SKIP LOCKED
), marked AS (
    UPDATE tierq_queue_tenants p
    SET cold_mode_since = CASE WHEN w.cold THEN COALESCE(p.cold_mode_since, %(now)s) END
    FROM picked JOIN wanted w ON w.queue = picked.queue AND w.tenant = picked.tenant
    WHERE p.queue = picked.queue AND p.tenant = picked.tenant
      AND (p.cold_mode_since IS NOT NULL) IS DISTINCT FROM w.cold
)
SELECT w.queue, w.tenant FROM wanted w
WHERE NOT EXISTS (SELECT 1 FROM picked k WHERE k.queue = w.queue AND k.tenant = w.tenant)
ORDER BY w.queue, w.tenant;

-- name: forget_idle_pairs
-- One slice of the registry after the cursor: pairs not seen since `before`, without any
-- row left (tasks in any state, schedules, feeder offsets of a feed named after the queue;
-- an installed occurrence is a task) and not being moved to another shard are deleted.
-- Returns the pairs forgotten, then the slice's last pair (the next cursor) with the
-- number of pairs the slice read. Only the slice's idle pairs are
-- checked for rows, one index probe per state and pair (OFFSET 0 keeps each NOT EXISTS a
-- correlated probe: as an anti join it could read a whole partial index), then locked and
-- deleted by primary key. A row another transaction holds (a registration racing with this,
-- a move) is passed over, never waited for: one held row would otherwise cost the whole
-- slice at the lock timeout, and the pass's later parts with it; it is looked at again when
-- the walk comes round. The lock re-checks last_seen on the row's latest version, so a pair
-- registered again meanwhile is kept (as is one re-created after this commits).
WITH slice AS MATERIALIZED (
    SELECT queue, tenant, last_seen FROM tierq_queue_tenants
    WHERE (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
    ORDER BY queue, tenant
    LIMIT %(limit)s
), idle AS MATERIALIZED (
    SELECT s.queue, s.tenant FROM slice s
    WHERE s.last_seen < %(before)s
      AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.state = 'warm'
                      AND t.queue = s.queue AND t.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_batch_pairs b
                      WHERE b.queue = s.queue AND b.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.state = 'cold'
                      AND t.queue = s.queue AND t.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.state = 'delayed'
                      AND t.queue = s.queue AND t.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.state = 'dead'
                      AND t.queue = s.queue AND t.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.state = 'done'
                      AND t.queue = s.queue AND t.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.state = 'cancelled'
                      AND t.queue = s.queue AND t.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_schedules c
                      WHERE c.queue = s.queue AND c.tenant = s.tenant OFFSET 0)
      AND NOT EXISTS (SELECT 1 FROM tierq_feeder_offsets f WHERE f.feed = s.queue OFFSET 0)
      -- a pair being moved to another shard keeps its home records until the move ends
      AND NOT EXISTS (SELECT 1 FROM tierq_pair_homes h WHERE h.queue = s.queue
                      AND h.tenant = s.tenant AND h.moving_to IS NOT NULL OFFSET 0)
), locked AS MATERIALIZED (
    SELECT p.queue, p.tenant FROM tierq_queue_tenants p
    WHERE (p.queue, p.tenant) IN (SELECT queue, tenant FROM idle)
      AND p.last_seen < %(before)s
    ORDER BY p.queue, p.tenant
    FOR UPDATE OF p SKIP LOCKED
), gone AS (
    DELETE FROM tierq_queue_tenants p
    USING locked l
    WHERE p.queue = l.queue AND p.tenant = l.tenant
    RETURNING p.queue, p.tenant
), homes_gone AS (
    -- a sharded deployment's record that this shard is the pair's home goes with it (an
    -- enqueue racing with this re-records it in its own transaction; the other shards'
    -- copies are dropped after: tierq.logic.homes.forget_elsewhere)
    DELETE FROM tierq_pair_homes h
    USING gone g
    WHERE h.queue = g.queue AND h.tenant = g.tenant
      AND h.shard = (SELECT i.name FROM tierq_shard_identity i)
)
SELECT queue, tenant, true AS forgotten, NULL::bigint AS slice_rows FROM gone
UNION ALL
SELECT * FROM (SELECT queue, tenant, false, (SELECT count(*) FROM slice)
               FROM slice ORDER BY queue DESC, tenant DESC LIMIT 1) AS last_of_slice;

-- ------------------------------------------------------------------- idempotent claims

-- name: claimed_tasks_by_ids
-- What a replayed claim (logic/claim_replay.py) rebuilds its tasks from: the fields of a
-- claimed task that PostgreSQL keeps (the lease's own fields come from the key's record and
-- the leased set). The payload as JSON text, as the claim's blobs carry it. By primary key
-- (see mark_cold); each row only when it is the tenant the key's record gives with its id.
SELECT t.id::text AS id, t.tenant, t.key, t.priority, t.payload::text AS payload,
       t.max_attempts, t.state, t.parents::text AS parents, t.grp, t.timeout_seconds, t.trace
FROM tierq_tasks t
JOIN unnest(%(ids)s::uuid[], %(tenants)s::text[]) AS v(id, tenant)
  ON t.id = v.id AND t.tenant = v.tenant
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.queue = %(queue)s
UNION ALL
-- (members still in their batch rows, as task_by_id reads them: the marked ids among
-- them, each with its batch and place)
SELECT v.id::text, tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place), NULL,
       b.priorities[v.place + 1],
       (b.payloads -> v.place)::text, b.max_attempts, 'warm', NULL, NULL, b.timeout_seconds,
       NULL
FROM unnest(%(member_ids)s::uuid[], %(batches)s::uuid[], %(places)s::int[],
            %(member_tenants)s::text[]) AS v(id, batch, place, tenant)
JOIN tierq_batches b ON b.id = v.batch
WHERE b.queue = %(queue)s AND v.place < b.tasks
  AND tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
  AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                  WHERE e.batch = v.batch AND v.place = ANY(e.places));

-- ============================================================================================
-- Queue gauges of the reaper (maintenance/gauges.py): the pairs that have rows in a counted
-- state (warm, which holds the leased ones too; cold; delayed; dead), by the same skip scans
-- as the walks above, one per partial index: the cost follows the pairs with such rows,
-- never the pairs ever seen (the registry is not read).
-- ============================================================================================

-- name: walk_gauge_pairs
-- Pairs with warm, cold, delayed or dead rows or batch rows, in (queue, tenant) order after
-- the cursor.
WITH RECURSIVE warm_walk AS (
    (SELECT queue, tenant FROM tierq_tasks
     WHERE state = 'warm' AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM warm_walk w, LATERAL (
        SELECT t.queue, t.tenant FROM tierq_tasks t
        WHERE t.state = 'warm' AND (t.queue, t.tenant) > (w.queue, w.tenant)
        ORDER BY t.queue, t.tenant LIMIT 1) AS step
), cold_walk AS (
    (SELECT queue, tenant FROM tierq_tasks
     WHERE state = 'cold' AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM cold_walk w, LATERAL (
        SELECT t.queue, t.tenant FROM tierq_tasks t
        WHERE t.state = 'cold' AND (t.queue, t.tenant) > (w.queue, w.tenant)
        ORDER BY t.queue, t.tenant LIMIT 1) AS step
), delayed_walk AS (
    (SELECT queue, tenant FROM tierq_tasks
     WHERE state = 'delayed' AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM delayed_walk w, LATERAL (
        SELECT t.queue, t.tenant FROM tierq_tasks t
        WHERE t.state = 'delayed' AND (t.queue, t.tenant) > (w.queue, w.tenant)
        ORDER BY t.queue, t.tenant LIMIT 1) AS step
), dead_walk AS (
    (SELECT queue, tenant FROM tierq_tasks
     WHERE state = 'dead' AND (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM dead_walk w, LATERAL (
        SELECT t.queue, t.tenant FROM tierq_tasks t
        WHERE t.state = 'dead' AND (t.queue, t.tenant) > (w.queue, w.tenant)
        ORDER BY t.queue, t.tenant LIMIT 1) AS step
), batch_walk AS (  -- (batch rows' pairs, migration 0030: warm members)
    (SELECT queue, tenant FROM tierq_batch_pairs
     WHERE (queue, tenant) > (%(after_queue)s, %(after_tenant)s)
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant
    FROM batch_walk w, LATERAL (
        SELECT p.queue, p.tenant FROM tierq_batch_pairs p
        WHERE (p.queue, p.tenant) > (w.queue, w.tenant)
        ORDER BY p.queue, p.tenant LIMIT 1) AS step
)
SELECT queue, tenant FROM (
    (SELECT queue, tenant FROM warm_walk LIMIT %(limit)s)
    UNION
    (SELECT queue, tenant FROM batch_walk LIMIT %(limit)s)
    UNION
    (SELECT queue, tenant FROM cold_walk LIMIT %(limit)s)
    UNION
    (SELECT queue, tenant FROM delayed_walk LIMIT %(limit)s)
    UNION
    (SELECT queue, tenant FROM dead_walk LIMIT %(limit)s)
) AS with_rows
ORDER BY queue, tenant
LIMIT %(limit)s;

-- name: task_seq_position
-- How far tierq_task_seq has come: its last value (0 before the first) and its maximum
-- (migration 0015), for the gauge round's TaskSeqUsedPercent. pg_sequences shows the last
-- value to a role with USAGE on the sequence (the application's group has it).
SELECT COALESCE(last_value, 0) AS last_value, max_value
FROM pg_sequences
WHERE schemaname = current_schema() AND sequencename = 'tierq_task_seq';

-- == The delayed mover: each batch shared among the pairs with rows due ====================

-- name: pairs_come_due
-- The pairs with a delayed row due after (after_run_at, after_seq) and up to now, among
-- at most `rows` such rows in due order: the delayed mover's pass looks at the rows due in
-- slices of that many, each batch one slice further until it has seen every row due, then
-- at the rows come due since its last look. A range of tierq_tasks_delayed_due, so a look
-- costs at most `rows` entries, whatever the flood due, and never a row not due yet. Each
-- pair comes with the slice's last row and its size (fewer than `rows`: the slice reached
-- the rows due now); no row: nothing due.
WITH due AS MATERIALIZED (
    SELECT t.queue, t.tenant, t.run_at, t.seq
    FROM tierq_tasks t
    WHERE t.state = 'delayed' AND (t.run_at, t.seq) > (%(after_run_at)s, %(after_seq)s)
      AND t.run_at <= %(now)s
    ORDER BY t.run_at, t.seq
    LIMIT %(rows)s
), last AS (
    SELECT d.run_at, d.seq, (SELECT count(*) FROM due) AS looked
    FROM due d ORDER BY d.run_at DESC, d.seq DESC LIMIT 1
)
SELECT p.queue, p.tenant, last.run_at, last.seq, last.looked
FROM (SELECT DISTINCT queue, tenant FROM due) p CROSS JOIN last;

-- name: lock_due_of_pairs
-- Each pair's share of a delayed mover's batch (limits, at least 1 each) from the front of
-- its line: its due rows oldest due first, then seq, after (after_run_ats, after_seqs), the
-- last row the batch took of it (NULL: none yet), locked, skipping locked rows. One descent
-- of tierq_tasks_delayed_line per pair, then its share: neither the pair's rows not due nor
-- another pair's rows are read, so a pair the pass leaves out costs it nothing. With each
-- row the bytes its payload and parents are stored in (pg_column_size: read from the
-- value's header, nothing detoasted or serialized), so the mover bounds a batch's bytes,
-- not only its rows; a compressed value counts what it stores, so for compressible
-- payloads this bounds the stored bytes, not the memory.
SELECT d.id, p.queue, p.tenant, d.run_at, d.seq, d.size
FROM unnest(%(queues)s::text[], %(tenants)s::text[], %(limits)s::int[],
            %(after_run_ats)s::timestamptz[], %(after_seqs)s::bigint[])
     AS p(queue, tenant, lim, after_run_at, after_seq),
     LATERAL (
         SELECT t.id, t.run_at, t.seq,
                pg_column_size(t.payload) + COALESCE(pg_column_size(t.parents), 0) AS size
         FROM tierq_tasks t
         WHERE t.state = 'delayed' AND t.queue = p.queue AND t.tenant = p.tenant
           AND t.run_at <= %(now)s
           AND (t.run_at, t.seq) > (COALESCE(p.after_run_at, '-infinity'::timestamptz),
                                    COALESCE(p.after_seq, -9223372036854775808))
         ORDER BY t.run_at, t.seq
         LIMIT p.lim
         FOR UPDATE OF t SKIP LOCKED) AS d;


-- ============================================================================================
-- The statements above that run as functions (migration 0029) where nothing is prepared
-- (behind RDS Proxy): StoreBase runs `routine_<name>` in place of `<name>` there, once it has
-- found the function the call names. Each call returns the columns of its statement; a
-- change to a statement makes the next version of its function (migration 0029's header).
-- ============================================================================================

-- name: routines_found
-- Which of the functions named the login can call, found by the search_path its statements
-- use (StoreBase._find_routines).
SELECT f FROM unnest(%(functions)s::text[]) AS f
WHERE to_regproc(f) IS NOT NULL AND has_function_privilege(to_regproc(f)::oid, 'EXECUTE');

-- name: routine_insert_tasks_uniform
SELECT min, count
FROM tierq_insert_tasks_uniform_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::jsonb,
    p_priorities => %(priorities)s::smallint[],
    p_payloads => %(payloads)s::jsonb,
    p_state => %(state)s::text,
    p_run_at => %(run_at)s::double precision,
    p_max_attempts => %(max_attempts)s::integer,
    p_timeout => %(timeout)s::integer);

-- name: routine_insert_tasks_keyless
SELECT min, count
FROM tierq_insert_tasks_keyless_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::jsonb,
    p_priorities => %(priorities)s::smallint[],
    p_payloads => %(payloads)s::jsonb,
    p_states => %(states)s::text[],
    p_run_ats => %(run_ats)s::double precision[],
    p_max_attempts => %(max_attempts)s::integer[],
    p_grps => %(grps)s::jsonb,
    p_timeouts => %(timeouts)s::integer[],
    p_traces => %(traces)s::jsonb);

-- name: routine_ack_delete
SELECT id, grp
FROM tierq_ack_delete_v1(
    p_ids => %(ids)s::uuid[],
    p_queue => %(queue)s::text,
    p_tenant_set => %(tenant_set)s::text[],
    p_attempt => %(attempt)s::integer);

-- name: routine_ack_delete_by_attempt
SELECT id, grp
FROM tierq_ack_delete_by_attempt_v1(
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::text[],
    p_attempts => %(attempts)s::integer[],
    p_queue => %(queue)s::text);

-- name: routine_insert_tasks
SELECT id, seq
FROM tierq_insert_tasks_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::jsonb,
    p_keys => %(keys)s::jsonb,
    p_priorities => %(priorities)s::smallint[],
    p_payloads => %(payloads)s::jsonb,
    p_states => %(states)s::text[],
    p_run_ats => %(run_ats)s::double precision[],
    p_max_attempts => %(max_attempts)s::integer[],
    p_grps => %(grps)s::jsonb,
    p_timeouts => %(timeouts)s::integer[],
    p_traces => %(traces)s::jsonb);

-- name: routine_insert_tasks_uniform_keyed
SELECT id, seq
FROM tierq_insert_tasks_uniform_keyed_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::jsonb,
    p_keys => %(keys)s::jsonb,
    p_priorities => %(priorities)s::smallint[],
    p_payloads => %(payloads)s::jsonb,
    p_state => %(state)s::text,
    p_run_at => %(run_at)s::double precision,
    p_max_attempts => %(max_attempts)s::integer,
    p_timeout => %(timeout)s::integer);

-- name: routine_ack_keep
SELECT id, grp
FROM tierq_ack_keep_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::text[],
    p_results => %(results)s::jsonb[],
    p_attempts => %(attempts)s::integer[]);

-- name: routine_lease_outcomes
SELECT id, tenant, state, run_at, grp
FROM tierq_lease_outcomes_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::text[],
    p_attempts => %(attempts)s::integer[],
    p_errors => %(errors)s::text[],
    p_retry_ats => %(retry_ats)s::timestamp with time zone[],
    p_deads => %(deads)s::boolean[],
    p_waited => %(waited)s::boolean);

-- name: routine_release_leased
SELECT id, queue, tenant, key, state, seq, priority, payload, attempts, max_attempts,
       created_at, parents, grp, timeout_seconds, trace
FROM tierq_release_leased_v1(
    p_queue => %(queue)s::text,
    p_now => %(now)s::timestamp with time zone,
    p_ids => %(ids)s::uuid[],
    p_tenants => %(tenants)s::text[],
    p_attempts => %(attempts)s::integer[]);
