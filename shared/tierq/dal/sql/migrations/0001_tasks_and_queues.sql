-- tierq schema, version 1: tasks, per-queue settings, the (queue, tenant) registry.
--
-- Postgres is the system of record for every task that is not finished. Valkey holds only
-- what is needed to dispatch fast (ready sets and leases); see docs in shared/tierq/dal/lua.

CREATE SEQUENCE tierq_task_seq AS bigint;

CREATE TABLE tierq_tasks (
    id               uuid        PRIMARY KEY,           -- UUIDv7, time ordered
    queue            text        NOT NULL,
    tenant           text        NOT NULL DEFAULT '_',
    key              text,                              -- idempotency / dedup key
    priority         smallint    NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9),
    payload          jsonb       NOT NULL,
    state            text        NOT NULL CHECK (state IN ('delayed', 'cold', 'warm', 'dead', 'done')),
    run_at           timestamptz NOT NULL,
    run_at_initially timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,    -- attempts started and finished so far
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    seq              bigint      NOT NULL,              -- place in line; renewed when re-queued
    created_at       timestamptz NOT NULL,
    ready_since      timestamptz,                       -- when it last became ready (oldest age)
    state_since      timestamptz NOT NULL,              -- when it entered its current state
    finished_at      timestamptz,                       -- done or dead
    last_error       text,
    result           jsonb
) WITH (
    -- A hot queue table: leave room for HOT updates and vacuum aggressively (seed 003).
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 2,
    autovacuum_vacuum_cost_limit = 1000
);

-- One live task per (queue, tenant, key). Finished and dead tasks free their key.
CREATE UNIQUE INDEX tierq_tasks_live_key
    ON tierq_tasks (queue, tenant, key)
    WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm');

-- Partial indexes, one per state, each shaped for the query that reads that state.
CREATE INDEX tierq_tasks_cold_line     -- cold -> warm promotion, oldest first
    ON tierq_tasks (queue, tenant, priority DESC, seq) WITH (fillfactor = 70)
    WHERE state = 'cold';
CREATE INDEX tierq_tasks_delayed_due   -- delayed mover: cost proportional to what is due
    ON tierq_tasks (run_at, seq) WITH (fillfactor = 70)
    WHERE state = 'delayed';
CREATE INDEX tierq_tasks_delayed_pair  -- per-queue counts of delayed work
    ON tierq_tasks (queue, tenant) WITH (fillfactor = 70)
    WHERE state = 'delayed';
CREATE INDEX tierq_tasks_warm_since    -- reconciler: warm rows Valkey may have lost
    ON tierq_tasks (queue, tenant, state_since) WITH (fillfactor = 70)
    WHERE state = 'warm';
CREATE INDEX tierq_tasks_dead_line     -- DLQ listing and retention
    ON tierq_tasks (queue, tenant, finished_at)
    WHERE state = 'dead';
CREATE INDEX tierq_tasks_done_since    -- retention of acked tasks kept with a result
    ON tierq_tasks (queue, finished_at)
    WHERE state = 'done';

-- Per-queue settings. NULL means "use the deployment default" (TIERQ_* settings).
CREATE TABLE tierq_queues (
    queue                text        PRIMARY KEY,
    warm_max             integer     CHECK (warm_max >= 1),
    lease_seconds        integer     CHECK (lease_seconds >= 1),
    max_attempts         integer     CHECK (max_attempts >= 1),
    backoff_kind         text        CHECK (backoff_kind IN ('fixed', 'linear', 'exponential')),
    backoff_base_seconds double precision CHECK (backoff_base_seconds >= 0),
    backoff_cap_seconds  double precision CHECK (backoff_cap_seconds >= 0),
    backoff_jitter       double precision CHECK (backoff_jitter BETWEEN 0 AND 1),
    retention_seconds    integer     CHECK (retention_seconds >= 0),
    paused               boolean     NOT NULL DEFAULT false,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- Every (queue, tenant) that has ever had a task: maintenance jobs and fair claims walk it.
CREATE TABLE tierq_queue_tenants (
    queue      text        NOT NULL,
    tenant     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant)
);
