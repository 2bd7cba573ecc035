-- Dead letters in the order the DLQ pages them (newest first, the id breaking ties), so a
-- page reads one page of index entries instead of sorting every dead letter it might show:
-- an admin's page by queue (tierq_tasks_dead_by_queue), a tenant's by queue and tenant
-- (tierq_tasks_dead_line, rebuilt with the id as its last column). Retention and the other
-- readers of tierq_tasks_dead_line use its leading columns as before.
CREATE INDEX tierq_tasks_dead_by_queue
    ON tierq_tasks (queue, finished_at DESC, id DESC)
    WHERE state = 'dead';

DROP INDEX tierq_tasks_dead_line;
CREATE INDEX tierq_tasks_dead_line
    ON tierq_tasks (queue, tenant, finished_at DESC, id DESC)
    WHERE state = 'dead';
