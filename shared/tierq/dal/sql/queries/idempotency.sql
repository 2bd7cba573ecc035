-- Idempotency keys (tierq.logic.idempotency): records in tierq_idempotency.

-- name: idempotency_claim
-- Take a key for a request: a new record, or one whose time is over (forgotten entirely),
-- or one whose owner went silent past its lease with the same body (taken over, keeping
-- what that owner committed). Returns no row when the key is someone else's to answer.
INSERT INTO tierq_idempotency AS r
    (scope_key, fingerprint, owner, done, created_at, lease_until, expires_at)
VALUES (%(scope_key)s, %(fingerprint)s, %(owner)s, false, %(now)s, %(lease_until)s,
        %(expires_at)s)
ON CONFLICT (scope_key) DO UPDATE
SET owner       = EXCLUDED.owner,
    lease_until = EXCLUDED.lease_until,
    done        = false,
    status      = NULL,
    fingerprint = EXCLUDED.fingerprint,
    response    = CASE WHEN r.expires_at <= EXCLUDED.created_at THEN NULL ELSE r.response END,
    created_at  = CASE WHEN r.expires_at <= EXCLUDED.created_at
                       THEN EXCLUDED.created_at ELSE r.created_at END,
    expires_at  = CASE WHEN r.expires_at <= EXCLUDED.created_at
                       THEN EXCLUDED.expires_at ELSE r.expires_at END
WHERE r.expires_at <= EXCLUDED.created_at
   OR (NOT r.done AND r.lease_until <= EXCLUDED.created_at
       AND r.fingerprint = EXCLUDED.fingerprint)
RETURNING r.response;

-- name: idempotency_get
SELECT fingerprint, done, status, response, lease_until, expires_at
FROM tierq_idempotency
WHERE scope_key = %(scope_key)s;

-- name: idempotency_record
-- Record a response (so far, or final) for the key's owner; in the transaction that writes
-- the tasks. A record lost since the claim is written again; a record another request has
-- taken over returns no row, and the caller rolls back.
INSERT INTO tierq_idempotency AS r
    (scope_key, fingerprint, owner, done, status, response, created_at, lease_until,
     expires_at)
VALUES (%(scope_key)s, %(fingerprint)s, %(owner)s, %(done)s, %(status)s, %(response)s,
        %(now)s, %(lease_until)s, %(expires_at)s)
ON CONFLICT (scope_key) DO UPDATE
SET done        = EXCLUDED.done,
    status      = EXCLUDED.status,
    response    = EXCLUDED.response,
    lease_until = EXCLUDED.lease_until
WHERE r.owner = EXCLUDED.owner
RETURNING 1 AS recorded;

-- name: idempotency_abandon
-- The owner failed: a record under which nothing was committed is forgotten (a retry runs
-- again); one with committed work is left for a retry to resume at once.
WITH forgotten AS (
    DELETE FROM tierq_idempotency
    WHERE scope_key = %(scope_key)s AND owner = %(owner)s AND NOT done AND response IS NULL
    RETURNING 1
)
UPDATE tierq_idempotency
SET lease_until = %(now)s
WHERE scope_key = %(scope_key)s AND owner = %(owner)s AND NOT done
  AND response IS NOT NULL;

-- name: idempotency_purge
WITH picked AS MATERIALIZED (
    SELECT scope_key FROM tierq_idempotency
    WHERE expires_at <= %(before)s
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM tierq_idempotency r
USING picked
WHERE r.scope_key = picked.scope_key;
