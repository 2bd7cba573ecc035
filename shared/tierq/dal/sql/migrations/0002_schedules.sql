-- tierq schema, version 2: cron schedules (seed 001's CronService).
--
-- A schedule installs its next occurrences as ordinary keyed delayed tasks in tierq_tasks,
-- key '<name>/<config_hash>/<epoch_ms>'. The occurrence ledger remembers which task belongs
-- to which schedule and config hash, so a config change or a removal finds the schedule's
-- pending occurrences by task id, without scanning the keys of a busy queue.

CREATE TABLE tierq_schedules (
    name                 text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    queue                text        NOT NULL,
    tenant               text        NOT NULL DEFAULT '_',
    payload              jsonb       NOT NULL,
    priority             smallint    NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9),
    -- exactly one way of saying when:
    cron                 text,                     -- 5 fields, or 6 with seconds first
    every_ms             bigint      CHECK (every_ms >= 1000),
    daily_times          text[],                   -- local 'HH:MM' / 'HH:MM:SS', sorted
    timezone             text        NOT NULL DEFAULT 'UTC',  -- IANA name (cron and daily)
    horizon              integer     NOT NULL DEFAULT 4 CHECK (horizon BETWEEN 1 AND 1000),
    enabled              boolean     NOT NULL DEFAULT true,
    -- hash of everything that decides the occurrences (when, where, what)
    config_hash          text        NOT NULL,
    -- how far the occurrences of installed_hash are installed: a tick installs only later
    -- ones, so an occurrence that already ran (and left the table) is never installed again
    installed_hash       text,
    installed_through_ms bigint,
    last_tick_at         timestamptz,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    CHECK (num_nonnulls(cron, every_ms, daily_times) = 1)
);

-- One row per installed occurrence while its task is live (pruned by the ticks once the
-- task is acked, dead-lettered or removed). Rows of a removed schedule stay until their
-- tasks are gone, so a tick can still withdraw an occurrence that was locked at removal.
CREATE TABLE tierq_schedule_occurrences (
    schedule    text   NOT NULL,
    config_hash text   NOT NULL,
    fire_at_ms  bigint NOT NULL,
    task_id     uuid   NOT NULL,
    queue       text   NOT NULL,
    tenant      text   NOT NULL,
    PRIMARY KEY (schedule, fire_at_ms, config_hash)
);
