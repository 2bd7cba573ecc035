-- tierq schema, version 18: flows, tasks that wait for other tasks (docs/architecture.md §2).
--
-- A task enqueued with `after` is `waiting` until each of its parents is finished. Its edges
-- (tierq_task_edges, one per parent) and its count of parents not finished yet
-- (tierq_task_waits.pending) are written in the transaction that inserts it; the statement
-- that finishes a parent (ack, nack or expiry to dead, cancel) settles that parent's edges
-- in its own transaction, and the transaction that brings a child's count to zero releases
-- it. The count is a row of its own: concurrent settlements of one child take its row lock
-- in turn, so exactly one of them sees zero.
--
-- `waiters` on a parent counts its edges: a row with waiters is never deleted by an ack
-- (it is kept as done, its result too, until its children are released), and enqueueing a
-- child updates the parent's row, so an ack that meets the new edge re-reads the row and
-- sees it (a NOT EXISTS over the edges would not: EvalPlanQual re-checks the row only).
-- `parents` is what a released child's claims hand out (logic/flows.py): it rides in the
-- task's warm data, since a claim does not read PostgreSQL.

ALTER TABLE tierq_tasks DROP CONSTRAINT tierq_tasks_state_check;
ALTER TABLE tierq_tasks ADD CONSTRAINT tierq_tasks_state_check
    CHECK (state IN ('waiting', 'delayed', 'cold', 'warm', 'dead', 'done'));
ALTER TABLE tierq_tasks
    ADD COLUMN waiters integer NOT NULL DEFAULT 0 CHECK (waiters >= 0),
    ADD COLUMN parents jsonb;

-- One row per task that waits (or was dead-lettered for a parent that failed, so that
-- replaying that parent re-arms it).
CREATE TABLE tierq_task_waits (
    child             uuid        PRIMARY KEY,
    pending           integer     NOT NULL CHECK (pending >= 0),  -- parents not finished
    on_parent_failure text        NOT NULL CHECK (on_parent_failure IN ('dead', 'run')),
    wait_until        timestamptz,  -- past it, dead-lettered as waited_too_long
    failed_parent     uuid          -- a parent that ended dead or cancelled
);
CREATE INDEX tierq_task_waits_until ON tierq_task_waits (wait_until)
    WHERE wait_until IS NOT NULL AND failed_parent IS NULL;

-- parent -> child; parent_state is NULL until the parent is finished.
CREATE TABLE tierq_task_edges (
    parent       uuid NOT NULL,
    child        uuid NOT NULL,
    parent_queue text NOT NULL,
    position     smallint NOT NULL,  -- the parent's index in the child's `after`
    parent_state text CHECK (parent_state IN ('done', 'dead', 'cancelled')),
    PRIMARY KEY (parent, child)
);
CREATE INDEX tierq_task_edges_child ON tierq_task_edges (child);
