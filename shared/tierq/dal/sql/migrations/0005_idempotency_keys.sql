-- tierq schema, version 5: idempotency keys of the requests whose repetition would create a
-- second task (enqueues, dead-letter replays).
--
-- A row is written by the request that first uses a key: as "in progress" when it starts
-- (owner set, lease_until a short deadline), then completed in the same transaction that
-- writes the tasks, so a crash between that commit and the response cannot duplicate them.
-- A request that commits in several transactions (a batch whose keys met live tasks, a
-- replay of every dead letter) keeps what it committed so far in response with done false:
-- a retry after its owner died resumes from there instead of starting again.

CREATE TABLE tierq_idempotency (
    scope_key   bytea       PRIMARY KEY,  -- sha256 of (caller, route, queue, Idempotency-Key)
    fingerprint bytea       NOT NULL,     -- sha256 of the request body in canonical JSON
    owner       uuid        NOT NULL,     -- the request working on it (or that finished it)
    done        boolean     NOT NULL DEFAULT false,
    status      smallint,                 -- HTTP status of the kept response (2xx only)
    response    text,                     -- the kept response (JSON, as sent), or what was
                                          -- committed so far
    created_at  timestamptz NOT NULL,
    lease_until timestamptz NOT NULL,     -- an owner silent past this is presumed dead
    expires_at  timestamptz NOT NULL      -- forgotten (and purged by the reaper) after this
);

CREATE INDEX tierq_idempotency_expiry ON tierq_idempotency (expires_at);
