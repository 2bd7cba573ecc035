-- tierq schema, version 30: batch rows, the tasks of one enqueued batch in one row.
--
-- Design D of docs/design-rotating-tables.md: the keyless tasks of a batch admitted warm,
-- whose tasks have no group, parents or trace, are one row of tierq_batches instead of a
-- row per task, and an ack of these members appends one row of their places to
-- tierq_batch_ends instead of deleting a row per task. A member's id names its batch row
-- and its place (tierq.core.batch_ids), so neither needs a look-up by task.
--
-- A member lives in its batch row until one of two ends, each an appended row of places:
--
-- | end                     | moved | the member afterwards                               |
-- | ----------------------- | ----- | --------------------------------------------------- |
-- | a plain ack             | false | gone, as a task whose row an ack deleted            |
-- | any other transition    | true  | a row of tierq_tasks, as it stood in the batch row  |
--
-- Every transition but a plain ack (a nack, an expiry, a release, a cancel, a result kept,
-- progress written) moves its members out first (move_out_of_batches, sql/queries/
-- batches.sql), then runs on tierq_tasks as it does for any task. A move and an ack of
-- one batch never overlap: each holds the batch's advisory lock (the ack's shared, the
-- move's alone), so a member is moved only if no ack ended it, and an ack of a moved
-- member finds its row. The sweep deletes a batch row once each place has an end, with
-- its ends; it takes the lock alone too, passing over a batch an ack or a move holds.
--
-- A batch row's values are by place, from 0: payloads as a JSON array (sent as the
-- enqueue's statements send it), priorities as smallint[], and tenants as names and a byte
-- per place: the tenant of place p is tenant_names[get_byte(tenant_of, p) + 1], or the
-- only name where tenant_of is NULL (a batch of one tenant; tierq_batch_tenant reads it).
-- A byte read needs no decompression, where an element of a JSON array or of a text[]
-- that PostgreSQL compressed is read by decompressing the whole value, once per member an
-- ack names. Its tasks' seqs are first_seq plus their places, within one block of
-- tierq_task_seq; where the enqueued batch also had keyed tasks (rows of tierq_tasks,
-- written by the same statement in that block), first_seq plus each place's offset in the
-- batch (seq_offsets), so the batch keeps its order (tierq_batch_seq reads it). The sweep
-- deletes it with its ends (a moved member's row lives on).
CREATE TABLE tierq_batches (
    id              uuid        PRIMARY KEY,
    queue           text        NOT NULL,
    tasks           integer     NOT NULL CHECK (tasks BETWEEN 1 AND 512),
    first_seq       bigint      NOT NULL,
    seq_offsets     smallint[],
    tenant_names    text[]      NOT NULL,
    tenant_of       bytea,
    priorities      smallint[]  NOT NULL,
    payloads        jsonb       NOT NULL,
    max_attempts    integer     NOT NULL CHECK (max_attempts >= 1),
    timeout_seconds integer     CHECK (timeout_seconds BETWEEN 1 AND 604800),
    created_at      timestamptz NOT NULL,
    CONSTRAINT tierq_batches_by_place CHECK (
        cardinality(priorities) = tasks AND jsonb_array_length(payloads) = tasks
        AND 0 <= ALL(priorities) AND 9 >= ALL(priorities)
        AND cardinality(tenant_names) BETWEEN 1 AND 256
        AND (tenant_of IS NULL OR length(tenant_of) = tasks)
        AND (seq_offsets IS NULL OR cardinality(seq_offsets) = tasks))
);

-- The pairs each batch row holds tasks of, a row per (batch, tenant), written with the
-- batch and deleted with it: where the reaper's walk finds pairs whose warm tasks are all
-- in batch rows, and where its reconciler finds a pair's batch rows (by key: oldest first).
CREATE TABLE tierq_batch_pairs (
    queue  text NOT NULL,
    tenant text NOT NULL,
    batch  uuid NOT NULL,
    PRIMARY KEY (queue, tenant, batch)
);

-- The ends of a batch's members, appended: a row per (batch, statement), never updated.
CREATE TABLE tierq_batch_ends (
    batch  uuid       NOT NULL,
    places smallint[] NOT NULL,
    moved  boolean    NOT NULL
);
CREATE INDEX tierq_batch_ends_batch ON tierq_batch_ends (batch);
-- the moves alone: what an ack checks, without reading the acks' ends of its batch
CREATE INDEX tierq_batch_ends_moved ON tierq_batch_ends (batch) WHERE moved;

-- The tenant of a batch row's place (NULL past its bytes). A SQL function of one
-- expression, which PostgreSQL inlines into the statement that calls it.
CREATE FUNCTION tierq_batch_tenant(p_names text[], p_tenant_of bytea, p_place integer)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN p_tenant_of IS NULL THEN p_names[1]
            WHEN p_place >= 0 AND p_place < length(p_tenant_of)
            THEN p_names[get_byte(p_tenant_of, p_place) + 1] END
$$;

-- The seq of a batch row's place: its first seq plus the place's offset in the enqueued
-- batch (the place itself where the batch had no keyed tasks). Inlined as the one above.
CREATE FUNCTION tierq_batch_seq(p_first_seq bigint, p_offsets smallint[], p_place integer)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT p_first_seq + coalesce(p_offsets[p_place + 1], p_place)
$$;

-- A plain ack of batch members, in one statement (BatchQueries.end_batch_members): the
-- batches' advisory locks shared, in key order, then (a statement of its own, so it sees
-- every move committed before the locks) the places of the members still in their batch
-- rows (queue and tenant as named) appended, one row per batch, and answered acked; the
-- rows of the others (moved out, or ids whose batch row is gone or never was) deleted as
-- ack_delete_by_attempt deletes them. A member acked before is appended again (the sweep
-- counts a place once: the lease check in Valkey, not this function, lets one ack of an
-- attempt through; a member in its batch row has no attempt recorded in PostgreSQL, as
-- any transition that records one moves it out first). One statement, not a transaction
-- of two: an ack of 10 costs PostgreSQL a statement's parse and commit, as ack_delete
-- does. Returns (id, grp) of those finished.
CREATE FUNCTION tierq_end_batch_members_v1(p_queue text, p_ids uuid[], p_batches uuid[],
                                           p_places integer[], p_tenants text[],
                                           p_attempts integer[])
RETURNS TABLE (id text, grp text)
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
PERFORM count(pg_advisory_xact_lock_shared(hashtextextended(b::text, 30)))
FROM (SELECT DISTINCT b FROM unnest(p_batches) AS b ORDER BY b) AS sorted;
RETURN QUERY
WITH v AS (
    SELECT DISTINCT v.id, v.batch, v.place, v.tenant, v.attempt
    FROM unnest(p_ids::uuid[], p_batches::uuid[], p_places::int[],
                p_tenants::text[], p_attempts::int[])
         AS v(id, batch, place, tenant, attempt)
),
m AS MATERIALIZED (
    SELECT v.id, v.batch, v.place, v.tenant, v.attempt,
           coalesce(b.queue = p_queue AND v.place < b.tasks
                    AND tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
                    AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                                    WHERE e.batch = v.batch AND e.moved
                                      AND v.place = ANY(e.places)), false) AS held
    FROM v LEFT JOIN tierq_batches b ON b.id = v.batch
),
ended AS (
    INSERT INTO tierq_batch_ends (batch, places, moved)
    SELECT batch, array_agg(place ORDER BY place), false FROM m WHERE held GROUP BY batch
),
deleted AS (
    DELETE FROM tierq_tasks t USING m
    WHERE t.id = ANY(ARRAY(SELECT id FROM m WHERE NOT held)) AND t.id = m.id
      AND NOT m.held AND t.queue = p_queue AND t.tenant = m.tenant
      AND (t.state = 'warm') IS TRUE AND t.attempts < m.attempt AND t.waiters = 0
    RETURNING t.id, t.grp
)
SELECT id::text AS id, NULL::text AS grp FROM m WHERE held
UNION ALL SELECT id::text, grp FROM deleted;
END
$$;

-- (EXECUTE for the application's group too, as migration 0029 grants its functions')
DO $$
BEGIN
    EXECUTE format(
        'GRANT EXECUTE ON FUNCTION tierq_batch_tenant(text[], bytea, integer) TO %I',
        tierq_app_group());
    EXECUTE format(
        'GRANT EXECUTE ON FUNCTION tierq_batch_seq(bigint, smallint[], integer) TO %I',
        tierq_app_group());
    EXECUTE format('GRANT EXECUTE ON FUNCTION tierq_end_batch_members_v1(text, uuid[], '
                   'uuid[], integer[], text[], integer[]) TO %I', tierq_app_group());
END
$$;
