-- Named queries of cron schedules (tierq.logic.schedules, tierq.maintenance.cron_tick).
-- A schedule is (tenant, name): names are scoped per tenant (migration 0009), and every
-- statement here names both.

-- name: schedule_lock
-- Everything that writes one schedule's occurrences holds this transaction lock: a PUT or a
-- DELETE waits for it, a tick that finds it taken leaves the schedule to whoever holds it.
-- (Tenant names cannot hold '|', so the text names one schedule.)
SELECT pg_advisory_xact_lock(
    hashtextextended('tierq-schedule|' || %(tenant)s || '|' || %(name)s, 11));

-- name: schedules_try_lock
-- A tick's locks of a slice of schedules (tenants[i], names[i]) at once: the ones it took
-- (a schedule whose lock is taken is left to whoever holds it). The tick's commit waits for
-- the WAL flush like every other: an occurrence it installed ready may be pushed to the warm
-- tier and claimed at once, so losing its row in a crash would run it twice.
SELECT k.tenant, k.name
FROM unnest(%(tenants)s::text[], %(names)s::text[]) WITH ORDINALITY AS k(tenant, name, i)
WHERE pg_try_advisory_xact_lock(
          hashtextextended('tierq-schedule|' || k.tenant || '|' || k.name, 11))
ORDER BY k.i;

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

-- name: schedules_for_tick
-- The rows a tick installs, of schedules (tenants[i], names[i]) whose locks it holds (read by
-- a statement after the one that took them, so a PUT that held one has committed), and
-- whether occurrences of another config remain in each one's ledger (of any config, when
-- disabled): only then has the tick anything to withdraw. A removed schedule has no row.
SELECT s.name, s.queue, s.tenant, s.payload, s.priority, s.cron, s.every_ms, s.daily_times,
       s.timezone, s.horizon, s.enabled, s.config_hash, s.installed_hash,
       s.installed_through_ms, s.last_tick_at, s.created_at, s.updated_at,
       EXISTS (SELECT 1 FROM tierq_schedule_occurrences o
               WHERE o.tenant = s.tenant AND o.schedule = s.name
                 AND (NOT s.enabled OR o.config_hash <> s.config_hash)) AS stale
FROM unnest(%(tenants)s::text[], %(names)s::text[]) AS k(tenant, name)
JOIN tierq_schedules s ON s.tenant = k.tenant AND s.name = k.name;

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

-- name: schedules_due
-- The next slice of schedules the tick has work for, soonest due first: schedules whose
-- tick_at_ms has come, and removed schedules whose occurrences remain (remnants), after the
-- pass's cursor (after_at, after_tenant, after_name) in (tick_at_ms, tenant, name) order.
-- Each side reads its partial index from the cursor on, at most `limit` entries: a pass
-- costs the schedules due, never the schedules there are (migration 0016).
-- queue and enabled (NULL and false for a remnant) spare the tick a read before its lock.
SELECT d.tick_at_ms, d.tenant, d.name, d.queue, d.enabled FROM (
    (SELECT s.tick_at_ms, s.tenant, s.name, s.queue, s.enabled FROM tierq_schedules s
     WHERE s.tick_at_ms IS NOT NULL AND s.tick_at_ms <= %(now_ms)s
       AND (s.tick_at_ms, s.tenant, s.name)
           > (%(after_at)s::bigint, %(after_tenant)s::text, %(after_name)s::text)
     ORDER BY s.tick_at_ms, s.tenant, s.name
     LIMIT %(limit)s)
    UNION ALL
    (SELECT r.tick_at_ms, r.tenant, r.name, NULL::text, false FROM tierq_schedule_remnants r
     WHERE r.tick_at_ms <= %(now_ms)s
       AND (r.tick_at_ms, r.tenant, r.name)
           > (%(after_at)s::bigint, %(after_tenant)s::text, %(after_name)s::text)
     ORDER BY r.tick_at_ms, r.tenant, r.name
     LIMIT %(limit)s)
) d
ORDER BY d.tick_at_ms, d.tenant, d.name
LIMIT %(limit)s;

-- name: schedule_has_occurrences
-- Whether ledger rows of a removed schedule remain: occurrences still running or held, to
-- withdraw or forget at a later tick.
SELECT EXISTS (
    SELECT 1 FROM tierq_schedule_occurrences o
    WHERE o.tenant = %(tenant)s AND o.schedule = %(name)s) AS found;

-- name: keep_remnant
-- A removed schedule's occurrences remain: the tick comes back for them at tick_at_ms.
INSERT INTO tierq_schedule_remnants (tenant, name, tick_at_ms)
VALUES (%(tenant)s, %(name)s, %(tick_at_ms)s)
ON CONFLICT (tenant, name) DO UPDATE SET tick_at_ms = EXCLUDED.tick_at_ms;

-- name: forget_remnant
DELETE FROM tierq_schedule_remnants WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: lock_tenant_schedules
-- Taken before a new schedule of the tenant is written: two PUTs of new schedules of one
-- tenant at once cannot both pass its cap. Taken after the schedule's own lock (never the
-- other way round), so the two locks never wait on each other crosswise.
SELECT pg_advisory_xact_lock(hashtextextended('tierq-schedules-of|' || %(tenant)s, 11));

-- name: count_tenant_schedules
-- How many schedules the tenant has, counted up to `cap` (the primary key's tenant prefix).
SELECT count(*) FROM (
    SELECT 1 FROM tierq_schedules WHERE tenant = %(tenant)s LIMIT %(cap)s) AS s;

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
    ON CONFLICT (queue, tenant, key)
        WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
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
-- tick_at_ms: when the tick next has work for the schedule (NULL: none until a PUT); now_ms
-- (the next tick) instead while ledger rows of another config than keep_hash (NULL: of any)
-- remain, occurrences still running or held, to withdraw or forget then.
UPDATE tierq_schedules
SET installed_hash = %(installed_hash)s,
    installed_through_ms = %(installed_through_ms)s,
    tick_at_ms = CASE WHEN EXISTS (
                          SELECT 1 FROM tierq_schedule_occurrences o
                          WHERE o.tenant = %(tenant)s AND o.schedule = %(name)s
                            AND (%(keep_hash)s::text IS NULL
                                 OR o.config_hash <> %(keep_hash)s))
                      THEN %(now_ms)s::bigint
                      ELSE %(tick_at_ms)s::bigint END,
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
