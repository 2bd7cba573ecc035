-- tierq schema, version 22: a task's progress (issue 32).
--
-- A heartbeat may carry a task's progress (any JSON, at most 4 KiB), which Valkey keeps with
-- the lease; when the attempt ends (an ack that keeps the task, a nack, an expiry, a
-- dead letter) the last progress is written here with when it came, so the task's view
-- shows how far its last attempt got. NULL: none came.

ALTER TABLE tierq_tasks ADD COLUMN progress jsonb;
ALTER TABLE tierq_tasks ADD COLUMN progress_at timestamptz;
