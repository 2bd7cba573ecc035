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
                 "lock_due_skipping"):
        assert name in loaded and loaded[name].strip()


def test_migrations_are_ordered_and_numbered_once():
    found = migrate.available()
    versions = [m.version for m in found]
    assert versions == sorted(versions)
    assert versions[0] == "0001"
    assert len(set(versions)) == len(versions)
