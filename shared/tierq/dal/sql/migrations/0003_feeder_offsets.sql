-- tierq schema, version 3: where each bulk feed (spark_glue/jobs/feed_queue.py) stopped.
--
-- One row per (feed, source, part). A part is one input file of a file source (its full
-- path as Spark reports it), or '' for a JDBC source. The next run of the feed skips what
-- is recorded here, so it goes on where the previous run stopped: skipping nothing and
-- repeating nothing. Glue job bookmarks, when enabled, only save reading; this table is
-- the source of truth both under Glue and under plain local PySpark.

CREATE TABLE tierq_feeder_offsets (
    feed       text        NOT NULL,     -- the feed's name (defaults to the queue's)
    source     text        NOT NULL,     -- the source's name in the job arguments
    part       text        NOT NULL,     -- file path, or '' for a JDBC source
    rows_done  bigint      NOT NULL DEFAULT 0 CHECK (rows_done >= 0),
                                         -- file: rows consumed, in file order
                                         -- JDBC: rows consumed so far (informational)
    last_value text,                     -- JDBC: order-column value of the last row consumed
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (feed, source, part)
);
