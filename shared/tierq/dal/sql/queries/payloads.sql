-- Big payloads' objects (migration 0025, logic/payloads.py).

-- name: payload_objects_register
-- The objects an enqueue's tasks point at; a pair already known is left as it is.
INSERT INTO tierq_payload_objects (object_key, task_id, created_at)
SELECT v.object_key, v.task_id, %(now)s
FROM unnest(%(keys)s::text[], %(ids)s::uuid[]) AS v(object_key, task_id)
ON CONFLICT DO NOTHING;

-- name: payload_objects_unused
-- One slice of objects after the cursor (in key order), each with whether no task that
-- named it has a row left.
SELECT o.object_key,
       bool_and(NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.id = o.task_id)) AS unused
FROM tierq_payload_objects o
WHERE o.object_key > %(after)s
GROUP BY o.object_key
ORDER BY o.object_key
LIMIT %(limit)s;

-- name: payload_objects_forget
-- Forget deleted objects: their rows whose task has no row (a task enqueued since with the
-- same pointer keeps its row).
DELETE FROM tierq_payload_objects o
WHERE o.object_key = ANY(%(keys)s::text[])
  AND NOT EXISTS (SELECT 1 FROM tierq_tasks t WHERE t.id = o.task_id);
