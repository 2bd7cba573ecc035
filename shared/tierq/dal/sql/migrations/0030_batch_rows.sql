-- tierq schema, version 30: batch rows, the tasks of one enqueued batch in one row.
--
-- Design D of docs/design-rotating-tables.md: the keyless tasks of a batch admitted warm,
-- whose tasks have no group, parents or trace, are one row of tierq_batches instead of a
-- row per task, and an ack of these members appends one row of their places to
-- tierq_batch_ends instead of deleting a row per task. A member's id names its batch row and its place
-- (tierq.core.batch_ids), so neither needs a look-up by task.
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

-- (EXECUTE for the application's group too, as migration 0029 grants its functions')
DO $$
BEGIN
    EXECUTE format(
        'GRANT EXECUTE ON FUNCTION tierq_batch_tenant(text[], bytea, integer) TO %I',
        tierq_app_group());
    EXECUTE format(
        'GRANT EXECUTE ON FUNCTION tierq_batch_seq(bigint, smallint[], integer) TO %I',
        tierq_app_group());
END
$$;
