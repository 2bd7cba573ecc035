"""The bulk feeder behind ``spark_glue/jobs/feed_queue.py``: reads slow sources in large
batches and feeds a tierq queue with back pressure, dedup by key and a source strategy."""
