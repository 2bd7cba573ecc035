"""Checks on JSON text as tierq serialises it (orjson, or Spark's ``to_json``).

PostgreSQL's ``jsonb`` cannot hold the NUL character, which JSON text writes as the escape
``\\u0000``. A string that merely contains the six characters backslash, ``u``, ``0000``
is written with its backslash escaped (``\\\\u0000``) and is not a NUL: an escape starts at
a backslash preceded by an even number of backslashes."""

from __future__ import annotations

import re

NUL_ESCAPE = rb"\u0000"
# the escape of a NUL: \u0000 after an even number (0, 2, …) of backslashes; the same
# pattern (as text) is what the Spark feeder's rlike uses
NUL_ESCAPE_PATTERN = r"(?<!\\)(?:\\\\)*\\u0000"
_NUL_ESCAPE_RE = re.compile(NUL_ESCAPE_PATTERN.encode())


def has_nul(json_text: bytes) -> bool:
    """Whether this JSON text holds a NUL character anywhere (in a string or a key). The
    plain substring test keeps the common case a single scan."""
    return NUL_ESCAPE in json_text and _NUL_ESCAPE_RE.search(json_text) is not None
