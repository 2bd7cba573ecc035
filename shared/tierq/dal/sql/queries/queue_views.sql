-- Named queries of a queue's view (tierq.logic.queues.queue_view): its totals are read as
-- aggregates of the queue, not pair by pair, so a queue with hundreds of thousands of
-- tenants answers at the cost of its work, not of every tenant it ever had.

-- name: queue_view_state_totals
-- The waiting, held, cold, delayed and dead tasks of one queue (every tenant), one partial
-- index each.
SELECT (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'waiting')
           AS waiting,
       (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'held') AS held,
       (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'cold') AS cold,
       (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'delayed')
           AS delayed,
       (SELECT count(*) FROM tierq_tasks WHERE queue = %(queue)s AND state = 'dead') AS dead;

-- name: queue_view_ready_tenants
-- The tenants of one queue with ready work (cold rows, or warm rows or batch rows: ready in
-- Valkey or leased), and whether each has cold rows: the only pairs whose warm tier can add
-- to the totals or put the queue in cold mode. Three skip scans, one index descent per
-- tenant with rows in that state (cold line, warm rows, batch rows' pairs), whatever their
-- rows: the cost follows the tenants with work, never their backlog nor their leases.
WITH RECURSIVE cold AS (
    (SELECT tenant FROM tierq_tasks WHERE queue = %(queue)s AND state = 'cold'
     ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT step.tenant
    FROM cold, LATERAL (
        SELECT t.tenant FROM tierq_tasks t
        WHERE t.queue = %(queue)s AND t.state = 'cold' AND t.tenant > cold.tenant
        ORDER BY t.tenant LIMIT 1) AS step
), warm AS (
    (SELECT tenant FROM tierq_tasks WHERE queue = %(queue)s AND state = 'warm'
     ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT step.tenant
    FROM warm, LATERAL (
        SELECT t.tenant FROM tierq_tasks t
        WHERE t.queue = %(queue)s AND t.state = 'warm' AND t.tenant > warm.tenant
        ORDER BY t.tenant LIMIT 1) AS step
), batched AS (  -- (batch rows' tenants, migration 0030: warm members)
    (SELECT tenant FROM tierq_batch_pairs WHERE queue = %(queue)s ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT step.tenant
    FROM batched, LATERAL (
        SELECT p.tenant FROM tierq_batch_pairs p
        WHERE p.queue = %(queue)s AND p.tenant > batched.tenant
        ORDER BY p.tenant LIMIT 1) AS step
)
SELECT tenant, bool_or(has_cold) AS cold
FROM (SELECT tenant, true AS has_cold FROM cold
      UNION ALL
      SELECT tenant, false AS has_cold FROM warm
      UNION ALL
      SELECT tenant, false AS has_cold FROM batched) AS busy
GROUP BY tenant
ORDER BY tenant;

-- name: queue_view_tenant_count
SELECT count(*) AS n FROM tierq_queue_tenants WHERE queue = %(queue)s;
