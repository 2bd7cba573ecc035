-- tierq schema, version 9: schedule names are scoped per tenant.
--
-- A schedule is (tenant, name): tenants may each have a schedule "nightly", and a PUT can
-- only ever write the row of its caller's tenant (the upsert's conflict target is the whole
-- key), so there is nothing of another tenant's to take over. Names were unique before, so
-- every existing schedule keeps its name and tenant under the new key.
ALTER TABLE tierq_schedules DROP CONSTRAINT tierq_schedules_pkey;
ALTER TABLE tierq_schedules ADD CONSTRAINT tierq_schedules_pkey PRIMARY KEY (tenant, name);

-- The occurrence ledger: an occurrence belongs to the schedule (tenant, schedule). Its
-- tenant column has always held the tenant of the task it installed, which was its
-- schedule's tenant when it was installed. A ledger row whose tenant differs from its
-- schedule's today is a pending occurrence of an older config (the schedule's tenant was
-- changed): it now belongs to no schedule, and the next tick withdraws it if it was never
-- claimed — what the config change itself would have done.
ALTER TABLE tierq_schedule_occurrences DROP CONSTRAINT tierq_schedule_occurrences_pkey;
ALTER TABLE tierq_schedule_occurrences
    ADD CONSTRAINT tierq_schedule_occurrences_pkey
        PRIMARY KEY (tenant, schedule, fire_at_ms, config_hash);
