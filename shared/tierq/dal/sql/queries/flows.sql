-- Flows: tasks that wait for other tasks (migration 0018, logic/flows.py). A waiting task has
-- one tierq_task_waits row (its count of parents not finished) and one tierq_task_edges row
-- per parent; each parent counts its edges in tierq_tasks.waiters.
--
-- Every row is found by its key through `= ANY(ARRAY(SELECT ...))` (see mark_cold in
-- engine.sql): a join with a CTE's rows, whose count the planner cannot know, on tables
-- never analyzed was planned as a scan of the table per row (a release of 2,000 children
-- passed the statement timeout; by key it is linear).

-- name: hold_parents
-- The parents a batch of waiting tasks names, counted and locked: each parent's waiters
-- grows by the edges it gains. Only a task of the tenant given is found (another tenant's id
-- reads as unknown). The rows are locked in id order first, so two enqueues naming the same
-- parents never deadlock; an ack that meets a row locked here waits, then re-reads it and
-- sees its waiters (its `waiters = 0` test fails, so it keeps the row: ack_keep_waited).
WITH wanted AS (
    SELECT v.parent, v.tenant, count(*)::int AS n
    FROM unnest(%(parents)s::uuid[], %(tenants)s::text[]) AS v(parent, tenant)
    GROUP BY v.parent, v.tenant
), locked AS (
    -- only the rows of the tenant that names them: another tenant's row is neither locked
    -- nor waited for (no delay to it, no timing of its existence)
    SELECT t.id FROM tierq_tasks t JOIN wanted w ON w.parent = t.id AND w.tenant = t.tenant
    ORDER BY t.id
    FOR UPDATE OF t
)
UPDATE tierq_tasks t
SET waiters = t.waiters + w.n
FROM wanted w
WHERE t.id = ANY(ARRAY(SELECT id FROM locked)) AND t.id = w.parent AND t.tenant = w.tenant
RETURNING t.id, t.tenant, t.queue, t.state, t.waiters;

-- name: insert_edges
-- The edges of new waiting tasks (parent_state set for a parent finished already).
INSERT INTO tierq_task_edges (parent, child, parent_queue, position, parent_state)
SELECT * FROM unnest(%(parents)s::uuid[], %(children)s::uuid[], %(queues)s::text[],
                     %(positions)s::smallint[], %(states)s::text[]);

-- name: insert_waits
-- The count of each new waiting task's parents not finished yet, and its rules.
INSERT INTO tierq_task_waits (child, pending, on_parent_failure, wait_until, failed_parent)
SELECT * FROM unnest(%(children)s::uuid[], %(pending)s::int[], %(on_failure)s::text[],
                     %(wait_untils)s::timestamptz[], %(failed)s::uuid[]);

-- name: settle_parents
-- Parents just finished (done, dead or cancelled), in the transaction that finished them:
-- at most %(limit)s of their unsettled edges are settled, and each child's count goes down
-- by its edges settled here. The edges are locked (one settlement each: a locked edge is
-- re-read, and one settled meanwhile is skipped), then the children's count rows in child
-- order (no deadlock between two settlements), and each decrement applies to the row's
-- latest version (a row locked reads as it): of concurrent settlements of one child,
-- exactly one brings it to 0. A child freed here (count 0, and no failed parent that
-- dead-letters it) keeps its edges and count row as they were: release_waiting, next in
-- this transaction, deletes them and reads the states of the parents settled here from its
-- own arguments, so no row is written and then deleted. The others' edges get the parent's
-- final state and their count rows the decrement.
-- Returns each child touched: its count left, its rule, its failed parent (one before, or
-- else the first settled here), that parent's state only when it failed here (NULL when a
-- parent failed before: the child was dead-lettered or counted it then), so a message
-- names a parent with its own state, and how many edges were settled for it.
WITH v AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(states)s::text[]) AS v(id, state)
), picked AS MATERIALIZED (  -- (any of them: the count rows are what is locked in order)
    SELECT e.parent, e.child, e.position FROM tierq_task_edges e
    WHERE e.parent = ANY(%(ids)s::uuid[]) AND e.parent_state IS NULL
    LIMIT %(limit)s
    FOR UPDATE
), counts AS (
    SELECT p.child, count(*)::int AS n,
           (array_agg(p.parent ORDER BY p.position) FILTER (WHERE v.state <> 'done'))[1]
               AS failed,
           (array_agg(v.state ORDER BY p.position) FILTER (WHERE v.state <> 'done'))[1]
               AS failed_state
    FROM picked p JOIN v ON v.id = p.parent
    GROUP BY p.child
), locked AS (  -- (a row locked here reads as its latest version)
    SELECT w.child, w.pending, w.on_parent_failure, w.failed_parent AS failed_before
    FROM tierq_task_waits w
    WHERE w.child = ANY(ARRAY(SELECT child FROM counts))
    ORDER BY w.child
    FOR UPDATE
), counted AS MATERIALIZED (
    SELECT l.child, l.pending - c.n AS pending, l.on_parent_failure,
           COALESCE(l.failed_before, c.failed) AS failed_parent,
           CASE WHEN l.failed_before IS NULL THEN c.failed_state END AS failed_state,
           c.n AS settled,
           l.pending = c.n AND (COALESCE(l.failed_before, c.failed) IS NULL
                                OR l.on_parent_failure = 'run') AS freed
    FROM locked l JOIN counts c ON c.child = l.child
), counted_down AS (  -- (a freed child's count row is deleted by its release instead)
    UPDATE tierq_task_waits w
    SET pending = n.pending, failed_parent = n.failed_parent
    FROM counted n
    WHERE w.child = ANY(ARRAY(SELECT child FROM counted WHERE NOT freed))
      AND w.child = n.child
    RETURNING w.child
), marked AS (
    UPDATE tierq_task_edges e SET parent_state = v.state
    FROM v
    WHERE e.child = ANY(ARRAY(SELECT child FROM counted WHERE NOT freed))
      AND e.parent = v.id
      AND (e.parent, e.child) IN (SELECT parent, child FROM picked)
    RETURNING e.child
)
SELECT c.child, c.pending, c.on_parent_failure, c.failed_parent, c.failed_state, c.settled
FROM counted c;

-- name: release_waiting
-- Waiting tasks leave the wait, each by its outcome: 'ready' (every parent finished, or
-- on_parent_failure = run: delayed until its run_at, at once when it has passed, with
-- `parents` set for its claims: each parent's id, queue, final state and result, the
-- results left out when together they pass %(max_result_bytes)s), 'dead' (a parent failed:
-- dead-lettered naming it; its edges stay, so that replaying the parent re-arms it) or
-- 'timeout' (waited_too_long). Only rows still waiting change: a task is released once.
-- The edges of released and timed-out tasks go, each parent's waiters with them (locked
-- in id order), and so do their count rows (every data-modifying part of a WITH runs to
-- its end, read or not). %(settled)s maps each parent settle_parents settled just before
-- in this transaction to its final state. The edges of the children it freed carry none
-- (they are deleted here), so a `parents` entry reads its state there, and a freed child
-- not released here (its row deleted meanwhile) gets its edges' states written instead.
WITH v AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(outcomes)s::text[], %(errors)s::text[])
        AS v(child, outcome, error)
), settled AS (
    SELECT %(settled)s::jsonb AS states
), moved AS (
    UPDATE tierq_tasks t
    SET state = CASE WHEN v.outcome = 'ready' THEN 'delayed' ELSE 'dead' END,
        run_at = CASE WHEN v.outcome = 'ready' THEN GREATEST(t.run_at, %(now)s::timestamptz)
                      ELSE t.run_at END,
        finished_at = CASE WHEN v.outcome = 'ready' THEN NULL ELSE %(now)s::timestamptz END,
        last_error = CASE WHEN v.outcome = 'ready' THEN t.last_error ELSE v.error END,
        -- the task's own edges, by tierq_task_edges_child (a correlated subquery: a join
        -- with an aggregate of every released task's edges was planned as one per row)
        parents = CASE WHEN v.outcome <> 'ready' THEN NULL ELSE (
            SELECT CASE WHEN COALESCE(sum(octet_length(p.result::text)), 0)
                             > %(max_result_bytes)s
                        THEN jsonb_agg(jsonb_build_object(
                                 'id', e.parent, 'queue', e.parent_queue,
                                 'state', COALESCE(e.parent_state,
                                                   s.states ->> e.parent::text),
                                 'result', NULL) ORDER BY e.position)
                        ELSE jsonb_agg(jsonb_build_object(
                                 'id', e.parent, 'queue', e.parent_queue,
                                 'state', COALESCE(e.parent_state,
                                                   s.states ->> e.parent::text),
                                 'result', p.result) ORDER BY e.position) END
            FROM tierq_task_edges e LEFT JOIN tierq_tasks p ON p.id = e.parent
            WHERE e.child = t.id) END,
        state_since = %(now)s
    FROM v, settled s
    WHERE t.id = ANY(ARRAY(SELECT child FROM v)) AND t.id = v.child
      AND (t.state = 'waiting') IS TRUE
    RETURNING t.id, t.queue, t.tenant, t.state, t.run_at, v.outcome
), unreleased AS (
    UPDATE tierq_task_edges e SET parent_state = s.states ->> e.parent::text
    FROM settled s
    WHERE e.child = ANY(ARRAY(SELECT child FROM v WHERE outcome = 'ready'
                              EXCEPT SELECT id FROM moved))
      AND e.parent_state IS NULL AND s.states ? e.parent::text
    RETURNING e.child
), gone_edges AS (
    DELETE FROM tierq_task_edges e
    WHERE e.child = ANY(ARRAY(SELECT id FROM moved WHERE outcome <> 'dead'))
    RETURNING e.parent
), parent_counts AS (
    SELECT parent, count(*)::int AS n FROM gone_edges GROUP BY parent
), parents_locked AS (
    SELECT t.id FROM tierq_tasks t
    WHERE t.id = ANY(ARRAY(SELECT parent FROM parent_counts))
    ORDER BY t.id
    FOR UPDATE OF t
), parents_down AS (
    UPDATE tierq_tasks t SET waiters = GREATEST(t.waiters - c.n, 0)
    FROM parent_counts c
    WHERE t.id = ANY(ARRAY(SELECT id FROM parents_locked)) AND t.id = c.parent
    RETURNING t.id
), gone_waits AS (
    DELETE FROM tierq_task_waits w
    WHERE w.child = ANY(ARRAY(SELECT id FROM moved WHERE outcome <> 'dead'))
    RETURNING w.child
)
SELECT m.id, m.queue, m.tenant, m.state, m.run_at, m.outcome FROM moved m;

-- name: forget_waits
-- Tasks whose wait ends without a release (cancelled, or replayed from the dead letters
-- after a parent failed): their edges and count rows go, and each parent's waiters with
-- them (locked in id order).
WITH gone_edges AS (
    DELETE FROM tierq_task_edges e
    WHERE e.child = ANY(%(ids)s::uuid[])
    RETURNING e.parent
), parent_counts AS (
    SELECT parent, count(*)::int AS n FROM gone_edges GROUP BY parent
), parents_locked AS (
    SELECT t.id FROM tierq_tasks t
    WHERE t.id = ANY(ARRAY(SELECT parent FROM parent_counts))
    ORDER BY t.id
    FOR UPDATE OF t
), parents_down AS (
    UPDATE tierq_tasks t SET waiters = GREATEST(t.waiters - c.n, 0)
    FROM parent_counts c
    WHERE t.id = ANY(ARRAY(SELECT id FROM parents_locked)) AND t.id = c.parent
    RETURNING t.id
)
DELETE FROM tierq_task_waits w
WHERE w.child = ANY(%(ids)s::uuid[])
RETURNING w.child;

-- name: rearm_children
-- Parents replayed from the dead letters, or re-armed (logic/flows.py, on_replay, calls it
-- level by level down the graph): the edges they failed are unsettled again, each child's
-- count goes up by them, and a child that was dead-lettered for a failed parent waits again
-- unless another of its parents failed too (still dead, or cancelled). Returns the children
-- waiting again.
WITH reopened AS (
    UPDATE tierq_task_edges e SET parent_state = NULL
    WHERE e.parent = ANY(%(ids)s::uuid[]) AND e.parent_state = 'dead'
    RETURNING e.child
), counts AS (
    SELECT child, count(*)::int AS n FROM reopened GROUP BY child
), still_failed AS (
    SELECT DISTINCT ON (e.child) e.child, e.parent
    FROM tierq_task_edges e
    WHERE e.child = ANY(ARRAY(SELECT child FROM counts))
      AND e.parent_state IN ('dead', 'cancelled') AND NOT (e.parent = ANY(%(ids)s::uuid[]))
    ORDER BY e.child, e.position
), rearmed AS (
    UPDATE tierq_task_waits w
    SET pending = w.pending + c.n, failed_parent = f.parent
    FROM counts c LEFT JOIN still_failed f ON f.child = c.child
    WHERE w.child = ANY(ARRAY(SELECT child FROM counts)) AND w.child = c.child
    RETURNING w.child, w.failed_parent
)
UPDATE tierq_tasks t
SET state = 'waiting', last_error = NULL, finished_at = NULL, state_since = %(now)s
WHERE t.id = ANY(ARRAY(SELECT child FROM rearmed WHERE failed_parent IS NULL))
  AND (t.state = 'dead') IS TRUE
RETURNING t.id;

-- name: expired_waits
-- Waiting tasks past their wait_timeout_seconds, oldest deadline first (the partial index
-- tierq_task_waits_until), locked, skipping locked ones.
SELECT w.child
FROM tierq_task_waits w
WHERE w.wait_until <= %(now)s AND w.failed_parent IS NULL
ORDER BY w.wait_until
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: waits_of_tasks
-- What the tasks given wait for (their parents, in their `after` order, with each one's
-- state so far: NULL while not finished). Only of tasks of the queue and of the tenant given
-- (NULL: any tenant's): the edges hold neither, so each child's row is read by primary key.
SELECT e.child, e.parent, e.parent_queue, e.parent_state
FROM tierq_task_edges e
JOIN tierq_tasks t ON t.id = e.child
WHERE e.child = ANY(%(ids)s::uuid[]) AND t.queue = %(queue)s
  AND (%(tenant)s::text IS NULL OR t.tenant = %(tenant)s)
ORDER BY e.child, e.position;

-- name: ack_keep_waited
-- An ack of tasks that others wait on: kept done (with the result given, or none) so that
-- their children read it at release; the edges are settled by settle_parents in the same
-- transaction. By primary key (see ack_delete); not an attempt already recorded; only the
-- tenant given with each row (its lease's).
UPDATE tierq_tasks t
SET state = 'done', result = v.result, attempts = v.attempt, finished_at = %(now)s,
    state_since = %(now)s, ready_since = NULL
FROM unnest(%(ids)s::uuid[], %(tenants)s::text[], %(results)s::jsonb[], %(attempts)s::int[])
     AS v(id, tenant, result, attempt)
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.id = v.id
  AND t.queue = %(queue)s AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
RETURNING t.id::text;

-- name: task_parents
-- The parents a released task's claims hand out (JSON text), or NULL; nothing when the task
-- is not in the queue or not the tenant's given (NULL: any tenant's).
SELECT parents::text FROM tierq_tasks
WHERE id = %(id)s AND queue = %(queue)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s);

-- name: flow_plans
-- Scans by key for the flow statements that follow, until plans_back: the flow tables are
-- small and never analyzed on a new deployment, so the planner would join a CTE's rows
-- with a scan of the whole table repeated per row (a release of 1,500 children took 17 s);
-- every statement of this file reads its rows by an index, so seq scans are only a last
-- resort. Returns the setting before, which plans_back restores for the rest of the
-- caller's transaction (logic/flows.py, scans_by_key).
SELECT current_setting('enable_seqscan') AS before, set_config('enable_seqscan', 'off', true);

-- name: plans_back
-- The setting flow_plans found, back for the rest of the caller's transaction.
SELECT set_config('enable_seqscan', %(before)s, true);

-- name: unsettled_parents_of_queue
-- After a queue's tasks were purged: parents of that queue whose edges are not settled yet
-- (their rows are gone), to settle as cancelled. Reads every edge (no index by queue): a
-- purge is an admin's rare act.
SELECT DISTINCT e.parent
FROM tierq_task_edges e
WHERE e.parent_queue = %(queue)s AND e.parent_state IS NULL
  AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.id = e.parent)
LIMIT %(limit)s;

-- name: waits_of_deleted
-- Waits whose task is gone (a queue purged, dead letters past their retention): their
-- edges and count rows are dropped with forget_waits, so their parents' waiters come down
-- and those parents are deleted in turn. Reads the wait rows (few: only tasks waiting, or
-- dead-lettered while waiting, have one).
SELECT w.child
FROM tierq_task_waits w
WHERE NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.id = w.child)
LIMIT %(limit)s;

-- name: parents_of_waits
-- The reaper's forgetting of deleted tasks' waits: the parents each of these children has an
-- edge to, (child, parent), by tierq_task_edges_child.
SELECT e.child::text, e.parent::text FROM tierq_task_edges e
WHERE e.child = ANY(%(ids)s::uuid[]);

-- name: lock_free_parents
-- Of these parents, lock (in id order) those no other transaction holds, never waiting
-- (SKIP LOCKED: one parent held would otherwise cost every wait of the slice, of every
-- tenant); the ids locked. By primary key.
SELECT t.id::text FROM tierq_tasks t
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[])))
ORDER BY t.id
FOR UPDATE OF t SKIP LOCKED;

-- name: tasks_found
-- Which of these ids have a row (with lock_free_parents: the parents another transaction
-- holds). By primary key.
SELECT t.id::text FROM tierq_tasks t
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[])));
