-- tierq schema, version 32: the statements of batch rows' enqueue and move as PL/pgSQL
-- functions, for RDS Proxy.
--
-- Migration 0029's rule, for the statements of sql/queries/batches.sql that an enqueue and
-- any transition but a plain ack run (the plain ack is a function already, migration 0031):
-- behind RDS Proxy nothing is prepared, so PostgreSQL would parse and plan each of them at
-- every execution; a function keeps its plan in the backend. StoreBase calls
-- `routine_<name>` in place of `<name>` where nothing is prepared, once it has found the
-- function (the statement runs itself until then).
--
-- | function                       | runs the named statement | for                       |
-- | ------------------------------ | ------------------------ | ------------------------- |
-- | tierq_insert_batch_v1          | insert_batch             | enqueue                   |
-- | tierq_insert_batch_keyed_v1    | insert_batch_keyed       | enqueue, with keys        |
-- | tierq_lock_batches_v1          | lock_batches             | a move, its locks         |
-- | tierq_move_out_of_batches_v1   | move_out_of_batches      | a move                    |
--
-- Each body is its named statement, each %(name)s written p_name, and nothing else
-- (tests/integration/test_statement_routines.py compares them); migration 0029's header
-- says why each is written as it is.

CREATE FUNCTION tierq_insert_batch_v1(p_queue text, p_now timestamp with time zone, p_batch uuid, p_tenant_names text[], p_tenant_of bytea, p_priorities smallint[], p_payloads jsonb, p_max_attempts integer, p_timeout integer)
RETURNS TABLE (id text, seq bigint)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH b AS (
    INSERT INTO tierq_batches (id, queue, tasks, first_seq, tenant_names, tenant_of,
                               priorities, payloads, max_attempts, timeout_seconds,
                               created_at)
    VALUES (p_batch::uuid, p_queue, cardinality(p_priorities::smallint[]),
            nextval('tierq_task_seq'), p_tenant_names::text[], p_tenant_of::bytea,
            p_priorities::smallint[], p_payloads::jsonb, p_max_attempts, p_timeout,
            p_now)
    RETURNING first_seq, tenant_names
),
p AS (
    INSERT INTO tierq_batch_pairs (queue, tenant, batch)
    SELECT p_queue, t.tenant, p_batch::uuid FROM b, unnest(b.tenant_names) AS t(tenant)
)
SELECT NULL::text AS id, first_seq AS seq FROM b;
END
$$;

CREATE FUNCTION tierq_insert_batch_keyed_v1(p_queue text, p_now timestamp with time zone, p_batch uuid, p_seq_offsets smallint[], p_tenant_names text[], p_tenant_of bytea, p_priorities smallint[], p_payloads jsonb, p_max_attempts integer, p_timeout integer, p_keyed_ids uuid[], p_keyed_tenants jsonb, p_keys jsonb, p_keyed_priorities smallint[], p_keyed_payloads jsonb, p_keyed_offsets integer[])
RETURNS TABLE (id text, seq bigint)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH b AS (
    INSERT INTO tierq_batches (id, queue, tasks, first_seq, seq_offsets, tenant_names,
                               tenant_of, priorities, payloads, max_attempts,
                               timeout_seconds, created_at)
    VALUES (p_batch::uuid, p_queue, cardinality(p_priorities::smallint[]),
            nextval('tierq_task_seq'), p_seq_offsets::smallint[],
            p_tenant_names::text[], p_tenant_of::bytea, p_priorities::smallint[],
            p_payloads::jsonb, p_max_attempts, p_timeout, p_now)
    RETURNING first_seq, tenant_names
),
p AS (
    INSERT INTO tierq_batch_pairs (queue, tenant, batch)
    SELECT p_queue, t.tenant, p_batch::uuid FROM b, unnest(b.tenant_names) AS t(tenant)
),
keyed AS (
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, p_queue, v.tenant, v.key, v.priority, v.payload, 'warm', p_now,
           p_now, p_max_attempts, b.first_seq + v.offset_in_batch, p_now, p_now,
           p_now, NULL, p_timeout, NULL
    FROM b, ROWS FROM (unnest(p_keyed_ids::uuid[]),
                       jsonb_array_elements_text(p_keyed_tenants::jsonb),
                       jsonb_array_elements_text(p_keys::jsonb),
                       unnest(p_keyed_priorities::smallint[]),
                       jsonb_array_elements(p_keyed_payloads::jsonb),
                       unnest(p_keyed_offsets::int[]))
            AS v(id, tenant, key, priority, payload, offset_in_batch)
    ON CONFLICT (queue, tenant, key)
        WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
    DO NOTHING
    RETURNING id::text, seq
)
SELECT id, seq FROM keyed
UNION ALL SELECT NULL, first_seq FROM b;
END
$$;

CREATE FUNCTION tierq_lock_batches_v1(p_batches uuid[])
RETURNS TABLE (count bigint)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
SELECT count(pg_advisory_xact_lock(hashtextextended(b::text, 30)))
FROM (SELECT DISTINCT b FROM unnest(p_batches::uuid[]) AS b ORDER BY b) AS sorted;
END
$$;

CREATE FUNCTION tierq_move_out_of_batches_v1(p_queue text, p_ids uuid[], p_batches uuid[], p_places integer[], p_tenants text[])
RETURNS TABLE (id text)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH v AS (
    SELECT DISTINCT v.id, v.batch, v.place, v.tenant
    FROM unnest(p_ids::uuid[], p_batches::uuid[], p_places::int[],
                p_tenants::text[]) AS v(id, batch, place, tenant)
),
m AS MATERIALIZED (
    SELECT v.id, v.batch, v.place, b.queue,
           tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) AS tenant,
           b.priorities[v.place + 1] AS priority, b.payloads -> v.place AS payload,
           tierq_batch_seq(b.first_seq, b.seq_offsets, v.place) AS seq, b.max_attempts,
           b.timeout_seconds, b.created_at
    FROM v JOIN tierq_batches b ON b.id = v.batch
    WHERE (b.queue = p_queue::text OR p_queue::text IS NULL) AND v.place < b.tasks
      AND (tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
           OR v.tenant IS NULL)
      AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                      WHERE e.batch = v.batch AND v.place = ANY(e.places))
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
END
$$;

-- (EXECUTE for the application's group too, as migration 0029 grants its functions')
DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND p.proname IN ('tierq_insert_batch_v1', 'tierq_insert_batch_keyed_v1',
                            'tierq_lock_batches_v1', 'tierq_move_out_of_batches_v1')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', fn, tierq_app_group());
    END LOOP;
END
$$;
