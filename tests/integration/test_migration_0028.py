"""Migration 0028 on a database with delayed rows: tierq_tasks_delayed_line is built (valid,
CONCURRENTLY: a no-transaction migration, tierq.dal.migrate) and tierq_tasks_delayed_pair
dropped; tierq_tasks_delayed_due stays, and the rows are as they were."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.stores import scratch_database
from tierq.dal import migrate as migrations

DELAYED_INDEXES = ("SELECT c.relname, i.indisvalid, pg_get_indexdef(i.indexrelid)"
                   " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                   " WHERE i.indrelid = 'tierq_tasks'::regclass"
                   " AND c.relname LIKE 'tierq_tasks_delayed%' ORDER BY 1")
LINE = ("CREATE INDEX tierq_tasks_delayed_line ON public.tierq_tasks USING btree (queue, tenant,"
        " run_at, seq) WITH (fillfactor='70') WHERE (state = 'delayed'::text)")


@pytest.fixture
def before_0028(services: Any) -> Iterator[str]:
    """A database at migration 0027 with delayed rows of two pairs."""
    with scratch_database(services.postgres.url, "tierq_m28") as url:
        migrations.migrate(url, migrations=[m for m in migrations.available()
                                            if m.version < "0028"])
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO tierq_tasks (id, queue, tenant, payload, state, run_at,"
                " run_at_initially, max_attempts, seq, created_at, state_since)"
                " SELECT gen_random_uuid(), 'q', 't' || (g % 2), '{}', 'delayed',"
                " now() + g * interval '1 s', now(), 3, g, now(), now()"
                " FROM generate_series(1, 100) AS g")
        yield url


def test_it_builds_the_line_and_drops_the_pair_index(before_0028: str) -> None:
    assert not next(m for m in migrations.available() if m.version == "0028").transactional
    assert migrations.migrate(before_0028, migrations=[
        m for m in migrations.available() if m.version <= "0028"]) == ["0028"]
    with psycopg.connect(before_0028, autocommit=True) as conn:
        indexes = conn.execute(DELAYED_INDEXES).fetchall()
        assert [(name, valid) for name, valid, _ in indexes] == [
            ("tierq_tasks_delayed_due", True), ("tierq_tasks_delayed_line", True)]
        assert indexes[1][2] == LINE
        counts = conn.execute("SELECT tenant, count(*) FROM tierq_tasks WHERE state ="
                              " 'delayed' AND queue = 'q' GROUP BY 1 ORDER BY 1").fetchall()
        assert counts == [("t0", 50), ("t1", 50)]
    assert migrations.migrate(before_0028, migrations=[
        m for m in migrations.available() if m.version <= "0028"]) == []
