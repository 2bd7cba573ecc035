-- Big payloads' objects (migration 0025, logic/payloads.py).

-- name: payload_keys_add
-- An upload's key, pending until a task names it.
INSERT INTO tierq_payload_keys (object_key, tenant, state, created_at)
VALUES (%(key)s, %(tenant)s, 'pending', %(now)s);

-- name: payload_keys_pending
-- A tenant's pending uploads made since the cutoff (older ones are the sweep's).
SELECT count(*) FROM tierq_payload_keys
WHERE tenant = %(tenant)s AND state = 'pending' AND created_at >= %(since)s;

-- name: payload_keys_use
-- Lock the keys an enqueue's tasks name until it commits (payload_keys_mark_used then marks
-- them used): each (key, tenant) given, the tenant of a task that names the key, with the
-- key's state before. A key this shard never handed out is absent, and so is a key handed
-- out to another tenant than the task's.
SELECT k.object_key, k.tenant, k.state FROM tierq_payload_keys k
JOIN unnest(%(keys)s::text[], %(tenants)s::text[]) AS v(object_key, tenant)
  ON k.object_key = v.object_key AND k.tenant = v.tenant
WHERE k.object_key = ANY(%(keys)s::text[])
FOR UPDATE OF k;

-- name: payload_keys_mark_used
-- The keys payload_keys_use locked (pending ones become used).
UPDATE tierq_payload_keys SET state = 'used'
WHERE object_key = ANY(%(keys)s::text[]) AND state = 'pending';

-- name: payload_objects_register
-- The objects an enqueue's tasks point at; a pair already known is left as it is.
INSERT INTO tierq_payload_objects (object_key, task_id, created_at)
SELECT v.object_key, v.task_id, %(now)s
FROM unnest(%(keys)s::text[], %(ids)s::uuid[]) AS v(object_key, task_id)
ON CONFLICT DO NOTHING;

-- name: payload_keys_after
-- One slice of live keys (not deleted) after the cursor, in key order.
SELECT object_key FROM tierq_payload_keys
WHERE object_key > %(after)s AND state <> 'deleted'
ORDER BY object_key
LIMIT %(limit)s;

-- name: payload_tombstones_forget
-- Forget up to `limit` tombstones made before the cutoff, oldest first (migration 0027's
-- index): a key unknown is refused as a deleted one is, so a tombstone only has to
-- outlive the enqueues that may still name its key. Rows an enqueue holds are skipped.
DELETE FROM tierq_payload_keys
WHERE object_key = ANY(ARRAY(SELECT object_key FROM tierq_payload_keys
                             WHERE state = 'deleted' AND deleted_at < %(before)s
                             ORDER BY deleted_at
                             LIMIT %(limit)s
                             FOR UPDATE SKIP LOCKED))
  AND state = 'deleted';

-- name: payload_keys_lock
-- Lock these live keys against enqueues for the sweep's check (rows an enqueue holds are
-- skipped: they are in use).
SELECT object_key FROM tierq_payload_keys
WHERE object_key = ANY(%(keys)s::text[]) AND state <> 'deleted'
ORDER BY object_key
FOR UPDATE SKIP LOCKED;

-- name: payload_keys_mark_deleted
-- Of the locked keys, tombstone those no task needs: used and no task that named it has a
-- row left, or pending since before the grace's cutoff and named by no task. Run in the
-- transaction that locked them, as a statement of its own (it sees every enqueue that
-- committed before the lock).
UPDATE tierq_payload_keys k SET state = 'deleted', deleted_at = %(now)s
WHERE k.object_key = ANY(%(keys)s::text[])
  AND (k.state = 'used' OR k.created_at < %(pending_before)s)
  AND NOT EXISTS (SELECT 1 FROM tierq_payload_objects o JOIN tierq_tasks t ON t.id = o.task_id
                  WHERE o.object_key = k.object_key)
RETURNING k.object_key;

-- name: payload_keys_restore
-- Objects the store did not delete: live again (tried on the next round).
UPDATE tierq_payload_keys k
SET state = CASE WHEN EXISTS (SELECT 1 FROM tierq_payload_objects o
                              WHERE o.object_key = k.object_key)
                 THEN 'used' ELSE 'pending' END,
    deleted_at = NULL
WHERE k.object_key = ANY(%(keys)s::text[]) AND k.state = 'deleted';

-- name: payload_objects_forget
-- Forget deleted objects' (object, task) rows (their tasks have none left).
DELETE FROM tierq_payload_objects o
WHERE o.object_key = ANY(%(keys)s::text[])
  AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.id = o.task_id);

-- name: payload_object_of_task
-- Whether the task carries this object and is the tenant's given (a row, or none).
SELECT true FROM tierq_payload_objects o JOIN tierq_tasks t ON t.id = o.task_id
WHERE o.object_key = %(key)s AND o.task_id = %(task_id)s AND t.tenant = %(tenant)s;

-- name: payload_keys_states
-- These keys' states, without a lock (an enqueue's early check).
SELECT object_key, state FROM tierq_payload_keys WHERE object_key = ANY(%(keys)s::text[]);

-- name: payload_bulk_pointers
-- A bulk chunk's staged rows whose payload looks like a pointer (logic/bulk.py), in its
-- transaction: each with whether its task was created.
SELECT s.ord, s.id::text, s.tenant, s.payload::text, t.id IS NOT NULL
FROM tierq_bulk_stage s LEFT JOIN tierq_tasks t ON t.id = s.id
WHERE jsonb_typeof(s.payload) = 'array' AND s.payload->>0 = %(kind)s
ORDER BY s.ord;
