-- tierq schema, version 8: the warm tier is bounded in bytes too.
--
-- warm_max_bytes: the bytes of task data a (queue, tenant)'s warm set may hold (NULL: the
-- deployment default, TIERQ_WARM_MAX_BYTES). Past it, tasks wait cold as past warm_max.
ALTER TABLE tierq_queues
    ADD COLUMN IF NOT EXISTS warm_max_bytes bigint
        CHECK (warm_max_bytes BETWEEN 1024 AND 1099511627776);
