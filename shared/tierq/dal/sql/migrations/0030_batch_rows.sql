-- tierq schema, version 30: batch rows, the tasks of one enqueued batch in one row.
--
-- Design D of docs/design-rotating-tables.md: a batch admitted warm, whose tasks have no
-- key, group, parents or trace, is one row of tierq_batches instead of a row per task, and
-- an ack of its members appends one row of their places to tierq_batch_ends instead of
-- deleting a row per task. A member's id names its batch row and its place
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
-- its ends; it holds the lock alone too, so no end is appended to a batch it deleted.
--
-- A batch row's arrays are by place, from 0: tenants and payloads as JSON arrays (one
-- value each, sent as the enqueue's statements send them), priorities as smallint[]. Its
-- tasks' seqs are first_seq plus their places, within one block of tierq_task_seq.
CREATE TABLE tierq_batches (
    id              uuid        PRIMARY KEY,
    queue           text        NOT NULL,
    tasks           integer     NOT NULL CHECK (tasks BETWEEN 1 AND 512),
    first_seq       bigint      NOT NULL,
    tenants         jsonb       NOT NULL,
    priorities      smallint[]  NOT NULL,
    payloads        jsonb       NOT NULL,
    max_attempts    integer     NOT NULL CHECK (max_attempts >= 1),
    timeout_seconds integer     CHECK (timeout_seconds BETWEEN 1 AND 604800),
    created_at      timestamptz NOT NULL,
    CONSTRAINT tierq_batches_by_place CHECK (
        cardinality(priorities) = tasks AND jsonb_array_length(tenants) = tasks
        AND jsonb_array_length(payloads) = tasks
        AND 0 <= ALL(priorities) AND 9 >= ALL(priorities))
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
