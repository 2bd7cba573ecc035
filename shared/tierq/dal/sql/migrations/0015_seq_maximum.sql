-- tierq schema, version 15: the last place in line tierq_task_seq hands out.
--
-- A value of the sequence opens a block of 512 places (migration 0004: a batch's rows take
-- value + 0 .. value + 511; a bulk load compares seq with value + 512). With MAXVALUE at
-- 2^63 - 1024 every such sum fits a bigint, so the end of the sequence is one clear error
-- ("reached maximum value of sequence") raised inside the statement that asks for a value,
-- before anything commits: never an overflow in a later step. Every seq it hands out has a
-- place in a ready set (core/ordering.py). At 100,000 statements a second, each taking one
-- value, the sequence lasts about 5,700 years; the TaskSeqUsedPercent alarm watches it.
ALTER SEQUENCE tierq_task_seq MAXVALUE 9223372036854774784;
