-- tierq schema, version 12: shards (tierq.dal.shards, tierq.logic.homes).
--
-- Every shard keeps a copy of every pair's home: which shard stores the tasks of a
-- (queue, tenant). A pair is born on its home shard first and then recorded on every other
-- shard, so the home of an existing pair can be read on any shard that answers: no single
-- shard's loss hides every pair's home. A single-shard deployment writes nothing here.
CREATE TABLE IF NOT EXISTS tierq_pair_homes (
    queue   text        NOT NULL,
    tenant  text        NOT NULL,
    shard   text        NOT NULL,
    born_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant)
);

-- The per-tenant cap on distinct queues counts a tenant's homes (one answer on any shard).
CREATE INDEX IF NOT EXISTS tierq_pair_homes_by_tenant ON tierq_pair_homes (tenant, queue);

-- Which shard this database is (a shard refuses to serve under another name: two names on
-- one database would give pairs two homes), and since when its copy of the homes is
-- complete (a shard added to a running deployment is copied into first; until then a pair
-- it does not know may still live elsewhere).
CREATE TABLE IF NOT EXISTS tierq_shard_identity (
    singleton      boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    name           text        NOT NULL,
    homes_complete timestamptz
);
