"""Valkey's error replies sorted by what they speak for: the whole server, or one pair's keys.

Maintenance passes and claims over several tenants go on past one pair whose keys a script
refuses (a key of the wrong type, an entry no script can read), but not past a reply every
pair would get. redis-py makes most error codes a class of their own (and strips the code
from the message); the others keep it as the message's first word.
"""

from __future__ import annotations

import redis

SERVER_WIDE: tuple[type[redis.RedisError], ...] = (
    redis.exceptions.ReadOnlyError, redis.exceptions.NoPermissionError,
    redis.exceptions.NoScriptError, redis.exceptions.ExecAbortError,
    redis.exceptions.AskError, redis.exceptions.TryAgainError,
    redis.exceptions.ClusterError, redis.exceptions.ClusterCrossSlotError,
    redis.exceptions.OutOfMemoryError)
SERVER_WIDE_CODES = frozenset({"BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "NOAUTH"})


def server_wide(exc: redis.ResponseError) -> bool:
    """Whether an error reply speaks for the whole server, not for one pair's keys."""
    return isinstance(exc, SERVER_WIDE) or str(exc).split(" ", 1)[0] in SERVER_WIDE_CODES
