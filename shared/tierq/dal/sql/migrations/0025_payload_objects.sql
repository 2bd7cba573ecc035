-- tierq schema, version 25: big payloads kept in the payload bucket (logic/payloads.py).
--
-- One row per (object, task) that an enqueue made with a pointer to that object as its
-- payload, written after the enqueue commits. The reaper deletes an object once no task
-- that named it has a row left (acked without a result, deleted, or purged when its
-- retention ended), then its rows. An object no row names (uploaded but never enqueued, or
-- its row lost in a crash after the enqueue) is left to the bucket's lifecycle rule.
CREATE TABLE tierq_payload_objects (
    object_key text        NOT NULL,
    task_id    uuid        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (object_key, task_id)
);
