-- tierq schema, version 11: limits on claims, and a queue's consumer function.
--
-- max_leased / tenant_max_leased: tasks of the queue (of each of its tenants) leased at once,
-- at most. rate_* / tenant_rate_*: a token bucket on the tasks handed out (per_second tokens
-- a second, at most burst held); both columns of a bucket are set together or both NULL.
-- consumer: {"function", "batch_size", "max_concurrency", "max_batching_window_ms"}, the
-- function the dispatcher calls with the queue's tasks. NULL everywhere: no limit, no consumer.
ALTER TABLE tierq_queues
    ADD COLUMN IF NOT EXISTS max_leased integer
        CHECK (max_leased BETWEEN 1 AND 1000000),
    ADD COLUMN IF NOT EXISTS rate_per_second double precision
        CHECK (rate_per_second > 0 AND rate_per_second <= 1000000),
    ADD COLUMN IF NOT EXISTS rate_burst integer
        CHECK (rate_burst BETWEEN 1 AND 1000000),
    ADD COLUMN IF NOT EXISTS tenant_max_leased integer
        CHECK (tenant_max_leased BETWEEN 1 AND 1000000),
    ADD COLUMN IF NOT EXISTS tenant_rate_per_second double precision
        CHECK (tenant_rate_per_second > 0 AND tenant_rate_per_second <= 1000000),
    ADD COLUMN IF NOT EXISTS tenant_rate_burst integer
        CHECK (tenant_rate_burst BETWEEN 1 AND 1000000),
    ADD COLUMN IF NOT EXISTS consumer jsonb
        CHECK (consumer IS NULL OR (jsonb_typeof(consumer) = 'object'
                                    AND jsonb_typeof(consumer -> 'function') = 'string'));

ALTER TABLE tierq_queues
    ADD CONSTRAINT tierq_queues_rate_whole
        CHECK ((rate_per_second IS NULL) = (rate_burst IS NULL)),
    ADD CONSTRAINT tierq_queues_tenant_rate_whole
        CHECK ((tenant_rate_per_second IS NULL) = (tenant_rate_burst IS NULL));
