"""A JDBC source (PostgreSQL through Spark's JDBC reader): rows in order-column order,
progress kept on the order column's last value, rows inserted later picked up."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.support.spark import JDBC_JAR
from tierq.engine import Tierq

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not os.path.exists(JDBC_JAR),
                       reason=f"{JDBC_JAR} missing (apt-get install libpostgresql-jdbc-java)"),
]


def jdbc_url(database_url: str) -> str:
    parts = urlsplit(database_url)
    user = f"?user={parts.username}" if parts.username else ""
    password = f"&password={parts.password}" if parts.password else ""
    return f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}{user}{password}"


@pytest.fixture
def orders(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS feeder_src_orders")
        conn.execute("CREATE TABLE feeder_src_orders (id bigint PRIMARY KEY, ref text, "
                     "urgency int, customer text)")
        yield conn
        conn.execute("DROP TABLE feeder_src_orders")


def insert(conn: psycopg.Connection[Any], ids: range) -> None:
    conn.execute("INSERT INTO feeder_src_orders SELECT i, 'ref-' || i, mod(i, 3), 'c' || i "
                 "FROM unnest(%s::bigint[]) AS i", (list(ids),))


def test_jdbc_table_resumes_on_the_order_column(feed: Any, orders: Any, database_url: str,
                                                engine: Tierq) -> None:
    # inserted out of order: the feed follows the order column, not the heap
    insert(orders, range(6, 0, -1))
    args = ["--queue", "orders", "--source", f"db={jdbc_url(database_url)}",
            "--jdbc-table", "db=public.feeder_src_orders", "--order-column", "db=id",
            "--key-column", "ref", "--priority-column", "urgency", "--max-backlog", "4"]
    first = feed(*args)
    assert (first.created, first.deferred) == (4, 2)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT rows_done, last_value FROM tierq_feeder_offsets "
                            "WHERE feed = 'orders' AND source = 'db' AND part = ''"
                            ).fetchone() == (4, "4")
    claimed = engine.claim("orders", max=10)
    # claims go by priority, then by order-column order within a priority
    assert [t.key for t in claimed] == ["ref-2", "ref-1", "ref-4", "ref-3"]
    assert claimed[2].payload == {"id": 4, "ref": "ref-4", "urgency": 1, "customer": "c4"}
    engine.ack("orders", [{"id": t.id, "lease_token": t.lease_token} for t in claimed])

    insert(orders, range(7, 9))
    second = feed(*args)
    assert (second.created, second.deferred) == (4, 0)
    assert sorted(t.key or "" for t in engine.claim("orders", max=10)) == [
        "ref-5", "ref-6", "ref-7", "ref-8"]


def test_jdbc_query_source(feed: Any, orders: Any, database_url: str, engine: Tierq) -> None:
    insert(orders, range(1, 5))
    result = feed("--queue", "q", "--source", f"db={jdbc_url(database_url)}",
                  "--jdbc-query", "db=SELECT id, ref, customer FROM feeder_src_orders "
                                  "WHERE id % 2 = 0",
                  "--order-column", "db=id", "--key-column", "ref",
                  "--payload-columns", "customer")
    assert result.created == 2
    assert [(t.key, t.payload) for t in engine.claim("q", max=10)] == [
        ("ref-2", {"customer": "c2"}), ("ref-4", {"customer": "c4"})]
