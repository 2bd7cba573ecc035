-- tierq schema, version 4: places in line are handed out in blocks.
--
-- An enqueue batch (at most 500 tasks) takes one value of tierq_task_seq and numbers its
-- rows from it, instead of calling nextval() once per row (about a microsecond of
-- PostgreSQL CPU per task). Every other caller still takes one value per row. With a step
-- of 512 no two callers' places overlap, and the order between callers is the order in
-- which they took their values, as before. The ready-set score keeps seq below 2^49: at a
-- step of 512 that is 10^12 values.
ALTER SEQUENCE tierq_task_seq INCREMENT BY 512;
