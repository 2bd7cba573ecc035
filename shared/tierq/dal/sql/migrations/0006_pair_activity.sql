-- tierq schema, version 6: maintenance visits only the (queue, tenant) pairs that have work,
-- and pairs idle past a retention period are forgotten.
--
-- Which pairs have work is read from the partial indexes of tierq_tasks (warm rows: ready
-- tasks or leases in Valkey, and rows to reconcile; cold rows: the cold line), by skip
-- scans over their leading (queue, tenant) columns. What the tables cannot tell is kept
-- here: when a pair was last registered or seen busy (last_seen: a pair idle past the
-- retention and without any row is forgotten), and which pairs the cold -> warm mover left
-- in cold mode (cold_mode_since: their cold line may have drained, and they still need one
-- visit to return to warm mode).

ALTER TABLE tierq_queue_tenants
    ADD COLUMN last_seen       timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN cold_mode_since timestamptz;

-- The per-tenant cap on distinct queues counts a tenant's pairs.
CREATE INDEX tierq_queue_tenants_by_tenant ON tierq_queue_tenants (tenant, queue);

-- Pairs the mover must visit although they may have no cold row (few at any time).
CREATE INDEX tierq_queue_tenants_cold_mode ON tierq_queue_tenants (queue, tenant)
    WHERE cold_mode_since IS NOT NULL;

-- Where each sliced maintenance walk stopped: the next pass goes on after it, so no pair
-- starves when a pass runs out of time.
CREATE TABLE tierq_maintenance_cursors (
    walk       text        PRIMARY KEY,
    queue      text        NOT NULL,
    tenant     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
