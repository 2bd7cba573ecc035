-- Shards (tierq.logic.homes): the pairs' homes, copied on every shard, and each shard's
-- identity.

-- name: home_get
-- The pair's home as this shard knows it, and the shard it is moving to (NULL: none).
SELECT shard, moving_to
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
SELECT queue, tenant, shard, moving_to
FROM tierq_pair_homes
WHERE (queue, tenant) > (%(queue)s, %(tenant)s)
ORDER BY queue, tenant
LIMIT %(limit)s;

-- name: homes_copy
-- Record the given homes (JSON array of [queue, tenant, shard, moving_to]) where none is
-- recorded.
INSERT INTO tierq_pair_homes (queue, tenant, shard, moving_to, moving_since)
SELECT h ->> 0, h ->> 1, h ->> 2, h ->> 3, CASE WHEN h ->> 3 IS NOT NULL THEN now() END
FROM jsonb_array_elements(%(homes)s::jsonb) AS h
ON CONFLICT (queue, tenant) DO NOTHING;

-- name: home_close
-- Start moving a pair off its home `shard` to `moving_to` (tierq.logic.pair_moves): this
-- copy of its home says so (a copy this shard missed is written). Returns the home and
-- move now recorded: another home or another move than asked means the caller's view is
-- stale.
INSERT INTO tierq_pair_homes AS h (queue, tenant, shard, moving_to, moving_since)
VALUES (%(queue)s, %(tenant)s, %(shard)s, %(moving_to)s, now())
ON CONFLICT (queue, tenant) DO UPDATE
SET moving_to = CASE WHEN h.shard = excluded.shard AND h.moving_to IS NULL
                     THEN excluded.moving_to ELSE h.moving_to END,
    moving_since = CASE WHEN h.shard = excluded.shard AND h.moving_to IS NULL
                        THEN excluded.moving_since ELSE h.moving_since END
RETURNING h.shard, h.moving_to;

-- name: home_reopen
-- Give up a move that has not switched yet: the pair stays on `shard`, open for new work.
UPDATE tierq_pair_homes
SET moving_to = NULL, moving_since = NULL
WHERE queue = %(queue)s AND tenant = %(tenant)s AND shard = %(shard)s
  AND moving_to = %(moving_to)s;

-- name: home_switch
-- A moved pair's home is now `moving_to`, still closed to new work (home_open opens it):
-- written on the old home by pair_switch_drained, then on every other shard's copy that
-- records the move (a missing copy is written). Any other copy is left as it is and
-- returned (the caller checks it).
INSERT INTO tierq_pair_homes AS h (queue, tenant, shard, moving_to, moving_since)
VALUES (%(queue)s, %(tenant)s, %(moving_to)s, %(moving_to)s, now())
ON CONFLICT (queue, tenant) DO UPDATE
SET shard = excluded.shard, moving_to = excluded.moving_to,
    moving_since = excluded.moving_since
WHERE h.moving_to = %(moving_to)s
RETURNING h.shard, h.moving_to;

-- name: home_open
-- The last step of a move: the pair's new home takes new work.
UPDATE tierq_pair_homes
SET moving_to = NULL, moving_since = NULL
WHERE queue = %(queue)s AND tenant = %(tenant)s AND shard = %(shard)s
  AND moving_to = %(shard)s;

-- name: pair_left_on_shard
-- What of a pair is still on this shard that a move must wait for: its unfinished tasks
-- by state (leased ones are 'warm', as are its members in batch rows), its dead letters
-- and its schedules (whose occurrences are tasks). Finished tasks stay behind: their ids
-- name this shard, and the purge removes them in time. One count per state, each on that
-- state's partial index by pair; tasks held in their groups (logic/groups.py) count as
-- cold: they are worked off after the active ones.
SELECT (SELECT count(*) FROM tierq_tasks WHERE state = 'delayed'
        AND queue = %(queue)s AND tenant = %(tenant)s) AS delayed,
       (SELECT count(*) FROM tierq_tasks WHERE state = 'cold'
        AND queue = %(queue)s AND tenant = %(tenant)s)
       + (SELECT count(*) FROM tierq_tasks WHERE state = 'held'
          AND queue = %(queue)s AND tenant = %(tenant)s) AS cold,
       (SELECT count(*) FROM tierq_tasks WHERE state = 'warm'
        AND queue = %(queue)s AND tenant = %(tenant)s)
       + (SELECT count(*)  -- (its members in batch rows without an end: migration 0030)
          FROM tierq_batch_pairs p JOIN tierq_batches b ON b.id = p.batch,
               generate_series(0, b.tasks - 1) AS place
          WHERE p.queue = %(queue)s AND p.tenant = %(tenant)s
            AND tierq_batch_tenant(b.tenant_names, b.tenant_of, place) = %(tenant)s
            AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                            WHERE e.batch = b.id AND place = ANY(e.places))) AS warm,
       (SELECT count(*) FROM tierq_tasks WHERE state = 'dead'
        AND queue = %(queue)s AND tenant = %(tenant)s) AS dead,
       (SELECT count(*) FROM tierq_schedules
        WHERE queue = %(queue)s AND tenant = %(tenant)s) AS schedules,
       (SELECT max(run_at) FROM tierq_tasks WHERE state = 'delayed'
        AND queue = %(queue)s AND tenant = %(tenant)s) AS delayed_until;

-- name: home_lock
-- The pair's home record on this shard, locked for a move's switch: a transaction writing
-- rows of the pair here holds it shared until it commits (homes_not_here), so the switch
-- counts its rows, and one after the switch finds the pair moved.
SELECT shard, moving_to FROM tierq_pair_homes
WHERE queue = %(queue)s AND tenant = %(tenant)s
FOR UPDATE;

-- name: homes_not_here
-- In a sharded deployment's transaction that writes new rows of pairs on this shard (an
-- enqueue's insert, a bulk chunk, a registration): the pairs' home records, held until it
-- commits (a move's switch, home_lock, waits for it), and those of them that live
-- elsewhere now or are being moved (then the caller writes nothing). KEY SHARE: the
-- weakest lock home_lock's FOR UPDATE waits for; a move's close (an UPDATE of other
-- columns) does not wait.
SELECT h.tenant, h.shard, h.moving_to, (h.shard <> i.name OR h.moving_to IS NOT NULL)
FROM tierq_pair_homes h CROSS JOIN tierq_shard_identity i
WHERE h.queue = %(queue)s AND h.tenant = ANY(%(tenants)s::text[])
FOR KEY SHARE OF h;

-- name: pair_registry_lock
-- The pair's registration, locked: a registration racing with a move's switch waits for
-- it (and then finds the pair gone from this shard).
SELECT 1 FROM tierq_queue_tenants
WHERE queue = %(queue)s AND tenant = %(tenant)s
FOR UPDATE;

-- name: pair_registry_drop
DELETE FROM tierq_queue_tenants
WHERE queue = %(queue)s AND tenant = %(tenant)s;

-- name: pair_batch_pairs_drop
-- A drained pair's rows of tierq_batch_pairs on its old home, at its switch (migration
-- 0030): none of its members is left here, but the batch rows that held them live until
-- the sweep (as long as another tenant's members in them do), and the walks of the gauges
-- and of the queue views would count here the warm tasks of its new home too (the pair's
-- Valkey keys are one for every shard).
DELETE FROM tierq_batch_pairs
WHERE queue = %(queue)s AND tenant = %(tenant)s;

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
SELECT r.queue, r.tenant, h.shard, h.moving_to
FROM tierq_queue_tenants AS r
JOIN tierq_pair_homes AS h USING (queue, tenant)
WHERE h.shard <> %(shard)s
ORDER BY r.queue, r.tenant
LIMIT 100;

-- name: schema_version
-- The newest migration this database has applied (a shard behind the code's is not used).
SELECT max(version)
FROM tierq_schema_migrations;
