-- Named queries of cron schedules (tierq.logic.schedules, tierq.maintenance.cron_tick).
-- A schedule is (tenant, name): names are scoped per tenant (migration 0009), and every
-- statement here names both.

-- name: schedule_lock
-- Everything that writes one schedule's occurrences holds this transaction lock: a PUT or a
-- DELETE waits for it, a tick that finds it taken leaves the schedule to whoever holds it.
-- (Tenant names cannot hold '|', so the text names one schedule.)
SELECT pg_advisory_xact_lock(
    hashtextextended('tierq-schedule|' || %(tenant)s || '|' || %(name)s, 11));

-- name: schedule_try_lock
SELECT pg_try_advisory_xact_lock(
    hashtextextended('tierq-schedule|' || %(tenant)s || '|' || %(name)s, 11)) AS locked;

-- name: upsert_schedule
-- PUT replaces the whole schedule; created_at survives. created tells a new row from a
-- replaced one (xmax is 0 only for a row this statement inserted). The conflict target is
-- the whole key (tenant, name): a PUT can only ever replace its own tenant's schedule.
INSERT INTO tierq_schedules AS s (name, queue, tenant, payload, priority, cron, every_ms,
                                  daily_times, timezone, horizon, enabled, config_hash,
                                  created_at, updated_at)
VALUES (%(name)s, %(queue)s, %(tenant)s, %(payload)s::jsonb, %(priority)s, %(cron)s,
        %(every_ms)s, %(daily_times)s::text[], %(timezone)s, %(horizon)s, %(enabled)s,
        %(config_hash)s, %(now)s, %(now)s)
ON CONFLICT (tenant, name) DO UPDATE SET
    queue = EXCLUDED.queue,
    payload = EXCLUDED.payload,
    priority = EXCLUDED.priority,
    cron = EXCLUDED.cron,
    every_ms = EXCLUDED.every_ms,
    daily_times = EXCLUDED.daily_times,
    timezone = EXCLUDED.timezone,
    horizon = EXCLUDED.horizon,
    enabled = EXCLUDED.enabled,
    config_hash = EXCLUDED.config_hash,
    updated_at = EXCLUDED.updated_at
RETURNING name, queue, tenant, payload, priority, cron, every_ms, daily_times, timezone,
          horizon, enabled, config_hash, installed_hash, installed_through_ms, last_tick_at,
          created_at, updated_at, (xmax = 0) AS created;

-- name: schedule_by_name
-- (Columns named, not *: a column a migration adds must not reach code that predates it.)
SELECT name, queue, tenant, payload, priority, cron, every_ms, daily_times, timezone, horizon,
       enabled, config_hash, installed_hash, installed_through_ms, last_tick_at, created_at,
       updated_at
FROM tierq_schedules WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: schedules_page
-- Schedules after (after_tenant, after_name) in (tenant, name) order, of one tenant or
-- (tenant NULL) of all; a keyset page on the primary key.
SELECT name, queue, tenant, payload, priority, cron, every_ms, daily_times, timezone, horizon,
       enabled, config_hash, installed_hash, installed_through_ms, last_tick_at, created_at,
       updated_at
FROM tierq_schedules
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (tenant, name) > (%(after_tenant)s::text, %(after_name)s::text)
ORDER BY tenant, name
LIMIT %(limit)s;

-- name: schedules_to_tick
-- The schedules a tick has work for; the others are left alone, with no write per tick.
--
-- | schedule                                   | has work when                              |
-- | ------------------------------------------ | ------------------------------------------ |
-- | enabled                                    | its config is not installed yet            |
-- | enabled                                    | its installed occurrences end within the   |
-- |                                            | lookahead (the horizon needs topping up)   |
-- | enabled                                    | an occurrence is now due (finished ones    |
-- |                                            | get pruned)                                |
-- | any, even disabled or removed              | it has ledger rows of another config:      |
-- |                                            | pending ones to withdraw, or claimed ones  |
-- |                                            | to forget once they finish                 |
SELECT s.tenant, s.name FROM tierq_schedules s
WHERE s.enabled
  AND (s.installed_hash IS DISTINCT FROM s.config_hash
       OR s.installed_through_ms IS NULL
       OR s.installed_through_ms - %(lookahead_ms)s <= %(now_ms)s
       OR EXISTS (SELECT 1 FROM tierq_schedule_occurrences o
                  WHERE o.tenant = s.tenant AND o.schedule = s.name
                    AND o.fire_at_ms <= %(now_ms)s))
UNION
SELECT o.tenant, o.schedule FROM tierq_schedule_occurrences o
LEFT JOIN tierq_schedules s ON s.tenant = o.tenant AND s.name = o.schedule
WHERE s.name IS NULL OR NOT s.enabled OR o.config_hash <> s.config_hash
ORDER BY 1, 2;

-- name: lock_pending_occurrences
-- Occurrences never claimed (attempts = 0 and delayed, cold or warm; a warm one is only
-- withdrawn if it still waits in the Valkey ready set), of every config hash but keep_hash
-- (NULL: all of them). Rows another transaction holds (e.g. the delayed mover making them
-- ready) are skipped; a later tick finds them again.
SELECT t.id, t.queue, t.tenant, t.state, t.priority, t.seq
FROM tierq_schedule_occurrences o
JOIN tierq_tasks t ON t.id = o.task_id
WHERE o.tenant = %(tenant)s AND o.schedule = %(name)s
  AND (%(keep_hash)s::text IS NULL OR o.config_hash <> %(keep_hash)s)
  AND t.state IN ('delayed', 'cold', 'warm')
  AND t.attempts = 0
ORDER BY t.id
FOR UPDATE OF t SKIP LOCKED;

-- name: delete_occurrence_tasks
DELETE FROM tierq_tasks
WHERE id = ANY(%(ids)s::uuid[]) AND state IN ('delayed', 'cold', 'warm') AND attempts = 0
RETURNING id;

-- name: prune_occurrences
-- Forget occurrences whose task has left the live states (acked, dead, cancelled or
-- withdrawn).
DELETE FROM tierq_schedule_occurrences o
WHERE o.tenant = %(tenant)s AND o.schedule = %(name)s
  AND NOT EXISTS (
      SELECT 1 FROM tierq_tasks t
      WHERE t.id = o.task_id AND t.state IN ('delayed', 'cold', 'warm'));

-- name: insert_occurrences
-- Occurrences as ordinary delayed tasks (the row shape of the engine's insert_tasks) and
-- their ledger rows, one statement per chunk. A live task with the same key wins
-- (ON CONFLICT DO NOTHING): a concurrent install, or a claimed occurrence of this config
-- still running. Returns the ids of the tasks this statement created.
WITH v AS (
    SELECT * FROM unnest(%(task_ids)s::uuid[], %(keys)s::text[], %(fire_at_ms)s::bigint[])
        AS v(id, key, fire_at_ms)
), created AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since)
    SELECT v.id, %(queue)s, %(tenant)s, v.key, %(priority)s, %(payload)s::jsonb, 'delayed',
           to_timestamp(v.fire_at_ms / 1000.0), to_timestamp(v.fire_at_ms / 1000.0),
           %(max_attempts)s, nextval('tierq_task_seq'), %(now)s, NULL, %(now)s
    FROM v
    ORDER BY v.fire_at_ms
    ON CONFLICT (queue, tenant, key) WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm')
    DO NOTHING
    RETURNING id
)
INSERT INTO tierq_schedule_occurrences (schedule, config_hash, fire_at_ms, task_id, queue,
                                        tenant)
SELECT %(name)s, %(config_hash)s, v.fire_at_ms, created.id, %(queue)s, %(tenant)s
FROM created JOIN v ON v.id = created.id
ON CONFLICT DO NOTHING
RETURNING task_id;

-- name: mark_installed
UPDATE tierq_schedules
SET installed_hash = %(installed_hash)s,
    installed_through_ms = %(installed_through_ms)s,
    last_tick_at = %(now)s
WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: delete_schedule_row
DELETE FROM tierq_schedules WHERE tenant = %(tenant)s AND name = %(name)s RETURNING name;

-- name: live_occurrences
-- The installed occurrences of some schedules (tenants[i], names[i]) whose task is still
-- live: the soonest limits[i] of each, with how many there are in all (total). A schedule
-- nobody claims from (workers down, queue paused) gains occurrences every tick, so what is
-- shown is bounded here; total still counts every one. A schedule with none yields no row.
SELECT s.tenant AS schedule_tenant, s.name AS schedule, o.config_hash, o.fire_at_ms,
       o.task_id, o.key, o.state, o.attempts, o.queue, o.tenant, o.total
FROM unnest(%(tenants)s::text[], %(names)s::text[], %(limits)s::int[]) AS s(tenant, name, lim)
CROSS JOIN LATERAL (
    SELECT o.config_hash, o.fire_at_ms, o.task_id, t.key, t.state, t.attempts, t.queue,
           t.tenant, count(*) OVER () AS total
    FROM tierq_schedule_occurrences o
    JOIN tierq_tasks t ON t.id = o.task_id
    WHERE o.tenant = s.tenant AND o.schedule = s.name
      AND t.state IN ('delayed', 'cold', 'warm')
    ORDER BY o.fire_at_ms, o.config_hash
    LIMIT s.lim
) o
ORDER BY s.tenant, s.name, o.fire_at_ms, o.config_hash;
