-- tierq schema, version 19: groups, ordered work per key (docs/design-groups.md).
--
-- A task may name a group (`grp`) within its (queue, tenant). At most the queue's
-- group_max_leased tasks of a group are active (delayed, cold or warm, leased or not); the
-- others are `held`, in enqueue order (seq), invisible to every tier until a finishing
-- transaction releases them (logic/groups.py). tierq_groups has one row per group with
-- work: the lock that orders an enqueue against a release, and the counts the metrics
-- read without scanning tasks.

ALTER TABLE tierq_tasks DROP CONSTRAINT tierq_tasks_state_check;
ALTER TABLE tierq_tasks ADD CONSTRAINT tierq_tasks_state_check
    CHECK (state IN ('waiting', 'held', 'delayed', 'cold', 'warm', 'dead', 'done'));
ALTER TABLE tierq_tasks ADD COLUMN grp text;  -- NULL: no group

-- A held task keeps its key: one live task per (queue, tenant, key) counts it too. The
-- statements that name the old predicate (state IN ('delayed', 'cold', 'warm')) still
-- infer this index, since theirs implies it.
DROP INDEX tierq_tasks_live_key;
CREATE UNIQUE INDEX tierq_tasks_live_key
    ON tierq_tasks (queue, tenant, key)
    WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held');

-- A group's line: its held tasks in enqueue order, read one group at a time by a release,
-- and walked by the reaper's sweep (maintenance/reaper.py).
CREATE INDEX tierq_tasks_group_held
    ON tierq_tasks (queue, tenant, grp, seq) WITH (fillfactor = 70)
    WHERE state = 'held';
-- A group's active tasks, counted by a release under the group's lock (at most
-- group_max_leased entries per group, whatever the line's length).
CREATE INDEX tierq_tasks_group_active
    ON tierq_tasks (queue, tenant, grp) WITH (fillfactor = 70)
    WHERE grp IS NOT NULL AND state IN ('delayed', 'cold', 'warm');

CREATE TABLE tierq_groups (
    queue      text    NOT NULL,
    tenant     text    NOT NULL,
    grp        text    NOT NULL,
    active     integer NOT NULL DEFAULT 0 CHECK (active >= 0),
    held       integer NOT NULL DEFAULT 0 CHECK (held >= 0),
    head_since timestamptz,  -- when the group last had a task made active
    PRIMARY KEY (queue, tenant, grp)
) WITH (fillfactor = 70);

ALTER TABLE tierq_queue_limits
    ADD COLUMN group_max_leased integer CHECK (group_max_leased BETWEEN 1 AND 1000);
