"""The session's private Valkey with its memory bound for a test: ``noeviction``, so a
write past ``maxmemory`` fails with a real OOM reply, and the server's settings restored
afterwards whatever the test set."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis


@contextmanager
def memory_bound(valkey: redis.Redis) -> Iterator[dict[str, str]]:
    """Policy ``noeviction`` for the block; yields the ``maxmemory*`` settings before it,
    which are restored on the way out (the block sets ``maxmemory`` as it needs)."""
    before = valkey.config_get("maxmemory*")
    valkey.config_set("maxmemory-policy", "noeviction")
    try:
        yield before
    finally:
        valkey.config_set("maxmemory", before["maxmemory"])
        valkey.config_set("maxmemory-policy", before["maxmemory-policy"])
