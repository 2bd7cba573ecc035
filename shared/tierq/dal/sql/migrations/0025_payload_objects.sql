-- tierq schema, version 25: big payloads kept in the payload bucket (logic/payloads.py).
--
-- tierq_payload_keys: one row per object key this shard handed out (an upload's presign),
-- with its tenant and state: 'pending' (uploaded, no task named it yet), 'used' (a task
-- named it) or 'deleted' (a tombstone: the reaper deleted the object, and an enqueue that
-- names it is refused). An enqueue updates its keys' rows in its own transaction, and the
-- reaper locks a row before it checks and marks it deleted, so neither misses the other.
CREATE TABLE tierq_payload_keys (
    object_key text        PRIMARY KEY,
    tenant     text        NOT NULL,
    state      text        NOT NULL DEFAULT 'pending'
                           CHECK (state IN ('pending', 'used', 'deleted')),
    created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);
-- a tenant's pending uploads (their cap) and the sweep of the old ones
CREATE INDEX tierq_payload_keys_pending ON tierq_payload_keys (tenant, created_at)
    WHERE state = 'pending';

-- One row per (object, task) that an enqueue made with a pointer to that object as its
-- payload, written in the enqueue's transaction. The reaper deletes an object once no task
-- that named it has a row left (acked without a result, deleted, or purged when its
-- retention ended), or a pending one no task named after a grace, then its rows.
CREATE TABLE tierq_payload_objects (
    object_key text        NOT NULL,
    task_id    uuid        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (object_key, task_id)
);
