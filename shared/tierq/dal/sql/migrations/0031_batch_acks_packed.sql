-- tierq schema, version 31: a plain ack of batch members with its tasks packed in bytes.
--
-- tierq_end_batch_members_v1 (migration 0030) took five arrays of one element per member
-- (ids, batches, places, tenants, attempts) and answered a row per member: at acks of 400
-- PostgreSQL spent more on reading those arrays and writing those rows than on the ack,
-- and it looked up a member's batch row, and the moves of its batch, once per member; an
-- ack that also named tasks kept as rows (keyed ones) deleted those in a second statement
-- and commit. Version 2 takes each batch and each tenant once, a member as ten bytes and
-- a row's id with six bytes (below); it reads each batch row, and the places moved out of
-- it, once per batch, deletes the rows in the same statement, and answers a row per task
-- whose row it deleted, not per member it ended. Backend CPU a member, v1 → v2 (acks of
-- 400 of one tenant; of 100 over ten tenants by priority): 6.4–7.7 → 2.9 µs and 10.5–13.2
-- → 7.8–8.3 µs on this project's 2-core machine (bench/README.md, *The ack's tasks packed
-- in bytes*).
--
-- A member in p_members, ten bytes, and a row's task in p_rows, six bytes (its id the same
-- place of p_row_ids), big-endian:
--
-- | member bytes | row bytes | what                                                  |
-- | ------------ | --------- | ----------------------------------------------------- |
-- | 0-1          |           | its batch: an index into p_batches, from 0            |
-- | 2-3          |           | its place in the batch row                            |
-- | 4-5          | 0-1       | the tenant of its lease: an index into p_tenants      |
-- | 6-9          | 2-5       | the attempt of its lease                              |
--
-- A member not in its batch row (moved out before) and a row's task are deleted as
-- ack_delete_by_attempt deletes a row. The answer: a row (id, grp, NULL) per task whose
-- row the ack deleted, then one row (NULL, NULL, the indexes into p_members of the
-- members not ended in their batch rows). Every member not in that last array was ended.
-- A task is named once (the caller drops repeats). v1 stays for code that still calls it
-- (migration 0029's rule for versions).
CREATE FUNCTION tierq_end_batch_members_v2(p_queue text, p_batches uuid[], p_tenants text[],
                                           p_members bytea, p_row_ids uuid[], p_rows bytea)
RETURNS TABLE (id text, grp text, unended integer[])
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
IF length(p_members) % 10 <> 0 THEN
    RAISE EXCEPTION 'p_members has % bytes, not ten per member', length(p_members);
END IF;
IF length(p_rows) <> 6 * coalesce(cardinality(p_row_ids), 0) THEN
    RAISE EXCEPTION 'p_rows has % bytes, not six per id of p_row_ids', length(p_rows);
END IF;
PERFORM count(pg_advisory_xact_lock_shared(hashtextextended(b::text, 30)))
FROM (SELECT DISTINCT b FROM unnest(p_batches) AS b ORDER BY b) AS sorted;
RETURN QUERY
WITH v AS (
    SELECT n,
           p_batches[get_byte(p_members, 10 * n) * 256
                     + get_byte(p_members, 10 * n + 1) + 1] AS batch,
           get_byte(p_members, 10 * n + 2) * 256 + get_byte(p_members, 10 * n + 3) AS place,
           p_tenants[get_byte(p_members, 10 * n + 4) * 256
                     + get_byte(p_members, 10 * n + 5) + 1] AS tenant
    FROM generate_series(0, length(p_members) / 10 - 1) AS n
),
-- (each batch row, and the places moved out of it, read once)
b AS MATERIALIZED (
    SELECT b.id, b.tasks, b.tenant_names, b.tenant_of,
           ARRAY(SELECT p FROM tierq_batch_ends e, unnest(e.places) AS p
                 WHERE e.batch = b.id AND e.moved) AS moved
    FROM tierq_batches b
    WHERE b.id = ANY(p_batches) AND b.queue = p_queue
),
m AS MATERIALIZED (
    SELECT v.n, v.batch, v.place, v.tenant,
           coalesce(v.place < b.tasks
                    AND tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
                    AND NOT v.place = ANY(b.moved), false) AS held
    FROM v LEFT JOIN b ON b.id = v.batch
),
ended AS (
    INSERT INTO tierq_batch_ends (batch, places, moved)
    SELECT batch, array_agg(place ORDER BY place), false FROM m WHERE held GROUP BY batch
),
-- (the members not ended, by id: the batch's key with the place written in, as
-- tierq.core.batch_ids; and the rows' tasks, plain)
others AS MATERIALIZED (
    SELECT m.n, m.tenant,
           overlay(m.batch::text PLACING lpad(to_hex(m.place), 3, '0') FROM 30 FOR 3)::uuid
               AS id,
           ('x' || encode(substring(p_members FROM 10 * m.n + 7 FOR 4), 'hex'))::bit(32)::int
               AS attempt
    FROM m WHERE NOT m.held
),
plain AS (
    SELECT r.id, p_tenants[get_byte(p_rows, 6 * (r.k - 1)::int) * 256
                           + get_byte(p_rows, 6 * (r.k - 1)::int + 1) + 1] AS tenant,
           ('x' || encode(substring(p_rows FROM 6 * (r.k - 1)::int + 3 FOR 4), 'hex'))
               ::bit(32)::int AS attempt
    FROM unnest(p_row_ids) WITH ORDINALITY AS r(id, k)
),
gone AS MATERIALIZED (
    SELECT id, tenant, attempt FROM others UNION ALL SELECT id, tenant, attempt FROM plain
),
deleted AS (
    DELETE FROM tierq_tasks t USING gone o
    WHERE t.id = ANY(ARRAY(SELECT id FROM gone)) AND t.id = o.id
      AND t.queue = p_queue AND t.tenant = o.tenant
      AND (t.state = 'warm') IS TRUE AND t.attempts < o.attempt AND t.waiters = 0
    RETURNING t.id, t.grp
)
SELECT id::text, grp, NULL::integer[] FROM deleted
UNION ALL SELECT NULL, NULL, ARRAY(SELECT n::integer FROM others ORDER BY n);
END
$$;

-- (EXECUTE for the application's group too, as migration 0029 grants its functions')
DO $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION tierq_end_batch_members_v2(text, uuid[], '
                   'text[], bytea, uuid[], bytea) TO %I', tierq_app_group());
END
$$;
