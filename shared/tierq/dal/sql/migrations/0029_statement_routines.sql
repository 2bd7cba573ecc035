-- tierq schema, version 29: the hottest statements as PL/pgSQL functions, for RDS Proxy.
--
-- Behind RDS Proxy the engine sends no prepared statements (one pins the client to a
-- database connection): PostgreSQL parses and plans each statement on every execution,
-- 0.1-0.5 ms of the backend's CPU for an ack or an enqueue, more than the statement itself
-- for a batch of a few tasks. A PL/pgSQL function keeps the plans of its statements in the
-- backend, which the proxy shares between its clients without pinning: only the call is
-- planned each time (python -m bench.pg_routines). The engine calls these where its
-- connections prepare nothing (`Database(routines=...)`, dal/postgres.py; StoreBase runs
-- `routine_<name>` of sql/queries/engine.sql for `<name>` once it has found the function);
-- elsewhere it runs the named statements themselves, prepared.
--
-- | function                            | runs the named statement   | for                |
-- | ----------------------------------- | -------------------------- | ------------------ |
-- | tierq_insert_tasks_v1               | insert_tasks               | enqueue, with keys |
-- | tierq_insert_tasks_keyless_v1       | insert_tasks_keyless       | enqueue            |
-- | tierq_insert_tasks_uniform_v1       | insert_tasks_uniform       | enqueue            |
-- | tierq_insert_tasks_uniform_keyed_v1 | insert_tasks_uniform_keyed | enqueue, with keys |
-- | tierq_ack_delete_v1                 | ack_delete                 | ack                |
-- | tierq_ack_delete_by_attempt_v1      | ack_delete_by_attempt      | ack                |
-- | tierq_ack_keep_v1                   | ack_keep                   | ack with a result  |
-- | tierq_lease_outcomes_v1             | lease_outcomes             | nack, lease expiry |
-- | tierq_release_leased_v1             | release_leased             | release            |
--
-- Each body is its named statement, each %(name)s written p_name, and nothing else
-- (tests/integration/test_statement_routines.py compares them). A function is never
-- replaced: a change to its statement makes the next version (`_v2`) in a new migration,
-- and the call names it, so code runs the body it was written with while the migration is
-- pending (the store runs the statement until it finds the function) and after a rollback
-- of the code; a later migration that makes one grants its EXECUTE as below, and drops an
-- older version only once no code that names it can still run. `#variable_conflict
-- use_column`: a name that is both a column and an output column (id, grp, ...) means the
-- column, as in the statement. `plan_cache_mode = force_generic_plan`: the plan is made
-- once per backend; left to choose, PostgreSQL plans a small batch again on every call (a
-- custom plan looks cheaper than the generic one), which is the cost these functions are
-- here to save, and the generic plans are the custom ones (the ids reach each statement
-- through an InitPlan either way). SECURITY INVOKER (the default): a call runs with the
-- caller's privileges and search_path, as the statement does. EXECUTE is granted to the
-- application's group (below) as well as to PUBLIC, so a database that revokes it from
-- PUBLIC still serves the engine.

CREATE FUNCTION tierq_ack_delete_v1(p_ids uuid[], p_queue text, p_tenant_set text[], p_attempt integer)
RETURNS TABLE (id text, grp text)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
DELETE FROM tierq_tasks
WHERE id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND queue = p_queue
  AND tenant = ANY(p_tenant_set::text[])
  AND (state = 'warm') IS TRUE AND attempts < p_attempt AND waiters = 0
RETURNING id::text, grp;
END
$$;


CREATE FUNCTION tierq_ack_delete_by_attempt_v1(p_ids uuid[], p_tenants text[], p_attempts integer[], p_queue text)
RETURNS TABLE (id text, grp text)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
DELETE FROM tierq_tasks t
USING unnest(p_ids::uuid[], p_tenants::text[], p_attempts::int[])
      AS v(id, tenant, attempt)
WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
  AND t.queue = p_queue AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt AND t.waiters = 0
RETURNING t.id::text, t.grp;
END
$$;


CREATE FUNCTION tierq_insert_tasks_uniform_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_priorities smallint[], p_payloads jsonb, p_state text, p_run_at double precision, p_max_attempts integer, p_timeout integer)
RETURNS TABLE (min bigint, count bigint)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH inserted AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, p_queue, v.tenant, NULL, v.priority, v.payload, r.state, r.run_at,
           r.run_at, p_max_attempts, b.seq + v.n - 1, p_now, r.ready_since,
           p_now, NULL, p_timeout, NULL
    FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
         (SELECT s.state,
                 CASE WHEN s.state IN ('delayed', 'waiting', 'held')
                      THEN to_timestamp(p_run_at::double precision)
                      ELSE LEAST(to_timestamp(p_run_at::double precision),
                                 p_now::timestamptz)
                 END AS run_at,
                 CASE WHEN s.state IN ('delayed', 'waiting', 'held') THEN NULL
                      ELSE p_now::timestamptz END AS ready_since
          FROM (SELECT p_state::text AS state) AS s) AS r,
         ROWS FROM (unnest(p_ids::uuid[]),
                    jsonb_array_elements_text(p_tenants::jsonb),
                    unnest(p_priorities::smallint[]),
                    jsonb_array_elements(p_payloads::jsonb))
         WITH ORDINALITY AS v(id, tenant, priority, payload, n)
    RETURNING seq
)
SELECT min(seq), count(*) FROM inserted;
END
$$;


CREATE FUNCTION tierq_insert_tasks_keyless_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_priorities smallint[], p_payloads jsonb, p_states text[], p_run_ats double precision[], p_max_attempts integer[], p_grps jsonb, p_timeouts integer[], p_traces jsonb)
RETURNS TABLE (min bigint, count bigint)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH inserted AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, p_queue, v.tenant, NULL, v.priority, v.payload, v.state, r.run_at,
           r.run_at, v.max_attempts, b.seq + v.n - 1, p_now,
           CASE WHEN v.state IN ('delayed', 'waiting', 'held') THEN NULL
                ELSE p_now::timestamptz END,
           p_now, v.grp, v.timeout_seconds, v.trace
    FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
         ROWS FROM (unnest(p_ids::uuid[]),
                    jsonb_array_elements_text(p_tenants::jsonb),
                    unnest(p_priorities::smallint[]),
                    jsonb_array_elements(p_payloads::jsonb),
                    unnest(p_states::text[]),
                    unnest(p_run_ats::double precision[]),
                    unnest(p_max_attempts::int[]),
                    jsonb_array_elements_text(p_grps::jsonb),
                    unnest(p_timeouts::int[]),
                    jsonb_array_elements_text(p_traces::jsonb))
         WITH ORDINALITY AS v(id, tenant, priority, payload, state, run_at, max_attempts,
                              grp, timeout_seconds, trace, n),
         LATERAL (SELECT CASE WHEN v.state IN ('delayed', 'waiting', 'held')
                              THEN to_timestamp(v.run_at)
                              ELSE LEAST(to_timestamp(v.run_at), p_now::timestamptz)
                         END AS run_at) AS r
    RETURNING seq
)
SELECT min(seq), count(*) FROM inserted;
END
$$;


CREATE FUNCTION tierq_insert_tasks_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_keys jsonb, p_priorities smallint[], p_payloads jsonb, p_states text[], p_run_ats double precision[], p_max_attempts integer[], p_grps jsonb, p_timeouts integer[], p_traces jsonb)
RETURNS TABLE (id text, seq bigint)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                         run_at_initially, max_attempts, seq, created_at, ready_since,
                         state_since, grp, timeout_seconds, trace)
SELECT v.id, p_queue, v.tenant, v.key, v.priority, v.payload, v.state, r.run_at, r.run_at,
       v.max_attempts, b.seq + v.n - 1, p_now,
       CASE WHEN v.state IN ('delayed', 'waiting', 'held') THEN NULL
            ELSE p_now::timestamptz END,
       p_now, v.grp, v.timeout_seconds, v.trace
FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
     ROWS FROM (unnest(p_ids::uuid[]),
                jsonb_array_elements_text(p_tenants::jsonb),
                jsonb_array_elements_text(p_keys::jsonb),
                unnest(p_priorities::smallint[]),
                jsonb_array_elements(p_payloads::jsonb),
                unnest(p_states::text[]),
                unnest(p_run_ats::double precision[]),
                unnest(p_max_attempts::int[]),
                jsonb_array_elements_text(p_grps::jsonb),
                unnest(p_timeouts::int[]),
                jsonb_array_elements_text(p_traces::jsonb))
     WITH ORDINALITY AS v(id, tenant, key, priority, payload, state, run_at, max_attempts,
                          grp, timeout_seconds, trace, n),
     LATERAL (SELECT CASE WHEN v.state IN ('delayed', 'waiting', 'held')
                          THEN to_timestamp(v.run_at)
                          ELSE LEAST(to_timestamp(v.run_at), p_now::timestamptz)
                     END AS run_at) AS r
ON CONFLICT (queue, tenant, key)
    WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
DO NOTHING
RETURNING id::text, seq;
END
$$;


CREATE FUNCTION tierq_insert_tasks_uniform_keyed_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_keys jsonb, p_priorities smallint[], p_payloads jsonb, p_state text, p_run_at double precision, p_max_attempts integer, p_timeout integer)
RETURNS TABLE (id text, seq bigint)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
v AS (
    SELECT v.id, v.tenant, v.key, v.priority, v.payload, b.seq + v.n - 1 AS seq
    FROM b, ROWS FROM (unnest(p_ids::uuid[]),
                       jsonb_array_elements_text(p_tenants::jsonb),
                       jsonb_array_elements_text(p_keys::jsonb),
                       unnest(p_priorities::smallint[]),
                       jsonb_array_elements(p_payloads::jsonb))
            WITH ORDINALITY AS v(id, tenant, key, priority, payload, n)
),
r AS (
    SELECT s.state,
           CASE WHEN s.state IN ('delayed', 'waiting', 'held')
                THEN to_timestamp(p_run_at::double precision)
                ELSE LEAST(to_timestamp(p_run_at::double precision), p_now::timestamptz)
           END AS run_at,
           CASE WHEN s.state IN ('delayed', 'waiting', 'held') THEN NULL
                ELSE p_now::timestamptz END AS ready_since
    FROM (SELECT p_state::text AS state) AS s
),
plain AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, p_queue, v.tenant, NULL, v.priority, v.payload, r.state, r.run_at,
           r.run_at, p_max_attempts, v.seq, p_now, r.ready_since, p_now, NULL,
           p_timeout, NULL
    FROM r, v WHERE v.key IS NULL
),
keyed AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, p_queue, v.tenant, v.key, v.priority, v.payload, r.state, r.run_at,
           r.run_at, p_max_attempts, v.seq, p_now, r.ready_since, p_now, NULL,
           p_timeout, NULL
    FROM r, v WHERE v.key IS NOT NULL
    ON CONFLICT (queue, tenant, key)
        WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
    DO NOTHING
    RETURNING id::text, seq
)
SELECT id, seq FROM keyed
UNION ALL SELECT NULL, seq FROM b;
END
$$;


CREATE FUNCTION tierq_ack_keep_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants text[], p_results jsonb[], p_attempts integer[])
RETURNS TABLE (id text, grp text)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
UPDATE tierq_tasks t
SET state = 'done', result = v.result, attempts = v.attempt, finished_at = p_now,
    state_since = p_now, ready_since = NULL
FROM unnest(p_ids::uuid[], p_tenants::text[], p_results::jsonb[], p_attempts::int[])
     AS v(id, tenant, result, attempt)
WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
  AND t.queue = p_queue AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt AND t.waiters = 0
RETURNING t.id::text, t.grp;
END
$$;


CREATE FUNCTION tierq_lease_outcomes_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants text[], p_attempts integer[], p_errors text[], p_retry_ats timestamp with time zone[], p_deads boolean[], p_waited boolean)
RETURNS TABLE (id uuid, tenant text, state text, run_at timestamp with time zone, grp text)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
UPDATE tierq_tasks t
SET attempts = v.attempt,
    last_error = v.error,
    state = CASE WHEN v.dead OR v.attempt >= t.max_attempts THEN 'dead' ELSE 'delayed' END,
    run_at = CASE WHEN v.dead OR v.attempt >= t.max_attempts THEN t.run_at ELSE v.retry_at END,
    finished_at = CASE WHEN v.dead OR v.attempt >= t.max_attempts
                       THEN p_now::timestamptz ELSE NULL END,
    ready_since = NULL,
    state_since = p_now
FROM unnest(p_ids::uuid[], p_tenants::text[], p_attempts::int[], p_errors::text[],
            p_retry_ats::timestamptz[], p_deads::bool[])
     AS v(id, tenant, attempt, error, retry_at, dead)
WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
  AND t.queue = p_queue AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
  AND (t.waiters = 0 OR p_waited)  -- (waited: logic/flows.py, with the settlement)
RETURNING t.id, t.tenant, t.state, t.run_at, t.grp;
END
$$;


CREATE FUNCTION tierq_release_leased_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants text[], p_attempts integer[])
RETURNS TABLE (id uuid, queue text, tenant text, key text, state text, seq bigint, priority smallint, payload jsonb, attempts integer, max_attempts integer, created_at timestamp with time zone, parents text, grp text, timeout_seconds integer, trace text)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
UPDATE tierq_tasks t
SET state_since = p_now
FROM unnest(p_ids::uuid[], p_tenants::text[], p_attempts::int[]) AS v(id, tenant, attempt)
WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
  AND t.queue = p_queue AND t.tenant = v.tenant
  AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
RETURNING t.id, t.queue, t.tenant, t.key, t.state, t.seq, t.priority, t.payload, t.attempts,
          t.max_attempts, t.created_at, t.parents::text, t.grp, t.timeout_seconds, t.trace;
END
$$;

-- (the group exists since migration 0007)
DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND p.proname IN ('tierq_insert_tasks_v1', 'tierq_insert_tasks_keyless_v1',
                            'tierq_insert_tasks_uniform_v1',
                            'tierq_insert_tasks_uniform_keyed_v1', 'tierq_ack_delete_v1',
                            'tierq_ack_delete_by_attempt_v1', 'tierq_ack_keep_v1',
                            'tierq_lease_outcomes_v1', 'tierq_release_leased_v1')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', fn, tierq_app_group());
    END LOOP;
END
$$;
