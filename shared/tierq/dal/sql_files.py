"""Named SQL queries, kept in ``sql/queries.sql`` as ``-- name: <name>`` blocks
(procrastinate's layout), loaded once."""

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
    text = resources.files("tierq.dal").joinpath("sql/queries.sql").read_text("utf-8")
    return parse_named_queries(text)


def query(name: str) -> str:
    """The SQL text of a named query."""
    try:
        return queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries.sql") from None
