-- Shards (tierq.logic.homes): the pairs' homes, copied on every shard, and each shard's
-- identity.

-- name: home_get
SELECT shard
FROM tierq_pair_homes
WHERE queue = %(queue)s AND tenant = %(tenant)s;

-- name: home_record
-- Record a pair's home unless one is recorded; the home now recorded (the first writer's).
-- (DO UPDATE to itself, not DO NOTHING: it waits for a racing insert and returns its row,
-- which a SELECT in the same statement could not see.)
INSERT INTO tierq_pair_homes AS h (queue, tenant, shard)
VALUES (%(queue)s, %(tenant)s, %(shard)s)
ON CONFLICT (queue, tenant) DO UPDATE SET shard = h.shard
RETURNING h.shard;

-- name: home_forget
-- Forget a pair's home as this shard knows it (only that home: a pair born again elsewhere
-- in between keeps its new one).
DELETE FROM tierq_pair_homes
WHERE queue = %(queue)s AND tenant = %(tenant)s AND shard = %(shard)s;

-- name: homes_page
-- Homes after (queue, tenant) in key order: copying them into a new shard.
SELECT queue, tenant, shard
FROM tierq_pair_homes
WHERE (queue, tenant) > (%(queue)s, %(tenant)s)
ORDER BY queue, tenant
LIMIT %(limit)s;

-- name: homes_copy
-- Record the given homes (JSON array of [queue, tenant, shard]) where none is recorded.
INSERT INTO tierq_pair_homes (queue, tenant, shard)
SELECT h ->> 0, h ->> 1, h ->> 2
FROM jsonb_array_elements(%(homes)s::jsonb) AS h
ON CONFLICT (queue, tenant) DO NOTHING;

-- name: home_birth_within_cap
-- A new pair's home, on the default shard (the arbiter of births) after lock_tenant_quota in
-- its transaction: recorded while the tenant has fewer than `cap` homes (cap 0: no cap),
-- which counts its queues on every shard at once (one answer whatever the pair's home). The
-- home now recorded (an earlier record's, whatever the cap); none when over the cap.
INSERT INTO tierq_pair_homes AS h (queue, tenant, shard)
SELECT %(queue)s, %(tenant)s, %(shard)s
WHERE %(cap)s <= 0
   OR EXISTS (SELECT 1 FROM tierq_pair_homes e
              WHERE e.queue = %(queue)s AND e.tenant = %(tenant)s)
   OR (SELECT count(*) FROM tierq_pair_homes c WHERE c.tenant = %(tenant)s) < %(cap)s
ON CONFLICT (queue, tenant) DO UPDATE SET shard = h.shard
RETURNING h.shard;

-- name: shard_identity
SELECT name, homes_complete
FROM tierq_shard_identity;

-- name: shard_identity_claim
-- Name this database (once); the name it has.
INSERT INTO tierq_shard_identity AS i (name) VALUES (%(name)s)
ON CONFLICT (singleton) DO UPDATE SET name = i.name
RETURNING i.name;

-- name: shard_homes_complete
UPDATE tierq_shard_identity
SET homes_complete = COALESCE(homes_complete, now());

-- name: homes_adopt_registry
-- Record this shard as the home of every pair registered here without a recorded home (a
-- deployment that had one shard becoming sharded: its pairs had no home records).
INSERT INTO tierq_pair_homes (queue, tenant, shard)
SELECT queue, tenant, %(shard)s
FROM tierq_queue_tenants
ON CONFLICT (queue, tenant) DO NOTHING;

-- name: homes_elsewhere_registered
-- Pairs registered on this shard whose recorded home is another shard (should be none).
SELECT r.queue, r.tenant, h.shard
FROM tierq_queue_tenants AS r
JOIN tierq_pair_homes AS h USING (queue, tenant)
WHERE h.shard <> %(shard)s
ORDER BY r.queue, r.tenant
LIMIT 100;

-- name: schema_version
-- The newest migration this database has applied (a shard behind the code's is not used).
SELECT max(version)
FROM tierq_schema_migrations;
