-- Named queries of push delivery (tierq.logic.dispatch): the queues the dispatcher serves.

-- name: consumer_queues
-- The queues that name a consumer function, by name. tierq_queues holds one row per queue
-- with settings, so this reads the queues configured, not the tasks.
SELECT queue FROM tierq_queues WHERE consumer IS NOT NULL ORDER BY queue;
