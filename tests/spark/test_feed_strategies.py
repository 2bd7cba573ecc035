"""Source strategies: ``fair`` and ``prefer:<source>`` give the documented orders, in
Postgres (seq) and in what workers claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.spark.data import write_csv, write_json, write_parquet

pytestmark = pytest.mark.spark


def keys_in_line(database_url: str, queue: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT key FROM tierq_tasks WHERE queue = %s ORDER BY seq", (queue,))]


def rows(prefix: str, n: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "n": i} for i in range(n)]


@pytest.fixture
def three_sources(spark: Any, tmp_path: Path) -> list[str]:
    """a: 3 rows (parquet, two files), b: 1 row (csv), c: 2 rows (json)."""
    return [
        "--source", "a=" + write_parquet(spark, tmp_path / "a", rows("a", 3), files=2),
        "--source", "b=" + write_csv(tmp_path / "b.csv", rows("b", 1)),
        "--source", "c=" + write_json(tmp_path / "c.json", rows("c", 2)),
    ]


def test_fair_round_robin_across_sources(feed: Any, three_sources: list[str],
                                         database_url: str, engine: Any) -> None:
    result = feed("--queue", "q", *three_sources, "--key-column", "id")
    assert result.line() == "created=6 ignored=0 deferred=0 rejected=0"
    expected = ["a0", "b0", "c0", "a1", "c1", "a2"]
    assert keys_in_line(database_url, "q") == expected
    claimed = engine.claim("q", max=10)
    assert [t.key for t in claimed] == expected


def test_prefer_one_source_then_fair(feed: Any, three_sources: list[str],
                                     database_url: str, engine: Any) -> None:
    result = feed("--queue", "q", *three_sources, "--key-column", "id",
                  "--strategy", "prefer:c")
    assert result.created == 6
    expected = ["c0", "c1", "a0", "b0", "a1", "a2"]
    assert keys_in_line(database_url, "q") == expected
    assert [t.key for t in engine.claim("q", max=10)] == expected
