-- tierq schema, version 13: a queue's limits on claims in a table of their own.
--
-- Migration 0011 put them in tierq_queues, whose rows every listing of queues reads: six more
-- columns made the planner's estimate of a never-analyzed tierq_queues (a new deployment's)
-- prefer a sequential scan and a sort to its primary key for a page of queue names. Here
-- they move, with their values, to tierq_queue_limits (one row per queue that has had
-- limits; NULL: no limit). The consumer stays in tierq_queues.
CREATE TABLE tierq_queue_limits (
    queue                  text PRIMARY KEY,
    max_leased             integer CHECK (max_leased BETWEEN 1 AND 1000000),
    rate_per_second        double precision
        CHECK (rate_per_second > 0 AND rate_per_second <= 1000000),
    rate_burst             integer CHECK (rate_burst BETWEEN 1 AND 1000000),
    tenant_max_leased      integer CHECK (tenant_max_leased BETWEEN 1 AND 1000000),
    tenant_rate_per_second double precision
        CHECK (tenant_rate_per_second > 0 AND tenant_rate_per_second <= 1000000),
    tenant_rate_burst      integer CHECK (tenant_rate_burst BETWEEN 1 AND 1000000),
    CONSTRAINT tierq_queue_limits_rate_whole
        CHECK ((rate_per_second IS NULL) = (rate_burst IS NULL)),
    CONSTRAINT tierq_queue_limits_tenant_rate_whole
        CHECK ((tenant_rate_per_second IS NULL) = (tenant_rate_burst IS NULL))
);

INSERT INTO tierq_queue_limits (queue, max_leased, rate_per_second, rate_burst,
                                tenant_max_leased, tenant_rate_per_second, tenant_rate_burst)
SELECT queue, max_leased, rate_per_second, rate_burst, tenant_max_leased,
       tenant_rate_per_second, tenant_rate_burst
FROM tierq_queues
WHERE max_leased IS NOT NULL OR rate_per_second IS NOT NULL
   OR tenant_max_leased IS NOT NULL OR tenant_rate_per_second IS NOT NULL;

ALTER TABLE tierq_queues
    DROP COLUMN max_leased,
    DROP COLUMN rate_per_second,
    DROP COLUMN rate_burst,
    DROP COLUMN tenant_max_leased,
    DROP COLUMN tenant_rate_per_second,
    DROP COLUMN tenant_rate_burst;
