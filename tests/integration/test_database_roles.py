"""Least privilege in PostgreSQL: the application logs in as a member of the database's
group role (migration 0007), may read and write tierq's tables, and cannot change the
schema; each database on a server has its own group; a login cloned the way an
alternating-user rotation clones it works with no settings of its own.

``make_tq`` engines already log in as the application role (tests/support/stores.py), so every
engine test exercises the grants; the tour here runs each kind of operation once more and
the refusals prove the role is no more than that."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from tests.support.every_task import EVERY_TASK
from tests.support.stores import app_login, migrated_database, with_database, with_login
from tierq.config import Settings
from tierq.dal.migrate import app_group, ensure_app_login, migrate
from tierq.dal.postgres import Database, execute_text
from tierq.engine import Tierq
from tierq.local.services import LocalServices
from tierq.logic.context import OffsetClock


def role_of(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_user AS login, r.rolsuper, r.rolcreaterole, r.rolcreatedb,"
            " (SELECT count(*) FROM pg_db_role_setting s WHERE s.setrole = r.oid) AS settings"
            " FROM pg_roles r WHERE r.rolname = current_user").fetchone()
        assert row is not None
        return dict(zip(("login", "super", "createrole", "createdb", "settings"), row,
                        strict=True))


def count(pg: psycopg.Connection[Any], where: str = "true") -> int:
    """Tasks PostgreSQL holds (a batch row's members too) that match ``where``."""
    row = pg.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE {where}").fetchone()
    assert row is not None
    return int(row[0])


def test_engines_in_the_tests_log_in_as_a_plain_member_of_the_group(
        app_database_url: str, database_url: str) -> None:
    me = role_of(app_database_url)
    assert me["login"].startswith("tierq_login_")
    assert not (me["super"] or me["createrole"] or me["createdb"]) and me["settings"] == 0
    with psycopg.connect(database_url, autocommit=True) as owner:
        group = app_group(owner)
        member = owner.execute("SELECT pg_has_role(%s, %s, 'MEMBER')",
                               (me["login"], group)).fetchone()
    assert member == (True,)
    assert group == "tierq_app_" + database_url.rsplit("/", 1)[1]


def test_the_application_role_runs_every_kind_of_operation(make_tq: Any, pg: Any) -> None:
    tq: Tierq = make_tq(max_attempts=1)
    # enqueue: keyless, keyed, delayed, another tenant
    tq.enqueue("q", [{"payload": {"n": i}} for i in range(6)])
    tq.enqueue_one("q", {"k": 1}, key="k1")
    tq.enqueue_one("q", {"later": True}, delay_seconds=3600)
    tq.enqueue_one("q", {"t": "acme"}, tenant="acme")
    assert count(pg) == 9
    # claim, ack, nack (to the dead letters: max_attempts=1), release, heartbeat
    claimed = tq.claim("q", max=6)
    assert len(claimed) == 6
    assert tq.ack("q", claimed[:2]).acked
    tq.nack("q", [{"id": t.id, "lease_token": t.lease_token, "error": "boom"}
                  for t in claimed[2:4]])
    tq.heartbeat("q", [{"id": claimed[4].id, "lease_token": claimed[4].lease_token}])
    tq.release("q", [claimed[5]])
    assert count(pg, "state = 'dead'") == 2
    # dead letters: list, replay one, purge the other
    dead = tq.dlq_list("q")
    assert dead
    tq.dlq_replay("q", ids=[claimed[2].id])
    tq.dlq_purge("q", ids=[claimed[3].id])
    assert count(pg, "state = 'dead'") == 0
    # tasks, queues and metrics
    tq.get_task("q", claimed[4].id)
    tq.cancel_task("q", claimed[5].id)
    tq.put_queue("q", {"warm_max": 100})
    tq.pause("q")
    tq.resume("q")
    tq.get_queue("q")
    tq.list_queues()
    tq.detailed_counts()
    tq.running()
    # schedules and every maintenance pass
    tq.put_schedule("tour", {"queue": "s", "payload": 1, "every_seconds": 60})
    tq.run_cron_tick()
    tq.list_schedules()
    tq.get_schedule("tour")
    tq.ctx.clock.advance(7200)
    tq.run_delayed_mover()
    tq.run_cold_to_warm()
    tq.run_reaper()
    tq.delete_schedule("tour")
    # purge a queue (DELETE: the application has no TRUNCATE)
    tq.purge_queue("q")
    assert count(pg, "queue = 'q'") == 0


def test_the_feeder_write_path_runs_as_the_application_role(make_tq: Any, pg: Any) -> None:
    """The Glue job's statements, through the engine's bulk path as the feeder calls it: a
    feed's advisory lock and offsets, places in line, the TEMP staging table, COPY and the
    insert from it."""
    from tierq.dal.store.rows import FeedOffsetRow
    from tierq.logic import bulk, feed

    tq = make_tq()
    rows = [(i, "_", f"k{i}", 0, f'{{"n":{i}}}', None) for i in range(3)]
    with feed.feed_lock(tq.ctx, "feed"), tq.bulk_load("fed", rows=3, tenants=["_"]) as load:
        with tq.bulk_writer(load) as writer:
            assert writer.write(bulk.copy_text(rows), tenants=["_"]) == 3
        feed.save_offsets(tq.ctx, "feed", [FeedOffsetRow("s", "", 3, "2")])
        assert [o.rows_done for o in feed.load_offsets(tq.ctx, "feed")] == [3]
        feed.reset_offsets(tq.ctx, "feed")
    assert tq.bulk_warm_up("fed", ["_"]) == 3
    assert count(pg, "queue = 'fed'") == 3


REFUSED = [
    "CREATE TABLE tierq_intruder (id int)",
    "CREATE TABLE public.intruder (id int)",
    "DROP TABLE tierq_tasks",
    "ALTER TABLE tierq_tasks ADD COLUMN intruder int",
    "CREATE INDEX intruder ON tierq_tasks (queue)",
    "TRUNCATE tierq_tasks",
    "TRUNCATE tierq_queues",
    "INSERT INTO tierq_schema_migrations (version, name, checksum) VALUES ('9999', 'x', 'x')",
    "DELETE FROM tierq_schema_migrations",
    "ALTER SEQUENCE tierq_task_seq RESTART",
    "SELECT setval('tierq_task_seq', 1)",
    "CREATE FUNCTION intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "SELECT tierq_grant_app_group()",
    "CREATE ROLE intruder",
    "CREATE SCHEMA intruder",
]


@pytest.mark.parametrize("statement", REFUSED)
def test_the_application_role_cannot_change_the_schema(app_database_url: str,
                                                       statement: str) -> None:
    with psycopg.connect(app_database_url, autocommit=True) as conn, \
            pytest.raises(errors.InsufficientPrivilege):
        conn.execute(statement)  # type: ignore[arg-type]


def test_the_application_role_may_read_the_migrations_record(app_database_url: str) -> None:
    with psycopg.connect(app_database_url, autocommit=True) as conn:
        versions = [r[0] for r in conn.execute(
            "SELECT version FROM tierq_schema_migrations ORDER BY version")]
    assert "0007" in versions


@pytest.fixture
def two_databases(services: LocalServices) -> Iterator[tuple[str, str]]:
    admin = services.postgres.url
    with migrated_database(admin, "tierq_roles_a") as a, \
            migrated_database(admin, "tierq_roles_b") as b:
        yield a, b


def test_each_database_on_one_server_has_its_own_group(two_databases: tuple[str, str]) -> None:
    a, b = two_databases
    with psycopg.connect(a, autocommit=True) as conn_a, \
            psycopg.connect(b, autocommit=True) as conn_b:
        group_a, group_b = app_group(conn_a), app_group(conn_b)
    assert group_a != group_b
    assert migrate(a) == [] and migrate(b) == []  # idempotent: a second run changes nothing
    with app_login(a) as login_a, app_login(b) as login_b:
        for login, other in ((login_a, b), (login_b, a)):
            # PUBLIC may connect to any database, but the other database's tables are not
            # granted to this login's group
            other_as_login = with_database(login, other.rsplit("/", 1)[1])
            with psycopg.connect(other_as_login, autocommit=True) as conn, \
                    pytest.raises(errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM tierq_tasks")
        with psycopg.connect(login_a, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)


def test_a_long_database_name_gets_a_short_group_name(services: LocalServices) -> None:
    with migrated_database(services.postgres.url, "tierq_" + "l" * 40) as url, \
            psycopg.connect(url, autocommit=True) as conn:
        name = url.rsplit("/", 1)[1]
        group = app_group(conn)
        assert len(name) > 53 and len(group.encode()) <= 63 and group.startswith("tierq_app_")
        assert conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                            (group,)).fetchone() == (1,)


def test_tables_of_later_migrations_are_granted(services: LocalServices) -> None:
    """Default privileges cover a table the owner adds after 0007, and every migration run
    grants again (a table created without them, e.g. by another owner, heals)."""
    with migrated_database(services.postgres.url, "tierq_roles_later") as url, \
            app_login(url) as login:
        with psycopg.connect(url, autocommit=True) as owner:
            owner.execute("CREATE TABLE tierq_later (id int PRIMARY KEY)")
            owner.execute("CREATE TABLE tierq_revoked (id int PRIMARY KEY)")
            owner.execute(sql.SQL("REVOKE ALL ON tierq_revoked FROM {}").format(
                sql.Identifier(app_group(owner))))
        with psycopg.connect(login, autocommit=True) as app:
            app.execute("INSERT INTO tierq_later VALUES (1)")
            with pytest.raises(errors.InsufficientPrivilege):
                app.execute("INSERT INTO tierq_revoked VALUES (1)")
        migrate(url)
        with psycopg.connect(login, autocommit=True) as app:
            app.execute("INSERT INTO tierq_revoked VALUES (1)")
            app.execute("DELETE FROM tierq_later")


def test_a_rotation_clone_works_with_no_settings_of_its_own(
        database_url: str, valkey_url: str, clean_stores: None) -> None:
    """What the alternating-user rotation does (as the owner): CREATE ROLE <login>_clone
    WITH LOGIN PASSWORD ..., GRANT <login> TO <login>_clone. tierq needs nothing more: no
    per-login settings (its timeouts are SET LOCAL), no privileges but the group's."""
    with app_login(database_url) as login_url:
        login = role_of(login_url)["login"]
        clone, password = f"{login}_clone", uuid.uuid4().hex
        with psycopg.connect(database_url, autocommit=True) as owner:
            owner.execute(sql.SQL("CREATE ROLE {} WITH LOGIN PASSWORD {}").format(
                sql.Identifier(clone), sql.Literal(password)))
            owner.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(login),
                                                           sql.Identifier(clone)))
        clone_url = with_login(database_url, clone, password)
        try:
            assert role_of(clone_url)["settings"] == 0
            tq = Tierq(settings=Settings(database_url=clone_url, valkey_url=valkey_url,
                                         statement_timeout_ms=2000, lock_timeout_ms=500,
                                         settings_cache_seconds=0.0),
                       clock=OffsetClock())
            try:
                tq.enqueue_one("rotated", {"n": 1})
                [task] = tq.claim("rotated")
                assert tq.ack("rotated", [task]).acked
                with tq.db.connection() as conn:
                    row = execute_text(conn, "SELECT current_user AS u, current_setting("
                                             "'statement_timeout') AS t").fetchone()
                assert row == {"u": clone, "t": "2s"}
            finally:
                tq.close()
            # the migrate function, run again after a rotation, finds the clone in the
            # secret: it sets the password it is given and keeps the membership
            ensure_app_login(database_url, clone, password)
            role_of(clone_url)
        finally:
            with psycopg.connect(database_url, autocommit=True) as owner:
                owner.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(clone)))


def test_ensure_app_login_refuses_the_owner_and_empty_credentials(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        owner = conn.execute("SELECT current_user").fetchone()
        group = app_group(conn)
    assert owner is not None
    with pytest.raises(ValueError, match="must not be the owner"):
        ensure_app_login(database_url, owner[0], "secret")
    with pytest.raises(ValueError, match="must not be the group"):
        ensure_app_login(database_url, group, "secret")
    with pytest.raises(ValueError, match="username and a password"):
        ensure_app_login(database_url, "tierq_nobody", "")


def test_a_connection_refused_after_a_rotation_retries_with_the_secret_fetched_fresh(
        app_database_url: str) -> None:
    """After an alternating-user rotation RDS Proxy knows only the new login: a container
    whose cached secret still names the old one fails to connect, gives up, and the next
    attempt asks for the secret fresh."""
    asked: list[bool] = []
    stale = with_login(app_database_url, "tierq_rotated_away", "old-password")

    def resolve(fresh: bool) -> str:
        asked.append(fresh)
        return app_database_url if fresh else stale

    db = Database("postgresql://unused", min_size=1, max_size=1, timeout=10,
                  resolve_url=resolve)
    try:
        with db.connection() as conn:
            assert execute_text(conn, "SELECT 1 AS one").fetchone() == {"one": 1}
    finally:
        db.close()
    assert asked[0] is False and True in asked
