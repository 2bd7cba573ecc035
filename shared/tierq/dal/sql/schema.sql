-- The schema that tierq's migrations make of an empty database: a listing from the catalog,
-- not SQL to run. Written by tierq.dal.schema_snapshot; after adding a migration, run
-- `python -m tierq.dal.schema_snapshot --write`.
-- <owner> ran the migrations; <app_group> is the application's group role
-- (tierq_app_<database>, migration 0007). The owner's own privileges are not listed.

migrations applied:
  0001_tasks_and_queues
  0002_schedules
  0003_feeder_offsets
  0004_seq_blocks
  0005_idempotency_keys
  0006_pair_activity
  0007_application_role
  0008_queue_warm_max_bytes
  0009_schedules_per_tenant
  0010_dead_letters_by_queue
  0011_queue_limits_and_consumer
  0012_shard_homes
  0013_queue_limits_table
  0014_pair_moves
  0015_seq_maximum
  0016_schedules_due
  0018_flows
  0019_groups
  0020_waiting_counts
  0021_cancel_and_time_limits
  0022_task_progress
  0023_task_traces
  0025_payload_objects
  0027_payload_tombstones
  0028_delayed_line
  0029_statement_routines
  0030_batch_rows
  0031_batch_acks_packed
  0032_batch_rows_routines
  0033_batch_acks_grouped

table tierq_batch_ends
  column batch uuid not null
  column places smallint[] not null
  column moved boolean not null
  CREATE INDEX tierq_batch_ends_batch ON tierq_batch_ends USING btree (batch)
  CREATE INDEX tierq_batch_ends_moved ON tierq_batch_ends USING btree (batch) WHERE moved
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_batch_pairs
  column queue text not null
  column tenant text not null
  column batch uuid not null
  constraint tierq_batch_pairs_pkey: PRIMARY KEY (queue, tenant, batch)
  CREATE UNIQUE INDEX tierq_batch_pairs_pkey ON tierq_batch_pairs USING btree (queue, tenant, batch)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_batches
  column id uuid not null
  column queue text not null
  column tasks integer not null
  column first_seq bigint not null
  column seq_offsets smallint[]
  column tenant_names text[] not null
  column tenant_of bytea
  column priorities smallint[] not null
  column payloads jsonb not null
  column max_attempts integer not null
  column timeout_seconds integer
  column created_at timestamp with time zone not null
  constraint tierq_batches_by_place: CHECK (cardinality(priorities) = tasks AND jsonb_array_length(payloads) = tasks AND (0 <= ALL (priorities)) AND (9 >= ALL (priorities)) AND cardinality(tenant_names) >= 1 AND cardinality(tenant_names) <= 256 AND (tenant_of IS NULL OR length(tenant_of) = tasks) AND (seq_offsets IS NULL OR cardinality(seq_offsets) = tasks))
  constraint tierq_batches_max_attempts_check: CHECK (max_attempts >= 1)
  constraint tierq_batches_pkey: PRIMARY KEY (id)
  constraint tierq_batches_tasks_check: CHECK (tasks >= 1 AND tasks <= 512)
  constraint tierq_batches_timeout_seconds_check: CHECK (timeout_seconds >= 1 AND timeout_seconds <= 604800)
  CREATE UNIQUE INDEX tierq_batches_pkey ON tierq_batches USING btree (id)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_feeder_offsets
  column feed text not null
  column source text not null
  column part text not null
  column rows_done bigint not null default 0
  column last_value text
  column updated_at timestamp with time zone not null default now()
  constraint tierq_feeder_offsets_pkey: PRIMARY KEY (feed, source, part)
  constraint tierq_feeder_offsets_rows_done_check: CHECK (rows_done >= 0)
  CREATE UNIQUE INDEX tierq_feeder_offsets_pkey ON tierq_feeder_offsets USING btree (feed, source, part)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_groups
  column queue text not null
  column tenant text not null
  column grp text not null
  column active integer not null default 0
  column held integer not null default 0
  column head_since timestamp with time zone
  constraint tierq_groups_active_check: CHECK (active >= 0)
  constraint tierq_groups_held_check: CHECK (held >= 0)
  constraint tierq_groups_pkey: PRIMARY KEY (queue, tenant, grp)
  CREATE UNIQUE INDEX tierq_groups_pkey ON tierq_groups USING btree (queue, tenant, grp)
  options: fillfactor=70
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_idempotency
  column scope_key bytea not null
  column fingerprint bytea not null
  column owner uuid not null
  column done boolean not null default false
  column status smallint
  column response text
  column created_at timestamp with time zone not null
  column lease_until timestamp with time zone not null
  column expires_at timestamp with time zone not null
  constraint tierq_idempotency_pkey: PRIMARY KEY (scope_key)
  CREATE INDEX tierq_idempotency_expiry ON tierq_idempotency USING btree (expires_at)
  CREATE UNIQUE INDEX tierq_idempotency_pkey ON tierq_idempotency USING btree (scope_key)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_maintenance_cursors
  column walk text not null
  column queue text not null
  column tenant text not null
  column updated_at timestamp with time zone not null default now()
  constraint tierq_maintenance_cursors_pkey: PRIMARY KEY (walk)
  CREATE UNIQUE INDEX tierq_maintenance_cursors_pkey ON tierq_maintenance_cursors USING btree (walk)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_pair_homes
  column queue text not null
  column tenant text not null
  column shard text not null
  column born_at timestamp with time zone not null default now()
  column moving_to text
  column moving_since timestamp with time zone
  constraint tierq_pair_homes_pkey: PRIMARY KEY (queue, tenant)
  CREATE INDEX tierq_pair_homes_by_tenant ON tierq_pair_homes USING btree (tenant, queue)
  CREATE UNIQUE INDEX tierq_pair_homes_pkey ON tierq_pair_homes USING btree (queue, tenant)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_payload_keys
  column object_key text not null
  column tenant text not null
  column state text not null default 'pending'::text
  column created_at timestamp with time zone not null default now()
  column deleted_at timestamp with time zone
  constraint tierq_payload_keys_pkey: PRIMARY KEY (object_key)
  constraint tierq_payload_keys_state_check: CHECK (state = ANY (ARRAY['pending'::text, 'used'::text, 'deleted'::text]))
  CREATE INDEX tierq_payload_keys_deleted ON tierq_payload_keys USING btree (deleted_at) WHERE (state = 'deleted'::text)
  CREATE INDEX tierq_payload_keys_pending ON tierq_payload_keys USING btree (tenant, created_at) WHERE (state = 'pending'::text)
  CREATE UNIQUE INDEX tierq_payload_keys_pkey ON tierq_payload_keys USING btree (object_key)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_payload_objects
  column object_key text not null
  column task_id uuid not null
  column created_at timestamp with time zone not null default now()
  constraint tierq_payload_objects_pkey: PRIMARY KEY (object_key, task_id)
  CREATE UNIQUE INDEX tierq_payload_objects_pkey ON tierq_payload_objects USING btree (object_key, task_id)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_queue_limits
  column queue text not null
  column max_leased integer
  column rate_per_second double precision
  column rate_burst integer
  column tenant_max_leased integer
  column tenant_rate_per_second double precision
  column tenant_rate_burst integer
  column group_max_leased integer
  constraint tierq_queue_limits_group_max_leased_check: CHECK (group_max_leased >= 1 AND group_max_leased <= 1000)
  constraint tierq_queue_limits_max_leased_check: CHECK (max_leased >= 1 AND max_leased <= 1000000)
  constraint tierq_queue_limits_pkey: PRIMARY KEY (queue)
  constraint tierq_queue_limits_rate_burst_check: CHECK (rate_burst >= 1 AND rate_burst <= 1000000)
  constraint tierq_queue_limits_rate_per_second_check: CHECK (rate_per_second > 0::double precision AND rate_per_second <= 1000000::double precision)
  constraint tierq_queue_limits_rate_whole: CHECK ((rate_per_second IS NULL) = (rate_burst IS NULL))
  constraint tierq_queue_limits_tenant_max_leased_check: CHECK (tenant_max_leased >= 1 AND tenant_max_leased <= 1000000)
  constraint tierq_queue_limits_tenant_rate_burst_check: CHECK (tenant_rate_burst >= 1 AND tenant_rate_burst <= 1000000)
  constraint tierq_queue_limits_tenant_rate_per_second_check: CHECK (tenant_rate_per_second > 0::double precision AND tenant_rate_per_second <= 1000000::double precision)
  constraint tierq_queue_limits_tenant_rate_whole: CHECK ((tenant_rate_per_second IS NULL) = (tenant_rate_burst IS NULL))
  CREATE UNIQUE INDEX tierq_queue_limits_pkey ON tierq_queue_limits USING btree (queue)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_queue_tenants
  column queue text not null
  column tenant text not null
  column created_at timestamp with time zone not null default now()
  column last_seen timestamp with time zone not null default now()
  column cold_mode_since timestamp with time zone
  constraint tierq_queue_tenants_pkey: PRIMARY KEY (queue, tenant)
  CREATE INDEX tierq_queue_tenants_by_tenant ON tierq_queue_tenants USING btree (tenant, queue)
  CREATE INDEX tierq_queue_tenants_cold_mode ON tierq_queue_tenants USING btree (queue, tenant) WHERE (cold_mode_since IS NOT NULL)
  CREATE UNIQUE INDEX tierq_queue_tenants_pkey ON tierq_queue_tenants USING btree (queue, tenant)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_queues
  column queue text not null
  column warm_max integer
  column lease_seconds integer
  column max_attempts integer
  column backoff_kind text
  column backoff_base_seconds double precision
  column backoff_cap_seconds double precision
  column backoff_jitter double precision
  column retention_seconds integer
  column paused boolean not null default false
  column created_at timestamp with time zone not null default now()
  column updated_at timestamp with time zone not null default now()
  column warm_max_bytes bigint
  column consumer jsonb
  column timeout_seconds integer
  constraint tierq_queues_backoff_base_seconds_check: CHECK (backoff_base_seconds >= 0::double precision)
  constraint tierq_queues_backoff_cap_seconds_check: CHECK (backoff_cap_seconds >= 0::double precision)
  constraint tierq_queues_backoff_jitter_check: CHECK (backoff_jitter >= 0::double precision AND backoff_jitter <= 1::double precision)
  constraint tierq_queues_backoff_kind_check: CHECK (backoff_kind = ANY (ARRAY['fixed'::text, 'linear'::text, 'exponential'::text]))
  constraint tierq_queues_consumer_check: CHECK (consumer IS NULL OR jsonb_typeof(consumer) = 'object'::text AND jsonb_typeof(consumer -> 'function'::text) = 'string'::text)
  constraint tierq_queues_lease_seconds_check: CHECK (lease_seconds >= 1)
  constraint tierq_queues_max_attempts_check: CHECK (max_attempts >= 1)
  constraint tierq_queues_pkey: PRIMARY KEY (queue)
  constraint tierq_queues_retention_seconds_check: CHECK (retention_seconds >= 0)
  constraint tierq_queues_timeout_seconds_check: CHECK (timeout_seconds >= 1 AND timeout_seconds <= 604800)
  constraint tierq_queues_warm_max_bytes_check: CHECK (warm_max_bytes >= 1024 AND warm_max_bytes <= '1099511627776'::bigint)
  constraint tierq_queues_warm_max_check: CHECK (warm_max >= 1)
  CREATE UNIQUE INDEX tierq_queues_pkey ON tierq_queues USING btree (queue)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_schedule_occurrences
  column schedule text not null
  column config_hash text not null
  column fire_at_ms bigint not null
  column task_id uuid not null
  column queue text not null
  column tenant text not null
  constraint tierq_schedule_occurrences_pkey: PRIMARY KEY (tenant, schedule, fire_at_ms, config_hash)
  CREATE UNIQUE INDEX tierq_schedule_occurrences_pkey ON tierq_schedule_occurrences USING btree (tenant, schedule, fire_at_ms, config_hash)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_schedule_remnants
  column tenant text not null
  column name text not null
  column tick_at_ms bigint not null
  constraint tierq_schedule_remnants_pkey: PRIMARY KEY (tenant, name)
  CREATE INDEX tierq_schedule_remnants_due ON tierq_schedule_remnants USING btree (tick_at_ms, tenant, name)
  CREATE UNIQUE INDEX tierq_schedule_remnants_pkey ON tierq_schedule_remnants USING btree (tenant, name)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_schedules
  column name text not null
  column queue text not null
  column tenant text not null default '_'::text
  column payload jsonb not null
  column priority smallint not null default 0
  column cron text
  column every_ms bigint
  column daily_times text[]
  column timezone text not null default 'UTC'::text
  column horizon integer not null default 4
  column enabled boolean not null default true
  column config_hash text not null
  column installed_hash text
  column installed_through_ms bigint
  column last_tick_at timestamp with time zone
  column created_at timestamp with time zone not null
  column updated_at timestamp with time zone not null
  column tick_at_ms bigint default 0
  constraint tierq_schedules_check: CHECK (num_nonnulls(cron, every_ms, daily_times) = 1)
  constraint tierq_schedules_every_ms_check: CHECK (every_ms >= 1000)
  constraint tierq_schedules_horizon_check: CHECK (horizon >= 1 AND horizon <= 1000)
  constraint tierq_schedules_name_check: CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'::text)
  constraint tierq_schedules_pkey: PRIMARY KEY (tenant, name)
  constraint tierq_schedules_priority_check: CHECK (priority >= 0 AND priority <= 9)
  CREATE INDEX tierq_schedules_due ON tierq_schedules USING btree (tick_at_ms, tenant, name) WHERE (tick_at_ms IS NOT NULL)
  CREATE UNIQUE INDEX tierq_schedules_pkey ON tierq_schedules USING btree (tenant, name)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_schema_migrations
  column version text not null
  column name text not null
  column checksum text not null
  column applied_at timestamp with time zone not null default now()
  constraint tierq_schema_migrations_pkey: PRIMARY KEY (version)
  CREATE UNIQUE INDEX tierq_schema_migrations_pkey ON tierq_schema_migrations USING btree (version)
  grant to <app_group>: SELECT

table tierq_shard_identity
  column singleton boolean not null default true
  column name text not null
  column homes_complete timestamp with time zone
  constraint tierq_shard_identity_pkey: PRIMARY KEY (singleton)
  constraint tierq_shard_identity_singleton_check: CHECK (singleton)
  CREATE UNIQUE INDEX tierq_shard_identity_pkey ON tierq_shard_identity USING btree (singleton)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_task_edges
  column parent uuid not null
  column child uuid not null
  column parent_queue text not null
  column position smallint not null
  column parent_state text
  constraint tierq_task_edges_parent_state_check: CHECK (parent_state = ANY (ARRAY['done'::text, 'dead'::text, 'cancelled'::text]))
  constraint tierq_task_edges_pkey: PRIMARY KEY (parent, child)
  CREATE INDEX tierq_task_edges_child ON tierq_task_edges USING btree (child)
  CREATE UNIQUE INDEX tierq_task_edges_pkey ON tierq_task_edges USING btree (parent, child)
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_task_waits
  column child uuid not null
  column pending integer not null
  column on_parent_failure text not null
  column wait_until timestamp with time zone
  column failed_parent uuid
  constraint tierq_task_waits_on_parent_failure_check: CHECK (on_parent_failure = ANY (ARRAY['dead'::text, 'run'::text]))
  constraint tierq_task_waits_pending_check: CHECK (pending >= 0)
  constraint tierq_task_waits_pkey: PRIMARY KEY (child)
  CREATE UNIQUE INDEX tierq_task_waits_pkey ON tierq_task_waits USING btree (child)
  CREATE INDEX tierq_task_waits_until ON tierq_task_waits USING btree (wait_until) WHERE ((wait_until IS NOT NULL) AND (failed_parent IS NULL))
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

table tierq_tasks
  column id uuid not null
  column queue text not null
  column tenant text not null default '_'::text
  column key text
  column priority smallint not null default 0
  column payload jsonb not null
  column state text not null
  column run_at timestamp with time zone not null
  column run_at_initially timestamp with time zone not null
  column attempts integer not null default 0
  column max_attempts integer not null
  column seq bigint not null
  column created_at timestamp with time zone not null
  column ready_since timestamp with time zone
  column state_since timestamp with time zone not null
  column finished_at timestamp with time zone
  column last_error text
  column result jsonb
  column waiters integer not null default 0
  column parents jsonb
  column grp text
  column timeout_seconds integer
  column progress jsonb
  column progress_at timestamp with time zone
  column trace text
  constraint tierq_tasks_max_attempts_check: CHECK (max_attempts >= 1)
  constraint tierq_tasks_pkey: PRIMARY KEY (id)
  constraint tierq_tasks_priority_check: CHECK (priority >= 0 AND priority <= 9)
  constraint tierq_tasks_state_check: CHECK (state = ANY (ARRAY['waiting'::text, 'held'::text, 'delayed'::text, 'cold'::text, 'warm'::text, 'dead'::text, 'done'::text, 'cancelled'::text]))
  constraint tierq_tasks_timeout_seconds_check: CHECK (timeout_seconds >= 1 AND timeout_seconds <= 604800)
  constraint tierq_tasks_waiters_check: CHECK (waiters >= 0)
  CREATE INDEX tierq_tasks_cancelled_since ON tierq_tasks USING btree (queue, finished_at) WHERE (state = 'cancelled'::text)
  CREATE INDEX tierq_tasks_cold_line ON tierq_tasks USING btree (queue, tenant, priority DESC, seq) WITH (fillfactor='70') WHERE (state = 'cold'::text)
  CREATE INDEX tierq_tasks_dead_by_queue ON tierq_tasks USING btree (queue, finished_at DESC, id DESC) WHERE (state = 'dead'::text)
  CREATE INDEX tierq_tasks_dead_line ON tierq_tasks USING btree (queue, tenant, finished_at DESC, id DESC) WHERE (state = 'dead'::text)
  CREATE INDEX tierq_tasks_delayed_due ON tierq_tasks USING btree (run_at, seq) WITH (fillfactor='70') WHERE (state = 'delayed'::text)
  CREATE INDEX tierq_tasks_delayed_line ON tierq_tasks USING btree (queue, tenant, run_at, seq) WITH (fillfactor='70') WHERE (state = 'delayed'::text)
  CREATE INDEX tierq_tasks_done_since ON tierq_tasks USING btree (queue, finished_at) WHERE (state = 'done'::text)
  CREATE INDEX tierq_tasks_group_active ON tierq_tasks USING btree (queue, tenant, grp) WITH (fillfactor='70') WHERE ((grp IS NOT NULL) AND (state = ANY (ARRAY['delayed'::text, 'cold'::text, 'warm'::text])))
  CREATE INDEX tierq_tasks_group_held ON tierq_tasks USING btree (queue, tenant, grp, seq) WITH (fillfactor='70') WHERE (state = 'held'::text)
  CREATE UNIQUE INDEX tierq_tasks_live_key ON tierq_tasks USING btree (queue, tenant, key) WHERE ((key IS NOT NULL) AND (state = ANY (ARRAY['delayed'::text, 'cold'::text, 'warm'::text, 'held'::text])))
  CREATE UNIQUE INDEX tierq_tasks_pkey ON tierq_tasks USING btree (id)
  CREATE INDEX tierq_tasks_waiting_pair ON tierq_tasks USING btree (queue, tenant) WHERE (state = 'waiting'::text)
  CREATE INDEX tierq_tasks_warm_since ON tierq_tasks USING btree (queue, tenant, state_since) WITH (fillfactor='70') WHERE (state = 'warm'::text)
  options: fillfactor=70, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_insert_scale_factor=0.02, autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_delay=2, autovacuum_vacuum_cost_limit=1000
  grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

sequence tierq_task_seq bigint start 1 increment 512 min 1 max 9223372036854774784 cache 1
  grant to <app_group>: USAGE

function tierq_ack_delete_by_attempt_v1(p_ids uuid[], p_tenants text[], p_attempts integer[], p_queue text) returns TABLE(id text, grp text) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    DELETE FROM tierq_tasks t
    USING unnest(p_ids::uuid[], p_tenants::text[], p_attempts::int[])
          AS v(id, tenant, attempt)
    WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
      AND t.queue = p_queue AND t.tenant = v.tenant
      AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt AND t.waiters = 0
    RETURNING t.id::text, t.grp;
    END

function tierq_ack_delete_v1(p_ids uuid[], p_queue text, p_tenant_set text[], p_attempt integer) returns TABLE(id text, grp text) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    DELETE FROM tierq_tasks
    WHERE id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND queue = p_queue
      AND tenant = ANY(p_tenant_set::text[])
      AND (state = 'warm') IS TRUE AND attempts < p_attempt AND waiters = 0
    RETURNING id::text, grp;
    END

function tierq_ack_keep_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants text[], p_results jsonb[], p_attempts integer[]) returns TABLE(id text, grp text) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    UPDATE tierq_tasks t
    SET state = 'done', result = v.result, attempts = v.attempt, finished_at = p_now,
        state_since = p_now, ready_since = NULL
    FROM unnest(p_ids::uuid[], p_tenants::text[], p_results::jsonb[], p_attempts::int[])
         AS v(id, tenant, result, attempt)
    WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
      AND t.queue = p_queue AND t.tenant = v.tenant
      AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt AND t.waiters = 0
    RETURNING t.id::text, t.grp;
    END

function tierq_app_group() returns text language sql stable
  grant to PUBLIC: EXECUTE
  body:
    -- at most 63 bytes (NAMEDATALEN - 1): a long database name is hashed
    SELECT CASE WHEN octet_length(current_database()) <= 53
                THEN 'tierq_app_' || current_database()
                ELSE 'tierq_app_' || md5(current_database()) END

function tierq_batch_seq(p_first_seq bigint, p_offsets smallint[], p_place integer) returns bigint language sql immutable
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    SELECT p_first_seq + coalesce(p_offsets[p_place + 1], p_place)

function tierq_batch_tenant(p_names text[], p_tenant_of bytea, p_place integer) returns text language sql immutable
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    SELECT CASE WHEN p_tenant_of IS NULL THEN p_names[1]
                WHEN p_place >= 0 AND p_place < length(p_tenant_of)
                THEN p_names[get_byte(p_tenant_of, p_place) + 1] END

function tierq_end_batch_members_v1(p_queue text, p_ids uuid[], p_batches uuid[], p_places integer[], p_tenants text[], p_attempts integer[]) returns TABLE(id text, grp text) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    PERFORM count(pg_advisory_xact_lock_shared(hashtextextended(b::text, 30)))
    FROM (SELECT DISTINCT b FROM unnest(p_batches) AS b ORDER BY b) AS sorted;
    RETURN QUERY
    WITH v AS (
        SELECT DISTINCT v.id, v.batch, v.place, v.tenant, v.attempt
        FROM unnest(p_ids::uuid[], p_batches::uuid[], p_places::int[],
                    p_tenants::text[], p_attempts::int[])
             AS v(id, batch, place, tenant, attempt)
    ),
    m AS MATERIALIZED (
        SELECT v.id, v.batch, v.place, v.tenant, v.attempt,
               coalesce(b.queue = p_queue AND v.place < b.tasks
                        AND tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
                        AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                                        WHERE e.batch = v.batch AND e.moved
                                          AND v.place = ANY(e.places)), false) AS held
        FROM v LEFT JOIN tierq_batches b ON b.id = v.batch
    ),
    ended AS (
        INSERT INTO tierq_batch_ends (batch, places, moved)
        SELECT batch, array_agg(place ORDER BY place), false FROM m WHERE held GROUP BY batch
    ),
    deleted AS (
        DELETE FROM tierq_tasks t USING m
        WHERE t.id = ANY(ARRAY(SELECT id FROM m WHERE NOT held)) AND t.id = m.id
          AND NOT m.held AND t.queue = p_queue AND t.tenant = m.tenant
          AND (t.state = 'warm') IS TRUE AND t.attempts < m.attempt AND t.waiters = 0
        RETURNING t.id, t.grp
    )
    SELECT id::text AS id, NULL::text AS grp FROM m WHERE held
    UNION ALL SELECT id::text, grp FROM deleted;
    END

function tierq_end_batch_members_v2(p_queue text, p_batches uuid[], p_tenants text[], p_members bytea, p_row_ids uuid[], p_rows bytea) returns TABLE(id text, grp text, unended integer[]) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    IF length(p_members) % 10 <> 0 THEN
        RAISE EXCEPTION 'p_members has % bytes, not ten per member', length(p_members);
    END IF;
    IF length(p_rows) <> 6 * coalesce(cardinality(p_row_ids), 0) THEN
        RAISE EXCEPTION 'p_rows has % bytes, not six per id of p_row_ids', length(p_rows);
    END IF;
    PERFORM count(pg_advisory_xact_lock_shared(hashtextextended(b::text, 30)))
    FROM (SELECT DISTINCT b FROM unnest(p_batches) AS b ORDER BY b) AS sorted;
    RETURN QUERY
    WITH v AS (
        SELECT n,
               p_batches[get_byte(p_members, 10 * n) * 256
                         + get_byte(p_members, 10 * n + 1) + 1] AS batch,
               get_byte(p_members, 10 * n + 2) * 256 + get_byte(p_members, 10 * n + 3) AS place,
               p_tenants[get_byte(p_members, 10 * n + 4) * 256
                         + get_byte(p_members, 10 * n + 5) + 1] AS tenant
        FROM generate_series(0, length(p_members) / 10 - 1) AS n
    ),
    -- (each batch row, and the places moved out of it, read once)
    b AS MATERIALIZED (
        SELECT b.id, b.tasks, b.tenant_names, b.tenant_of,
               ARRAY(SELECT p FROM tierq_batch_ends e, unnest(e.places) AS p
                     WHERE e.batch = b.id AND e.moved) AS moved
        FROM tierq_batches b
        WHERE b.id = ANY(p_batches) AND b.queue = p_queue
    ),
    m AS MATERIALIZED (
        SELECT v.n, v.batch, v.place, v.tenant,
               coalesce(v.place < b.tasks
                        AND tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
                        AND NOT v.place = ANY(b.moved), false) AS held
        FROM v LEFT JOIN b ON b.id = v.batch
    ),
    ended AS (
        INSERT INTO tierq_batch_ends (batch, places, moved)
        SELECT batch, array_agg(place ORDER BY place), false FROM m WHERE held GROUP BY batch
    ),
    -- (the members not ended, by id: the batch's key with the place written in, as
    -- tierq.core.batch_ids; and the rows' tasks, plain)
    others AS MATERIALIZED (
        SELECT m.n, m.tenant,
               overlay(m.batch::text PLACING lpad(to_hex(m.place), 3, '0') FROM 30 FOR 3)::uuid
                   AS id,
               ('x' || encode(substring(p_members FROM 10 * m.n + 7 FOR 4), 'hex'))::bit(32)::int
                   AS attempt
        FROM m WHERE NOT m.held
    ),
    plain AS (
        SELECT r.id, p_tenants[get_byte(p_rows, 6 * (r.k - 1)::int) * 256
                               + get_byte(p_rows, 6 * (r.k - 1)::int + 1) + 1] AS tenant,
               ('x' || encode(substring(p_rows FROM 6 * (r.k - 1)::int + 3 FOR 4), 'hex'))
                   ::bit(32)::int AS attempt
        FROM unnest(p_row_ids) WITH ORDINALITY AS r(id, k)
    ),
    gone AS MATERIALIZED (
        SELECT id, tenant, attempt FROM others UNION ALL SELECT id, tenant, attempt FROM plain
    ),
    deleted AS (
        DELETE FROM tierq_tasks t USING gone o
        WHERE t.id = ANY(ARRAY(SELECT id FROM gone)) AND t.id = o.id
          AND t.queue = p_queue AND t.tenant = o.tenant
          AND (t.state = 'warm') IS TRUE AND t.attempts < o.attempt AND t.waiters = 0
        RETURNING t.id, t.grp
    )
    SELECT id::text, grp, NULL::integer[] FROM deleted
    UNION ALL SELECT NULL, NULL, ARRAY(SELECT n::integer FROM others ORDER BY n);
    END

function tierq_end_batch_members_v3(p_queue text, p_batches uuid[], p_tenants text[], p_groups bytea, p_places text[], p_members bytea, p_row_ids uuid[], p_rows bytea) returns TABLE(id text, grp text, unended integer[]) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    IF length(p_groups) <> 8 * coalesce(cardinality(p_places), 0) THEN
        RAISE EXCEPTION 'p_groups has % bytes, not eight per element of p_places',
            length(p_groups);
    END IF;
    IF length(p_members) % 10 <> 0 THEN
        RAISE EXCEPTION 'p_members has % bytes, not ten per member', length(p_members);
    END IF;
    IF length(p_rows) <> 6 * coalesce(cardinality(p_row_ids), 0) THEN
        RAISE EXCEPTION 'p_rows has % bytes, not six per id of p_row_ids', length(p_rows);
    END IF;
    PERFORM count(pg_advisory_xact_lock_shared(hashtextextended(b::text, 30)))
    FROM (SELECT DISTINCT b FROM unnest(p_batches) AS b ORDER BY b) AS sorted;
    RETURN QUERY
    WITH g AS (
        SELECT k,
               p_batches[get_byte(p_groups, 8 * k) * 256 + get_byte(p_groups, 8 * k + 1) + 1]
                   AS batch,
               p_tenants[get_byte(p_groups, 8 * k + 2) * 256 + get_byte(p_groups, 8 * k + 3) + 1]
                   AS tenant,
               ('x' || encode(substring(p_groups FROM 8 * k + 5 FOR 4), 'hex'))::bit(32)::int
                   AS attempt,
               p_places[k + 1]::smallint[] AS places
        FROM generate_series(0, coalesce(cardinality(p_places), 0) - 1) AS k
    ),
    -- (each batch row, its tenant bytes and the places moved out of it, read once)
    b AS MATERIALIZED (
        SELECT b.id, b.tasks, b.tenant_names, b.tenant_of || ''::bytea AS tenant_of,
               ARRAY(SELECT p FROM tierq_batch_ends e, unnest(e.places) AS p
                     WHERE e.batch = b.id AND e.moved)::smallint[] AS moved
        FROM tierq_batches b
        WHERE b.id = ANY(p_batches) AND b.queue = p_queue
    ),
    c AS MATERIALIZED (
        SELECT g.k, g.batch, g.tenant, g.attempt, g.places,
               coalesce(CASE WHEN b.id IS NULL THEN false
                             WHEN NOT (cardinality(g.places) > 0 AND 0 <= ALL(g.places)
                                       AND b.tasks > ALL(g.places))
                                  OR g.places && b.moved THEN false
                             WHEN b.tenant_of IS NULL THEN b.tenant_names[1] = g.tenant
                             ELSE NOT EXISTS (
                                 SELECT 1 FROM unnest(g.places) AS p
                                 WHERE get_byte(b.tenant_of, p)
                                       IS DISTINCT FROM array_position(b.tenant_names, g.tenant) - 1)
                        END, false) AS whole
        FROM g LEFT JOIN b ON b.id = g.batch
    ),
    -- (one by one, as version 2 checks a member: the members given alone, their attempts read
    -- only if they are not ended, and the places of the groups not held whole)
    v AS (
        SELECT n,
               p_batches[get_byte(p_members, 10 * n) * 256
                         + get_byte(p_members, 10 * n + 1) + 1] AS batch,
               get_byte(p_members, 10 * n + 2) * 256 + get_byte(p_members, 10 * n + 3) AS place,
               p_tenants[get_byte(p_members, 10 * n + 4) * 256
                         + get_byte(p_members, 10 * n + 5) + 1] AS tenant,
               NULL::integer AS attempt
        FROM generate_series(0, length(p_members) / 10 - 1) AS n
        UNION ALL
        SELECT -(c.k * 4096 + p) - 1, c.batch, p, c.tenant, c.attempt
        FROM c, unnest(c.places) AS p
        WHERE NOT c.whole
    ),
    m AS MATERIALIZED (
        SELECT v.n, v.batch, v.place, v.tenant, v.attempt,
               coalesce(v.place >= 0 AND v.place < b.tasks
                        AND tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
                        AND NOT v.place = ANY(b.moved), false) AS held
        FROM v LEFT JOIN b ON b.id = v.batch
    ),
    held AS (
        SELECT c.batch, c.places FROM c WHERE c.whole
        UNION ALL
        SELECT m.batch, array_agg(m.place ORDER BY m.place)::smallint[] FROM m WHERE m.held
        GROUP BY m.batch
    ),
    counted AS (
        SELECT held.batch, held.places, count(*) OVER (PARTITION BY held.batch) AS n FROM held
    ),
    ended AS (
        INSERT INTO tierq_batch_ends (batch, places, moved)
        SELECT batch, places, false FROM counted WHERE n = 1
        UNION ALL
        SELECT counted.batch, array_agg(p ORDER BY p), false
        FROM counted, unnest(counted.places) AS p WHERE counted.n > 1 GROUP BY counted.batch
    ),
    -- (the members not ended, by id: the batch's key with the place written in, as
    -- tierq.core.batch_ids; and the rows' tasks, plain)
    others AS MATERIALIZED (
        SELECT m.n, m.tenant,
               overlay(m.batch::text PLACING lpad(to_hex(m.place), 3, '0') FROM 30 FOR 3)::uuid
                   AS id,
               coalesce(m.attempt,
                        ('x' || encode(substring(p_members FROM 10 * m.n + 7 FOR 4), 'hex'))
                            ::bit(32)::int) AS attempt
        FROM m WHERE NOT m.held
    ),
    plain AS (
        SELECT r.id, p_tenants[get_byte(p_rows, 6 * (r.k - 1)::int) * 256
                               + get_byte(p_rows, 6 * (r.k - 1)::int + 1) + 1] AS tenant,
               ('x' || encode(substring(p_rows FROM 6 * (r.k - 1)::int + 3 FOR 4), 'hex'))
                   ::bit(32)::int AS attempt
        FROM unnest(p_row_ids) WITH ORDINALITY AS r(id, k)
    ),
    gone AS MATERIALIZED (
        SELECT id, tenant, attempt FROM others UNION ALL SELECT id, tenant, attempt FROM plain
    ),
    deleted AS (
        DELETE FROM tierq_tasks t USING gone o
        WHERE t.id = ANY(ARRAY(SELECT id FROM gone)) AND t.id = o.id
          AND t.queue = p_queue AND t.tenant = o.tenant
          AND (t.state = 'warm') IS TRUE AND t.attempts < o.attempt AND t.waiters = 0
        RETURNING t.id, t.grp
    )
    SELECT id::text, grp, NULL::integer[] FROM deleted
    UNION ALL SELECT NULL, NULL, ARRAY(SELECT n::integer FROM others ORDER BY n);
    END

function tierq_grant_app_group() returns text language plpgsql volatile
  no grants but the owner's
  body:
    DECLARE
        grp    text := tierq_app_group();
        sch    text := current_schema();
        object record;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = grp) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', grp);
        END IF;
        EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO %I', current_database(), grp);
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', sch, grp);
        -- tierq's tables only (the database may hold others), but not the migrations' record,
        -- which the application may read and never write
        FOR object IN
            SELECT c.relname, c.relkind FROM pg_class c
            WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = sch)
              AND c.relkind IN ('r', 'p', 'S')
              AND c.relname LIKE 'tierq\_%' AND c.relname <> 'tierq_schema_migrations'
        LOOP
            IF object.relkind = 'S' THEN
                EXECUTE format('GRANT USAGE ON SEQUENCE %I TO %I', object.relname, grp);
            ELSE
                EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I TO %I',
                               object.relname, grp);
            END IF;
        END LOOP;
        EXECUTE format('GRANT SELECT ON TABLE tierq_schema_migrations TO %I', grp);
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I '
                       'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %I', sch, grp);
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE ON SEQUENCES TO %I',
                       sch, grp);
        -- PostgreSQL 15 and later no longer let everyone create objects in schema public; do
        -- the same on older servers, or the application could still create tables
        IF sch = 'public' AND current_setting('server_version_num')::int < 150000 THEN
            REVOKE CREATE ON SCHEMA public FROM PUBLIC;
        END IF;
        RETURN grp;
    END

function tierq_insert_batch_keyed_v1(p_queue text, p_now timestamp with time zone, p_batch uuid, p_seq_offsets smallint[], p_tenant_names text[], p_tenant_of bytea, p_priorities smallint[], p_payloads jsonb, p_max_attempts integer, p_timeout integer, p_keyed_ids uuid[], p_keyed_tenants jsonb, p_keys jsonb, p_keyed_priorities smallint[], p_keyed_payloads jsonb, p_keyed_offsets integer[]) returns TABLE(id text, seq bigint) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    WITH b AS (
        INSERT INTO tierq_batches (id, queue, tasks, first_seq, seq_offsets, tenant_names,
                                   tenant_of, priorities, payloads, max_attempts,
                                   timeout_seconds, created_at)
        VALUES (p_batch::uuid, p_queue, cardinality(p_priorities::smallint[]),
                nextval('tierq_task_seq'), p_seq_offsets::smallint[],
                p_tenant_names::text[], p_tenant_of::bytea, p_priorities::smallint[],
                p_payloads::jsonb, p_max_attempts, p_timeout, p_now)
        RETURNING first_seq, tenant_names
    ),
    p AS (
        INSERT INTO tierq_batch_pairs (queue, tenant, batch)
        SELECT p_queue, t.tenant, p_batch::uuid FROM b, unnest(b.tenant_names) AS t(tenant)
    ),
    keyed AS (
        INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                                 run_at_initially, max_attempts, seq, created_at, ready_since,
                                 state_since, grp, timeout_seconds, trace)
        SELECT v.id, p_queue, v.tenant, v.key, v.priority, v.payload, 'warm', p_now,
               p_now, p_max_attempts, b.first_seq + v.offset_in_batch, p_now, p_now,
               p_now, NULL, p_timeout, NULL
        FROM b, ROWS FROM (unnest(p_keyed_ids::uuid[]),
                           jsonb_array_elements_text(p_keyed_tenants::jsonb),
                           jsonb_array_elements_text(p_keys::jsonb),
                           unnest(p_keyed_priorities::smallint[]),
                           jsonb_array_elements(p_keyed_payloads::jsonb),
                           unnest(p_keyed_offsets::int[]))
                AS v(id, tenant, key, priority, payload, offset_in_batch)
        ON CONFLICT (queue, tenant, key)
            WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
        DO NOTHING
        RETURNING id::text, seq
    )
    SELECT id, seq FROM keyed
    UNION ALL SELECT NULL, first_seq FROM b;
    END

function tierq_insert_batch_v1(p_queue text, p_now timestamp with time zone, p_batch uuid, p_tenant_names text[], p_tenant_of bytea, p_priorities smallint[], p_payloads jsonb, p_max_attempts integer, p_timeout integer) returns TABLE(id text, seq bigint) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    WITH b AS (
        INSERT INTO tierq_batches (id, queue, tasks, first_seq, tenant_names, tenant_of,
                                   priorities, payloads, max_attempts, timeout_seconds,
                                   created_at)
        VALUES (p_batch::uuid, p_queue, cardinality(p_priorities::smallint[]),
                nextval('tierq_task_seq'), p_tenant_names::text[], p_tenant_of::bytea,
                p_priorities::smallint[], p_payloads::jsonb, p_max_attempts, p_timeout,
                p_now)
        RETURNING first_seq, tenant_names
    ),
    p AS (
        INSERT INTO tierq_batch_pairs (queue, tenant, batch)
        SELECT p_queue, t.tenant, p_batch::uuid FROM b, unnest(b.tenant_names) AS t(tenant)
    )
    SELECT NULL::text AS id, first_seq AS seq FROM b;
    END

function tierq_insert_tasks_keyless_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_priorities smallint[], p_payloads jsonb, p_states text[], p_run_ats double precision[], p_max_attempts integer[], p_grps jsonb, p_timeouts integer[], p_traces jsonb) returns TABLE(min bigint, count bigint) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                                 run_at_initially, max_attempts, seq, created_at, ready_since,
                                 state_since, grp, timeout_seconds, trace)
        SELECT v.id, p_queue, v.tenant, NULL, v.priority, v.payload, v.state, r.run_at,
               r.run_at, v.max_attempts, b.seq + v.n - 1, p_now,
               CASE WHEN v.state IN ('delayed', 'waiting', 'held') THEN NULL
                    ELSE p_now::timestamptz END,
               p_now, v.grp, v.timeout_seconds, v.trace
        FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
             ROWS FROM (unnest(p_ids::uuid[]),
                        jsonb_array_elements_text(p_tenants::jsonb),
                        unnest(p_priorities::smallint[]),
                        jsonb_array_elements(p_payloads::jsonb),
                        unnest(p_states::text[]),
                        unnest(p_run_ats::double precision[]),
                        unnest(p_max_attempts::int[]),
                        jsonb_array_elements_text(p_grps::jsonb),
                        unnest(p_timeouts::int[]),
                        jsonb_array_elements_text(p_traces::jsonb))
             WITH ORDINALITY AS v(id, tenant, priority, payload, state, run_at, max_attempts,
                                  grp, timeout_seconds, trace, n),
             LATERAL (SELECT CASE WHEN v.state IN ('delayed', 'waiting', 'held')
                                  THEN to_timestamp(v.run_at)
                                  ELSE LEAST(to_timestamp(v.run_at), p_now::timestamptz)
                             END AS run_at) AS r
        RETURNING seq
    )
    SELECT min(seq), count(*) FROM inserted;
    END

function tierq_insert_tasks_uniform_keyed_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_keys jsonb, p_priorities smallint[], p_payloads jsonb, p_state text, p_run_at double precision, p_max_attempts integer, p_timeout integer) returns TABLE(id text, seq bigint) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    WITH b AS (SELECT nextval('tierq_task_seq') AS seq),
    v AS (
        SELECT v.id, v.tenant, v.key, v.priority, v.payload, b.seq + v.n - 1 AS seq
        FROM b, ROWS FROM (unnest(p_ids::uuid[]),
                           jsonb_array_elements_text(p_tenants::jsonb),
                           jsonb_array_elements_text(p_keys::jsonb),
                           unnest(p_priorities::smallint[]),
                           jsonb_array_elements(p_payloads::jsonb))
                WITH ORDINALITY AS v(id, tenant, key, priority, payload, n)
    ),
    r AS (
        SELECT s.state,
               CASE WHEN s.state IN ('delayed', 'waiting', 'held')
                    THEN to_timestamp(p_run_at::double precision)
                    ELSE LEAST(to_timestamp(p_run_at::double precision), p_now::timestamptz)
               END AS run_at,
               CASE WHEN s.state IN ('delayed', 'waiting', 'held') THEN NULL
                    ELSE p_now::timestamptz END AS ready_since
        FROM (SELECT p_state::text AS state) AS s
    ),
    plain AS (
        INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                                 run_at_initially, max_attempts, seq, created_at, ready_since,
                                 state_since, grp, timeout_seconds, trace)
        SELECT v.id, p_queue, v.tenant, NULL, v.priority, v.payload, r.state, r.run_at,
               r.run_at, p_max_attempts, v.seq, p_now, r.ready_since, p_now, NULL,
               p_timeout, NULL
        FROM r, v WHERE v.key IS NULL
    ),
    keyed AS (
        INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                                 run_at_initially, max_attempts, seq, created_at, ready_since,
                                 state_since, grp, timeout_seconds, trace)
        SELECT v.id, p_queue, v.tenant, v.key, v.priority, v.payload, r.state, r.run_at,
               r.run_at, p_max_attempts, v.seq, p_now, r.ready_since, p_now, NULL,
               p_timeout, NULL
        FROM r, v WHERE v.key IS NOT NULL
        ON CONFLICT (queue, tenant, key)
            WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
        DO NOTHING
        RETURNING id::text, seq
    )
    SELECT id, seq FROM keyed
    UNION ALL SELECT NULL, seq FROM b;
    END

function tierq_insert_tasks_uniform_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_priorities smallint[], p_payloads jsonb, p_state text, p_run_at double precision, p_max_attempts integer, p_timeout integer) returns TABLE(min bigint, count bigint) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                                 run_at_initially, max_attempts, seq, created_at, ready_since,
                                 state_since, grp, timeout_seconds, trace)
        SELECT v.id, p_queue, v.tenant, NULL, v.priority, v.payload, r.state, r.run_at,
               r.run_at, p_max_attempts, b.seq + v.n - 1, p_now, r.ready_since,
               p_now, NULL, p_timeout, NULL
        FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
             (SELECT s.state,
                     CASE WHEN s.state IN ('delayed', 'waiting', 'held')
                          THEN to_timestamp(p_run_at::double precision)
                          ELSE LEAST(to_timestamp(p_run_at::double precision),
                                     p_now::timestamptz)
                     END AS run_at,
                     CASE WHEN s.state IN ('delayed', 'waiting', 'held') THEN NULL
                          ELSE p_now::timestamptz END AS ready_since
              FROM (SELECT p_state::text AS state) AS s) AS r,
             ROWS FROM (unnest(p_ids::uuid[]),
                        jsonb_array_elements_text(p_tenants::jsonb),
                        unnest(p_priorities::smallint[]),
                        jsonb_array_elements(p_payloads::jsonb))
             WITH ORDINALITY AS v(id, tenant, priority, payload, n)
        RETURNING seq
    )
    SELECT min(seq), count(*) FROM inserted;
    END

function tierq_insert_tasks_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants jsonb, p_keys jsonb, p_priorities smallint[], p_payloads jsonb, p_states text[], p_run_ats double precision[], p_max_attempts integer[], p_grps jsonb, p_timeouts integer[], p_traces jsonb) returns TABLE(id text, seq bigint) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, grp, timeout_seconds, trace)
    SELECT v.id, p_queue, v.tenant, v.key, v.priority, v.payload, v.state, r.run_at, r.run_at,
           v.max_attempts, b.seq + v.n - 1, p_now,
           CASE WHEN v.state IN ('delayed', 'waiting', 'held') THEN NULL
                ELSE p_now::timestamptz END,
           p_now, v.grp, v.timeout_seconds, v.trace
    FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
         ROWS FROM (unnest(p_ids::uuid[]),
                    jsonb_array_elements_text(p_tenants::jsonb),
                    jsonb_array_elements_text(p_keys::jsonb),
                    unnest(p_priorities::smallint[]),
                    jsonb_array_elements(p_payloads::jsonb),
                    unnest(p_states::text[]),
                    unnest(p_run_ats::double precision[]),
                    unnest(p_max_attempts::int[]),
                    jsonb_array_elements_text(p_grps::jsonb),
                    unnest(p_timeouts::int[]),
                    jsonb_array_elements_text(p_traces::jsonb))
         WITH ORDINALITY AS v(id, tenant, key, priority, payload, state, run_at, max_attempts,
                              grp, timeout_seconds, trace, n),
         LATERAL (SELECT CASE WHEN v.state IN ('delayed', 'waiting', 'held')
                              THEN to_timestamp(v.run_at)
                              ELSE LEAST(to_timestamp(v.run_at), p_now::timestamptz)
                         END AS run_at) AS r
    ON CONFLICT (queue, tenant, key)
        WHERE key IS NOT NULL AND state IN ('delayed', 'cold', 'warm', 'held')
    DO NOTHING
    RETURNING id::text, seq;
    END

function tierq_lease_outcomes_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants text[], p_attempts integer[], p_errors text[], p_retry_ats timestamp with time zone[], p_deads boolean[], p_waited boolean) returns TABLE(id uuid, tenant text, state text, run_at timestamp with time zone, grp text) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    UPDATE tierq_tasks t
    SET attempts = v.attempt,
        last_error = v.error,
        state = CASE WHEN v.dead OR v.attempt >= t.max_attempts THEN 'dead' ELSE 'delayed' END,
        run_at = CASE WHEN v.dead OR v.attempt >= t.max_attempts THEN t.run_at ELSE v.retry_at END,
        finished_at = CASE WHEN v.dead OR v.attempt >= t.max_attempts
                           THEN p_now::timestamptz ELSE NULL END,
        ready_since = NULL,
        state_since = p_now
    FROM unnest(p_ids::uuid[], p_tenants::text[], p_attempts::int[], p_errors::text[],
                p_retry_ats::timestamptz[], p_deads::bool[])
         AS v(id, tenant, attempt, error, retry_at, dead)
    WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
      AND t.queue = p_queue AND t.tenant = v.tenant
      AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
      AND (t.waiters = 0 OR p_waited)  -- (waited: logic/flows.py, with the settlement)
    RETURNING t.id, t.tenant, t.state, t.run_at, t.grp;
    END

function tierq_lock_batches_v1(p_batches uuid[]) returns TABLE(count bigint) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    SELECT count(pg_advisory_xact_lock(hashtextextended(b::text, 30)))
    FROM (SELECT DISTINCT b FROM unnest(p_batches::uuid[]) AS b ORDER BY b) AS sorted;
    END

function tierq_move_out_of_batches_v1(p_queue text, p_ids uuid[], p_batches uuid[], p_places integer[], p_tenants text[]) returns TABLE(id text) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    WITH v AS (
        SELECT DISTINCT v.id, v.batch, v.place, v.tenant
        FROM unnest(p_ids::uuid[], p_batches::uuid[], p_places::int[],
                    p_tenants::text[]) AS v(id, batch, place, tenant)
    ),
    m AS MATERIALIZED (
        SELECT v.id, v.batch, v.place, b.queue,
               tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) AS tenant,
               b.priorities[v.place + 1] AS priority, b.payloads -> v.place AS payload,
               tierq_batch_seq(b.first_seq, b.seq_offsets, v.place) AS seq, b.max_attempts,
               b.timeout_seconds, b.created_at
        FROM v JOIN tierq_batches b ON b.id = v.batch
        WHERE (b.queue = p_queue::text OR p_queue::text IS NULL) AND v.place < b.tasks
          AND (tierq_batch_tenant(b.tenant_names, b.tenant_of, v.place) = v.tenant
               OR v.tenant IS NULL)
          AND NOT EXISTS (SELECT 1 FROM tierq_batch_ends e
                          WHERE e.batch = v.batch AND v.place = ANY(e.places))
        FOR KEY SHARE OF b
    ),
    ended AS (
        INSERT INTO tierq_batch_ends (batch, places, moved)
        SELECT batch, array_agg(place ORDER BY place), true FROM m GROUP BY batch
    )
    INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                             run_at_initially, max_attempts, seq, created_at, ready_since,
                             state_since, timeout_seconds)
    SELECT m.id, m.queue, m.tenant, NULL, m.priority, m.payload, 'warm', m.created_at,
           m.created_at, m.max_attempts, m.seq, m.created_at, m.created_at, m.created_at,
           m.timeout_seconds
    FROM m
    RETURNING id::text;
    END

function tierq_release_leased_v1(p_queue text, p_now timestamp with time zone, p_ids uuid[], p_tenants text[], p_attempts integer[]) returns TABLE(id uuid, queue text, tenant text, key text, state text, seq bigint, priority smallint, payload jsonb, attempts integer, max_attempts integer, created_at timestamp with time zone, parents text, grp text, timeout_seconds integer, trace text) language plpgsql volatile set plan_cache_mode=force_generic_plan
  grant to PUBLIC: EXECUTE
  grant to <app_group>: EXECUTE
  body:
    #variable_conflict use_column
    BEGIN
    RETURN QUERY
    UPDATE tierq_tasks t
    SET state_since = p_now
    FROM unnest(p_ids::uuid[], p_tenants::text[], p_attempts::int[]) AS v(id, tenant, attempt)
    WHERE t.id = ANY(ARRAY(SELECT unnest(p_ids::uuid[]))) AND t.id = v.id
      AND t.queue = p_queue AND t.tenant = v.tenant
      AND (t.state = 'warm') IS TRUE AND t.attempts < v.attempt
    RETURNING t.id, t.queue, t.tenant, t.key, t.state, t.seq, t.priority, t.payload, t.attempts,
              t.max_attempts, t.created_at, t.parents::text, t.grp, t.timeout_seconds, t.trace;
    END

schema (the current one)
  grant to PUBLIC: USAGE
  grant to <app_group>: USAGE

database
  grant to PUBLIC: CONNECT, TEMPORARY
  grant to <app_group>: CONNECT, TEMPORARY

default privileges in the schema
  for <owner> on sequences: grant to <app_group>: USAGE
  for <owner> on tables: grant to <app_group>: DELETE, INSERT, SELECT, UPDATE

role <app_group>: nosuperuser inherit nocreaterole nocreatedb nologin noreplication nobypassrls connection limit -1
