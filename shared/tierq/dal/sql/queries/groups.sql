-- Groups: ordered work per key (migration 0019, logic/groups.py). A group's tasks past its
-- first group_max_leased are `held`; tierq_groups has a row per group with work, whose lock
-- orders an enqueue (or a replay) against a release: whoever holds it sees every task the
-- others committed before it was granted.

-- name: lock_groups
-- The groups named, locked in (tenant, name) order, by code point as Python sorts them
-- (two batches, or two slices of one, never wait on each other crosswise) and created when
-- missing; each one's count of active tasks as the lock finds
-- it. The no-op update takes the row lock and reads the row's latest version (ON CONFLICT
-- DO UPDATE does, whatever the statement's snapshot). A count may be too high for a moment
-- (a task finished, its release not yet run), never too low: enqueue holds what it cannot
-- be sure has room, and the release that follows lets it go.
INSERT INTO tierq_groups AS g (queue, tenant, grp)
SELECT %(queue)s, v.tenant, v.grp
FROM unnest(%(tenants)s::text[], %(grps)s::text[]) AS v(tenant, grp)
GROUP BY v.tenant, v.grp
ORDER BY v.tenant COLLATE "C", v.grp COLLATE "C"
ON CONFLICT (queue, tenant, grp) DO UPDATE SET active = g.active
RETURNING g.tenant, g.grp, g.active;

-- name: lock_groups_quietly
-- lock_groups for a release, which recounts: the same locks in the same order (rows created
-- when missing), but no new version of the rows found and no counts read. ON CONFLICT DO
-- UPDATE locks the conflicting row before its WHERE declines the update, and the lock is
-- held to the end of the transaction (as the no-op update's would be). Names come as JSON
-- arrays of strings, as release_group_heads' (cheaper to send than text[]).
INSERT INTO tierq_groups AS g (queue, tenant, grp)
SELECT %(queue)s, v.tenant, v.grp
FROM ROWS FROM (jsonb_array_elements_text(%(tenants)s::jsonb),
               jsonb_array_elements_text(%(grps)s::jsonb)) AS v(tenant, grp)
GROUP BY v.tenant, v.grp
ORDER BY v.tenant COLLATE "C", v.grp COLLATE "C"
ON CONFLICT (queue, tenant, grp) DO UPDATE SET active = g.active WHERE false;

-- name: count_group_tasks
-- Tasks an enqueue (or a replay) made active or held, counted on their groups (locked by
-- lock_groups in the same transaction).
UPDATE tierq_groups g
SET active = g.active + v.active, held = g.held + v.held,
    head_since = CASE WHEN v.active > 0 THEN %(now)s::timestamptz ELSE g.head_since END
FROM unnest(%(tenants)s::text[], %(grps)s::text[], %(active)s::int[], %(held)s::int[])
     AS v(tenant, grp, active, held)
WHERE g.queue = %(queue)s AND g.tenant = v.tenant AND g.grp = v.grp;

-- name: lock_free_groups
-- The reaper's sweep, before its release: of the groups named (JSON arrays of strings, as
-- lock_groups_quietly's), lock the rows no other transaction holds, in name order, never
-- waiting (SKIP LOCKED: a held row is an enqueue's or a release's at work on its group, and
-- waiting for one would cost every other group of the release). The groups locked.
SELECT g.tenant, g.grp FROM tierq_groups g
WHERE g.queue = %(queue)s
  AND (g.tenant, g.grp) IN (
      SELECT v.tenant, v.grp
      FROM ROWS FROM (jsonb_array_elements_text(%(tenants)s::jsonb),
                      jsonb_array_elements_text(%(grps)s::jsonb)) AS v(tenant, grp))
ORDER BY g.tenant COLLATE "C", g.grp COLLATE "C"
FOR UPDATE OF g SKIP LOCKED;

-- name: groups_found
-- Which of the groups named (JSON arrays of strings) have a row: with lock_free_groups, the
-- sweep's groups whose row another transaction holds.
SELECT g.tenant, g.grp FROM tierq_groups g
WHERE g.queue = %(queue)s
  AND (g.tenant, g.grp) IN (
      SELECT v.tenant, v.grp
      FROM ROWS FROM (jsonb_array_elements_text(%(tenants)s::jsonb),
                      jsonb_array_elements_text(%(grps)s::jsonb)) AS v(tenant, grp));

-- name: release_group_heads
-- After lock_groups or lock_groups_quietly, in its transaction (a statement of its own, so
-- that it sees every enqueue committed before the locks were granted; names as JSON arrays
-- of strings, states 'warm', 'cold' or 'delayed'): each group's active tasks are counted
-- (by tierq_tasks_group_active: at most group_max_leased entries), and its first held tasks
-- by seq are released up to %(max)s active. A released task whose run_at has come takes its
-- group's %(ready_states)s entry ('warm' or 'cold', from the caller's admission ticket) and
-- a new seq, in line order (the back of its pair's line, as admission.make_ready does);
-- one not yet due, or whose entry is 'delayed', is delayed until its run_at (the delayed
-- mover makes it ready). The group's row takes the counts found; a group left with nothing
-- active and nothing held goes (not one whose picked held task a concurrent cancel took:
-- see `gone`). Returns the tasks released, each with its warm blob (built
-- as promote_cold builds one; unused for those delayed).
WITH g AS MATERIALIZED (
    SELECT v.tenant, v.grp, v.ready_state,
           (SELECT count(*) FROM tierq_tasks a
            WHERE a.queue = %(queue)s AND a.tenant = v.tenant AND a.grp = v.grp
              AND a.state IN ('delayed', 'cold', 'warm'))::int AS active
    FROM (SELECT DISTINCT ON (tenant, grp) tenant, grp, ready_state
          FROM ROWS FROM (jsonb_array_elements_text(%(tenants)s::jsonb),
                          jsonb_array_elements_text(%(grps)s::jsonb),
                          jsonb_array_elements_text(%(ready_states)s::jsonb))
               AS u(tenant, grp, ready_state)
          ORDER BY tenant, grp) AS v
), numbered AS MATERIALIZED (  -- the tasks to release, counted from 0 in line order
    SELECT h.id, g.tenant, g.grp, g.ready_state,
           row_number() OVER (ORDER BY g.tenant COLLATE "C", g.grp COLLATE "C", h.seq) - 1 AS k
    FROM g, LATERAL (  -- (no index scan for a group without room)
        SELECT t.id, t.seq
        FROM tierq_tasks t
        WHERE t.queue = %(queue)s AND t.tenant = g.tenant AND t.grp = g.grp
          AND t.state = 'held'
        ORDER BY t.seq
        LIMIT GREATEST(%(max)s - g.active, 0)) AS h
), blocks AS MATERIALIZED (  -- one nextval per 512 of them (the sequence steps by 512)
    SELECT array_agg(b.base ORDER BY b.i) AS bases
    FROM (SELECT i, nextval('tierq_task_seq') AS base
          FROM generate_series(0, (SELECT max(k) FROM numbered) / 512) AS i) AS b
), moved AS (
    UPDATE tierq_tasks t
    SET state = CASE WHEN s.ready_state <> 'delayed' AND t.run_at <= %(now)s
                     THEN s.ready_state ELSE 'delayed' END,
        seq = CASE WHEN s.ready_state <> 'delayed' AND t.run_at <= %(now)s
                   THEN b.bases[s.k / 512 + 1] + s.k %% 512 ELSE t.seq END,
        ready_since = CASE WHEN s.ready_state <> 'delayed' AND t.run_at <= %(now)s
                           THEN %(now)s::timestamptz END,
        state_since = %(now)s
    FROM blocks b, numbered s
    -- (the ids as an array too: the tasks are read by primary key, one lookup each,
    -- whatever the planner guesses of numbered's size, which a LIMIT per group hides)
    WHERE t.id = s.id AND t.id = ANY(ARRAY(SELECT n.id FROM numbered n))
      AND (t.state = 'held') IS TRUE  -- implies no partial index (see ack_delete)
    RETURNING t.id::text AS id, t.tenant, t.grp, t.state, t.seq, t.priority, t.run_at,
              -- its blob, as promote_cold (engine.sql) builds it: task_blob's layout
              t.attempts || '|{"e":'
                  || (12 + length(t.payload::text)
                      - length(translate(t.payload::text, '"\', ''))
                      + length(COALESCE(to_json(t.key)::text, ''))
                      - length(translate(COALESCE(to_json(t.key)::text, ''), '"\', ''))
                      + COALESCE(2 + length(t.parents::text)
                                 - length(translate(t.parents::text, '"\', '')), 0)
                      + COALESCE(4 + length(to_json(t.grp)::text)
                                 - length(translate(to_json(t.grp)::text, '"\', '')), 0)
                      + CASE WHEN t.timeout_seconds IS NULL THEN 0 ELSE 2 END
                      + COALESCE(2 + length(t.trace)
                                 - length(translate(t.trace, '"\', '')), 0))
                  || ',"p":' || t.payload::text
                  || ',"k":' || COALESCE(to_json(t.key)::text, 'null')
                  || ',"pr":' || t.priority || ',"m":' || t.max_attempts
                  || ',"c":' || floor(extract(epoch FROM t.created_at) * 1000)::bigint
                  || COALESCE(',"pa":' || t.parents::text, '')
                  || COALESCE(',"g":' || to_json(t.grp)::text || ',"gs":' || t.seq, '')
                  || COALESCE(',"to":' || t.timeout_seconds, '')
                  || COALESCE(',"tr":' || t.trace, '') || '}' AS blob
), released AS (
    SELECT m.tenant, m.grp, count(*)::int AS n FROM moved m GROUP BY m.tenant, m.grp
), picked AS (
    SELECT s.tenant, s.grp, count(*)::int AS n FROM numbered s GROUP BY s.tenant, s.grp
), counts AS (  -- (a group with nothing active had room: none released, none held)
    SELECT g.tenant, g.grp, g.active, COALESCE(r.n, 0) AS released,
           COALESCE(p.n, 0) AS picked
    FROM g LEFT JOIN released r ON r.tenant = g.tenant AND r.grp = g.grp
           LEFT JOIN picked p ON p.tenant = g.tenant AND p.grp = g.grp
), kept AS (
    UPDATE tierq_groups r
    SET active = c.active + c.released, held = GREATEST(r.held - c.released, 0),
        head_since = CASE WHEN c.released > 0 THEN %(now)s::timestamptz ELSE r.head_since END
    FROM counts c
    WHERE r.queue = %(queue)s AND r.tenant = c.tenant AND r.grp = c.grp
      AND c.active + c.released + c.picked > 0
    RETURNING r.grp
), gone AS (
    -- (a held task picked but not moved was cancelled or deleted after this statement's
    -- snapshot, its change committed while the update waited on its row: the group may
    -- hold more, so its row stays, and that change's own release, which waits on this
    -- lock, recounts it and counts the task down)
    DELETE FROM tierq_groups r
    USING counts c
    WHERE r.queue = %(queue)s AND r.tenant = c.tenant AND r.grp = c.grp
      AND c.active + c.released + c.picked = 0
    RETURNING r.grp
)
SELECT m.id, m.tenant, m.state, m.seq, m.priority, m.run_at, m.blob FROM moved m;

-- name: held_gone
-- Held tasks that went without running (cancelled, deleted): their groups' held counts come
-- down. The caller holds the groups' locks (lock_groups).
UPDATE tierq_groups g SET held = GREATEST(g.held - v.n, 0)
FROM unnest(%(tenants)s::text[], %(grps)s::text[], %(counts)s::int[]) AS v(tenant, grp, n)
WHERE g.queue = %(queue)s AND g.tenant = v.tenant AND g.grp = v.grp;

-- name: groups_of_tasks
-- The groups of the tasks given that have one, by primary key: tasks finished and still
-- stored (acked and kept done, or dead), or a page of running leases (logic/queues.py).
-- Each row only when it is the tenant given with its id (its lease's).
SELECT t.id::text AS id, t.tenant, t.grp
FROM tierq_tasks t
JOIN unnest(%(ids)s::uuid[], %(tenants)s::text[]) AS v(id, tenant)
  ON t.id = v.id AND t.tenant = v.tenant
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.queue = %(queue)s
  AND t.grp IS NOT NULL;

-- name: replay_into_groups
-- Replayed dead letters of groups (reset to delayed by reset_dead in this transaction,
-- their groups locked by lock_groups): those given in %(held_ids)s join their group's back
-- held, with a new seq in the order given.
WITH s AS (
    SELECT v.id, nextval('tierq_task_seq') AS seq
    FROM unnest(%(held_ids)s::uuid[]) WITH ORDINALITY AS v(id, n)
    ORDER BY v.n
)
UPDATE tierq_tasks t
SET state = 'held', seq = s.seq, ready_since = NULL
FROM s
WHERE t.id = s.id AND (t.state = 'delayed') IS TRUE
RETURNING t.id::text;

-- name: grouped_of_ids
-- Which of the tasks given have a group: each one's tenant and group.
SELECT t.id::text AS id, t.tenant, t.grp
FROM tierq_tasks t
WHERE t.id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) AND t.grp IS NOT NULL;

-- name: walk_held_groups
-- The reaper's sweep: groups with held tasks and nothing active, in (queue, tenant, grp)
-- order after the cursor, by a skip scan of tierq_tasks_group_held (one index descent per
-- group with held tasks) and a probe of tierq_tasks_group_active per group. A group left
-- so is stalled (a release that did not run: a crash between a finishing commit and its
-- release, or counts changed by hand); the sweep's release recounts it under its lock.
-- Returns at most %(limit)s stalled groups, then the last group read (the next cursor).
WITH RECURSIVE walk AS (
    (SELECT queue, tenant, grp, 1 AS n FROM tierq_tasks
     WHERE state = 'held'
       AND (queue, tenant, grp) > (%(after_queue)s, %(after_tenant)s, %(after_grp)s)
     ORDER BY queue, tenant, grp LIMIT 1)
    UNION ALL
    SELECT step.queue, step.tenant, step.grp, walk.n + 1
    FROM walk, LATERAL (
        SELECT t.queue, t.tenant, t.grp FROM tierq_tasks t
        WHERE t.state = 'held' AND (t.queue, t.tenant, t.grp) > (walk.queue, walk.tenant, walk.grp)
        ORDER BY t.queue, t.tenant, t.grp LIMIT 1) AS step
    WHERE walk.n < %(limit)s
)
SELECT w.queue, w.tenant, w.grp,
       NOT EXISTS (SELECT 1 FROM tierq_tasks a
                   WHERE a.queue = w.queue AND a.tenant = w.tenant AND a.grp = w.grp
                     AND a.state IN ('delayed', 'cold', 'warm')) AS stalled
FROM walk w
ORDER BY w.queue, w.tenant, w.grp;

-- name: forget_queue_groups
-- A queue purged: its groups go with its tasks.
DELETE FROM tierq_groups WHERE queue = %(queue)s;
