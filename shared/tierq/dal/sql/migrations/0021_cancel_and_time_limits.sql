-- tierq schema, version 21: cancelling a task keeps it, and an attempt may have a time limit.
--
-- POST /v1/queues/{queue}/tasks/{id}/cancel marks a task `cancelled` (finished_at set) where
-- DELETE removes it: the row is kept, like a done or dead one, until its queue's retention
-- ends (engine.sql purge_cancelled_before), so its state reads `cancelled` and a leased
-- task's worker is told so by its next heartbeat or ack (logic/leases.py).
--
-- timeout_seconds: the longest one attempt of the task may run (tasks), or the queue's
-- default for tasks without one (queues); NULL: no limit. A claim caps the lease at the
-- attempt's start plus the limit, no heartbeat extends it past that, and the reaper fails
-- an attempt that reached it (`timeout`, through the nack path: logic/time_limits.py).

ALTER TABLE tierq_tasks DROP CONSTRAINT tierq_tasks_state_check;
ALTER TABLE tierq_tasks ADD CONSTRAINT tierq_tasks_state_check
    CHECK (state IN ('waiting', 'held', 'delayed', 'cold', 'warm', 'dead', 'done',
                     'cancelled'));

-- (NULL: no limit; the bounds are models/tasks.MAX_TIMEOUT_SECONDS')
ALTER TABLE tierq_tasks ADD COLUMN timeout_seconds integer
    CHECK (timeout_seconds BETWEEN 1 AND 604800);
ALTER TABLE tierq_queues ADD COLUMN timeout_seconds integer
    CHECK (timeout_seconds BETWEEN 1 AND 604800);

-- Retention of cancelled tasks, one queue at a time, as tierq_tasks_done_since for done
-- ones; also the probe of the retention walk and of forgetting an idle pair.
CREATE INDEX tierq_tasks_cancelled_since
    ON tierq_tasks (queue, finished_at)
    WHERE state = 'cancelled';
