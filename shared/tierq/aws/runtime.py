"""What a Lambda execution environment keeps between invocations: the engine (connections to
PostgreSQL and Valkey, opened on first use and reused) and the Powertools Logger and Tracer.

On AWS the database URL comes from the Secrets Manager secret named by ``DB_SECRET_ARN``
(fetched through Powertools parameters, cached); elsewhere from ``DATABASE_URL``
(see :mod:`tierq.dal.connect`).
"""

from __future__ import annotations

import os
import threading

from aws_lambda_powertools import Logger, Tracer

from tierq.config import get_settings
from tierq.engine import Tierq

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "tierq")

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)

_engine: Tierq | None = None
_engine_lock = threading.Lock()


def engine() -> Tierq:
    """The execution environment's engine, created on first use from the environment."""
    global _engine
    current = _engine
    if current is not None:
        return current
    with _engine_lock:
        if _engine is None:
            _engine = Tierq(settings=get_settings())
            logger.debug("engine created")
        return _engine


def reset_engine() -> None:
    """Close the engine and forget the settings read from the environment, so the next
    :func:`engine` call starts afresh (tests; the local stack on shutdown)."""
    global _engine
    with _engine_lock:
        if _engine is not None:
            _engine.close()
            _engine = None
        get_settings.cache_clear()
