"""The named-query loader and the migration files."""

from __future__ import annotations

import pytest

from tierq.dal import migrate
from tierq.dal.sql_files import parse_named_queries, queries


def test_parses_named_blocks_and_strips_comments():
    text = "-- name: a\n-- about a\nSELECT 1;\n\n-- name: b\nSELECT 2\n"
    assert parse_named_queries(text) == {"a": "SELECT 1", "b": "SELECT 2"}


def test_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="defined twice"):
        parse_named_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")


def test_every_shipped_query_loads():
    loaded = queries()
    for name in ("insert_tasks", "make_ready", "promote_cold", "lease_outcomes",
                 "pairs_come_due", "lock_due_of_pairs"):
        assert name in loaded and loaded[name].strip()


def test_migrations_are_ordered_and_numbered_once():
    found = migrate.available()
    versions = [m.version for m in found]
    assert versions == sorted(versions)
    assert versions[0] == "0001"
    assert len(set(versions)) == len(versions)


def test_a_migration_says_it_runs_outside_a_transaction_in_its_leading_comments():
    header = migrate.Migration("0099", "m", "-- what it does\n-- tierq: no-transaction\n"
                               "DROP INDEX CONCURRENTLY IF EXISTS i;\n"
                               "CREATE INDEX CONCURRENTLY i ON t (a); -- the index\n"
                               "\n-- done\n")
    assert not header.transactional
    assert header.statements() == ["DROP INDEX CONCURRENTLY IF EXISTS i",
                                   "CREATE INDEX CONCURRENTLY i ON t (a)"]
    later = migrate.Migration("0099", "m", "SELECT 1;\n-- tierq: no-transaction\n")
    assert later.transactional  # (only the leading comments count)
    assert migrate.Migration("0099", "m", "CREATE TABLE t (a int);\n").transactional


def test_a_no_transaction_migration_with_a_function_body_is_refused():
    body = migrate.Migration("0099", "m", "-- tierq: no-transaction\n"
                             "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql;\n")
    with pytest.raises(RuntimeError, match="0099_m is no-transaction"):
        body.statements()


def test_every_shipped_concurrent_build_can_be_repeated():
    """A no-transaction migration stopped half way is applied again from its start, so each
    concurrent index build must follow a DROP INDEX CONCURRENTLY IF EXISTS of its index
    (an invalid index left by a failed build is dropped, not kept)."""
    import re

    build = re.compile(r"CREATE (?:UNIQUE )?INDEX CONCURRENTLY (\w+)", re.IGNORECASE)
    for m in migrate.available():
        if m.transactional:
            assert "CONCURRENTLY" not in m.sql.upper(), (
                f"{m.version}_{m.name} builds concurrently inside a transaction: mark it "
                f"'{migrate.NO_TRANSACTION}'")
            continue
        dropped: set[str] = set()
        for statement in m.statements():
            drop = re.match(r"DROP INDEX CONCURRENTLY IF EXISTS (\w+)", statement, re.I)
            if drop:
                dropped.add(drop[1])
            made = build.match(statement)
            if made:
                assert made[1] in dropped, f"{m.version}_{m.name}: {made[1]} is not dropped first"
