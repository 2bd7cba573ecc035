-- Waiting tasks (flows, migration 0018) counted per (queue, tenant) as the other states are:
-- the queue metrics, a queue's view and the dashboard read the count of each pair's
-- waiting tasks by this partial index (engine.sql pair_state_counts, queue_views.sql
-- queue_view_state_totals), never by a scan of the table.
CREATE INDEX tierq_tasks_waiting_pair ON tierq_tasks (queue, tenant) WHERE state = 'waiting';
