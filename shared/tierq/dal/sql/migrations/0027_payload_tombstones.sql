-- tierq schema, version 27: old payload tombstones found by when they were made.
--
-- The reaper removes the rows of keys deleted more than TIERQ_REAPER_PAYLOAD_TOMBSTONE_DAYS
-- ago (logic/payloads.py, sweep), oldest first, a slice at a time: this index gives it the
-- oldest ones without reading the live keys or the younger tombstones.
CREATE INDEX tierq_payload_keys_deleted ON tierq_payload_keys (deleted_at)
    WHERE state = 'deleted';
