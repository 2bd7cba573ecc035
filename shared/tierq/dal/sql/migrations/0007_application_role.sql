-- tierq schema, version 7: the application role.
--
-- Only the migrations run as the owner (DDL). Everything else — the HTTP and scheduled
-- functions, the Glue job, `tierq dev` — logs in as an application login that is a member
-- of this database's group role, which may read and write tierq's tables and use its
-- sequence: no CREATE, ALTER, DROP or TRUNCATE, no schema changes, no roles.
--
-- * Roles are cluster-wide in PostgreSQL: the group's name carries the database's name, so
--   two databases on one server (the test suite makes many) never share or fight over one.
-- * Logins hold no privileges and no settings of their own: an alternating-user rotation
--   clones a login (CREATE ROLE <login>_clone LOGIN, GRANT <login> TO it), which carries the
--   memberships over but not per-role settings; timeouts are set per transaction by tierq.
-- * Tables and sequences the owner creates later in this schema are granted by default
--   privileges, and every migration run grants again (tierq_grant_app_group), so later
--   migrations need nothing of their own.
-- * Advisory locks need no privilege; the feeder's TEMP staging table needs TEMPORARY.

CREATE FUNCTION tierq_app_group() RETURNS text
LANGUAGE sql STABLE
AS $$
    -- at most 63 bytes (NAMEDATALEN - 1): a long database name is hashed
    SELECT CASE WHEN octet_length(current_database()) <= 53
                THEN 'tierq_app_' || current_database()
                ELSE 'tierq_app_' || md5(current_database()) END
$$;

CREATE FUNCTION tierq_grant_app_group() RETURNS text
LANGUAGE plpgsql
AS $$
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
$$;

-- Only the owner grants (the application must not run it on tables it cannot see).
REVOKE EXECUTE ON FUNCTION tierq_grant_app_group() FROM PUBLIC;

SELECT tierq_grant_app_group();
