-- Named queries of a queue's view (tierq.logic.queues.queue_view): its totals are read as
-- aggregates of the queue, not pair by pair, so a queue with hundreds of thousands of
-- tenants answers at the cost of its work, not of every tenant it ever had.

-- name: queue_view_state_totals
-- The cold, delayed and dead tasks of one queue (every tenant), one partial index each.
SELECT (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'cold') AS cold,
       (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'delayed')
           AS delayed,
       (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'dead') AS dead;

-- name: queue_view_ready_tenants
-- The tenants of one queue with ready work (cold rows, or warm rows: ready in Valkey or
-- leased), with their cold count: the only pairs whose warm tier can add to the totals or
-- put the queue in cold mode. Reads the queue's cold and warm rows, not its idle tenants.
SELECT tenant, count(*) FILTER (WHERE state = 'cold') AS cold
FROM tierq_tasks
WHERE queue = %(queue)s AND state IN ('cold', 'warm')
GROUP BY tenant
ORDER BY tenant;

-- name: queue_view_tenant_count
SELECT count(*) AS n FROM tierq_queue_tenants WHERE queue = %(queue)s;
