-- tierq schema, version 33: a plain ack of batch members whose long runs are checked whole.
--
-- tierq_end_batch_members_v2 (migration 0031) read each member out of ten bytes and
-- checked it alone: its place, the tenant at that place, whether it was moved out. An ack
-- of claims of one tenant names a batch's members in long runs of one tenant and one
-- attempt, so version 3 also takes such a run as a group: its batch, its leases' tenant
-- and attempt (eight bytes of p_groups) and its places (an array literal of p_places, each
-- place once; the caller sends them ascending, as the end row keeps them). A group is
-- checked whole: every place inside the batch row, none moved out, and the batch row's
-- tenant the lease's (once for a batch row of one tenant; else each place's tenant byte
-- against the lease's, the tenant bytes read out of their stored value once per batch).
-- The places of a group that fails it, and the members given alone in p_members (version
-- 2's ten bytes each: the caller sends short runs so, where a group costs more than its
-- members), are checked one by one as version 2 checks them. One end row a batch. Backend
-- CPU a member on one connection (python -m bench.batch_acks; bench/README.md, *The ack's
-- long runs checked whole*): acks of 400 of one tenant from one batch row a third of
-- version 2's; acks over ten tenants, whose runs are short, as version 2's.
--
-- | p_groups bytes (a group) | p_members bytes (a member) | what                           |
-- | ------------------------ | -------------------------- | ------------------------------ |
-- | 0-1                      | 0-1                        | its batch: an index into       |
-- |                          |                            | p_batches, from 0              |
-- |                          | 2-3                        | its place in the batch row     |
-- | 2-3                      | 4-5                        | the tenant of its lease(s): an |
-- |                          |                            | index into p_tenants           |
-- | 4-7                      | 6-9                        | the attempt of its lease(s)    |
--
-- p_row_ids and p_rows are version 2's (a row's task: its tenant index and attempt, six
-- bytes). The answer: a row (id, grp, NULL) per task whose row the ack deleted, then one
-- row (NULL, NULL, the members not ended: a member of p_members as its index from 0, a
-- place of group k as -(k * 4096 + place) - 1, 4096 being the places an id can name). A
-- task is named once (the caller drops repeats). v2 stays, for code that still calls it
-- (migration 0029's rule for versions) and for acks without a long run, which it serves
-- for less than this function's groups cost.
CREATE FUNCTION tierq_end_batch_members_v3(p_queue text, p_batches uuid[], p_tenants text[],
                                           p_groups bytea, p_places text[], p_members bytea,
                                           p_row_ids uuid[], p_rows bytea)
RETURNS TABLE (id text, grp text, unended integer[])
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
IF length(p_groups) <> 8 * coalesce(cardinality(p_places), 0) THEN
    RAISE EXCEPTION 'p_groups has % bytes, not eight per element of p_places',
        length(p_groups);
END IF;
IF length(p_members) % 10 <> 0 THEN
    RAISE EXCEPTION 'p_members has % bytes, not ten per member', length(p_members);
END IF;
IF length(p_rows) <> 6 * coalesce(cardinality(p_row_ids), 0) THEN
    RAISE EXCEPTION 'p_rows has % bytes, not six per id of p_row_ids', length(p_rows);
END IF;
PERFORM count(pg_advisory_xact_lock_shared(hashtextextended(b::text, 30)))
FROM (SELECT DISTINCT b FROM unnest(p_batches) AS b ORDER BY b) AS sorted;
RETURN QUERY
WITH g AS (
    SELECT k,
           p_batches[get_byte(p_groups, 8 * k) * 256 + get_byte(p_groups, 8 * k + 1) + 1]
               AS batch,
           p_tenants[get_byte(p_groups, 8 * k + 2) * 256 + get_byte(p_groups, 8 * k + 3) + 1]
               AS tenant,
           ('x' || encode(substring(p_groups FROM 8 * k + 5 FOR 4), 'hex'))::bit(32)::int
               AS attempt,
           p_places[k + 1]::smallint[] AS places
    FROM generate_series(0, coalesce(cardinality(p_places), 0) - 1) AS k
),
-- (each batch row, its tenant bytes and the places moved out of it, read once)
b AS MATERIALIZED (
    SELECT b.id, b.tasks, b.tenant_names, b.tenant_of || ''::bytea AS tenant_of,
           ARRAY(SELECT p FROM tierq_batch_ends e, unnest(e.places) AS p
                 WHERE e.batch = b.id AND e.moved)::smallint[] AS moved
    FROM tierq_batches b
    WHERE b.id = ANY(p_batches) AND b.queue = p_queue
),
c AS MATERIALIZED (
    SELECT g.k, g.batch, g.tenant, g.attempt, g.places,
           coalesce(CASE WHEN b.id IS NULL THEN false
                         WHEN NOT (cardinality(g.places) > 0 AND 0 <= ALL(g.places)
                                   AND b.tasks > ALL(g.places))
                              OR g.places && b.moved THEN false
                         WHEN b.tenant_of IS NULL THEN b.tenant_names[1] = g.tenant
                         ELSE NOT EXISTS (
                             SELECT 1 FROM unnest(g.places) AS p
                             WHERE get_byte(b.tenant_of, p)
                                   IS DISTINCT FROM array_position(b.tenant_names, g.tenant) - 1)
                    END, false) AS whole
    FROM g LEFT JOIN b ON b.id = g.batch
),
-- (one by one, as version 2 checks a member: the members given alone, their attempts read
-- only if they are not ended, and the places of the groups not held whole)
v AS (
    SELECT n,
           p_batches[get_byte(p_members, 10 * n) * 256
                     + get_byte(p_members, 10 * n + 1) + 1] AS batch,
           get_byte(p_members, 10 * n + 2) * 256 + get_byte(p_members, 10 * n + 3) AS place,
           p_tenants[get_byte(p_members, 10 * n + 4) * 256
                     + get_byte(p_members, 10 * n + 5) + 1] AS tenant,
           NULL::integer AS attempt
    FROM generate_series(0, length(p_members) / 10 - 1) AS n
    UNION ALL
    SELECT -(c.k * 4096 + p) - 1, c.batch, p, c.tenant, c.attempt
    FROM c, unnest(c.places) AS p
    WHERE NOT c.whole
),
m AS MATERIALIZED (
    SELECT v.n, v.batch, v.place, v.tenant, v.attempt,
           coalesce(v.place >= 0 AND v.place < b.tasks
                    AND tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
                    AND NOT v.place = ANY(b.moved), false) AS held
    FROM v LEFT JOIN b ON b.id = v.batch
),
held AS (
    SELECT c.batch, c.places FROM c WHERE c.whole
    UNION ALL
    SELECT m.batch, array_agg(m.place ORDER BY m.place)::smallint[] FROM m WHERE m.held
    GROUP BY m.batch
),
counted AS (
    SELECT held.batch, held.places, count(*) OVER (PARTITION BY held.batch) AS n FROM held
),
ended AS (
    INSERT INTO tierq_batch_ends (batch, places, moved)
    SELECT batch, places, false FROM counted WHERE n = 1
    UNION ALL
    SELECT counted.batch, array_agg(p ORDER BY p), false
    FROM counted, unnest(counted.places) AS p WHERE counted.n > 1 GROUP BY counted.batch
),
-- (the members not ended, by id: the batch's key with the place written in, as
-- tierq.core.batch_ids; and the rows' tasks, plain)
others AS MATERIALIZED (
    SELECT m.n, m.tenant,
           overlay(m.batch::text PLACING lpad(to_hex(m.place), 3, '0') FROM 30 FOR 3)::uuid
               AS id,
           coalesce(m.attempt,
                    ('x' || encode(substring(p_members FROM 10 * m.n + 7 FOR 4), 'hex'))
                        ::bit(32)::int) AS attempt
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
    EXECUTE format('GRANT EXECUTE ON FUNCTION tierq_end_batch_members_v3(text, uuid[], '
                   'text[], bytea, text[], bytea, uuid[], bytea) TO %I', tierq_app_group());
END
$$;
