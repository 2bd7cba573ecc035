"""Named SQL queries, kept in ``sql/queries/*.sql`` as ``-- name: <name>`` blocks
(procrastinate's layout), loaded once. Names are unique across the files."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse_named_queries(text: str) -> dict[str, str]:
    """Split a file of ``-- name: x`` blocks into {name: sql}."""
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for i in range(1, len(parts), 2):
        name, body = parts[i], parts[i + 1]
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        sql = "\n".join(lines).strip().rstrip(";")
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = sql
    return queries


@cache
def queries() -> dict[str, str]:
    folder = resources.files("tierq.dal").joinpath("sql/queries")
    merged: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, sql in parse_named_queries(entry.read_text("utf-8")).items():
            if name in merged:
                raise ValueError(f"query {name!r} is defined in two files (second: {entry.name})")
            merged[name] = sql
    return merged


def query(name: str) -> str:
    """The SQL text of a named query."""
    try:
        return queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries/*.sql") from None
