-- tierq schema, version 16: the cron tick reads the schedules due, not every schedule.
--
-- tick_at_ms is when a schedule next has work for the tick (epoch ms): its next occurrence
-- fires (the horizon needs topping up), its installed occurrences end within the lookahead,
-- or occurrences of an older config are left to withdraw or forget. NULL: nothing to do
-- until a PUT (a disabled schedule with no occurrences left). Each install sets it
-- (tierq.logic.schedules.install); the tick reads `tick_at_ms <= now` on the partial index
-- below, a slice at a time, so idle schedules cost it nothing. Existing schedules (and new
-- rows until their install sets it) are due at once: the first tick visits each once.
ALTER TABLE tierq_schedules ADD COLUMN IF NOT EXISTS tick_at_ms bigint DEFAULT 0;
CREATE INDEX IF NOT EXISTS tierq_schedules_due ON tierq_schedules (tick_at_ms, tenant, name)
    WHERE tick_at_ms IS NOT NULL;

-- A removed schedule whose occurrences outlived its row (a claimed one still running, or
-- one the delayed mover held at the removal): the tick withdraws or forgets them when due,
-- and the row goes with the last of them. A PUT of the same (tenant, name) takes the
-- occurrences over as ones of an older config, and removes this row.
CREATE TABLE IF NOT EXISTS tierq_schedule_remnants (
    tenant     text   NOT NULL,
    name       text   NOT NULL,
    tick_at_ms bigint NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE INDEX IF NOT EXISTS tierq_schedule_remnants_due
    ON tierq_schedule_remnants (tick_at_ms, tenant, name);

-- the ledger rows of schedules removed before this version: due at once
INSERT INTO tierq_schedule_remnants (tenant, name, tick_at_ms)
SELECT DISTINCT o.tenant, o.schedule, 0
FROM tierq_schedule_occurrences o
WHERE NOT EXISTS (SELECT 1 FROM tierq_schedules s
                  WHERE s.tenant = o.tenant AND s.name = o.schedule)
ON CONFLICT DO NOTHING;
