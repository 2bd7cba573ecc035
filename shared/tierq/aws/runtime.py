"""What a Lambda execution environment keeps between invocations: the engine (connections to
PostgreSQL and Valkey, opened on first use and reused) and the Powertools Logger and Tracer.

The Tracer exists only when tracing is on (:func:`tracing_enabled`): constructing
Powertools' ``Tracer`` imports the X-Ray SDK (outside Lambda also botocore's session), even
when it is disabled, which was a fifth of a function's cold import. With tracing off the
handlers are decorated by :class:`UntracedTracer`, which leaves them as they are.

On AWS the database URL comes from the Secrets Manager secret named by ``DB_SECRET_ARN``
(fetched through Powertools parameters, cached); elsewhere from ``DATABASE_URL``
(see :mod:`tierq.dal.connect`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Tracer

from tierq.config import get_settings
from tierq.engine import Tierq

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "tierq")

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])

# strtobool's truthy words, as Powertools reads POWERTOOLS_TRACE_DISABLED
TRUTHY = frozenset({"1", "y", "yes", "t", "true", "on"})


def tracing_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Powertools' own rule for its Tracer: off when POWERTOOLS_TRACE_DISABLED is true,
    outside Lambda (no LAMBDA_TASK_ROOT) and under SAM local or Chalice's local mode."""
    if environ.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() in TRUTHY:
        return False
    if not environ.get("LAMBDA_TASK_ROOT"):
        return False
    return not (environ.get("AWS_SAM_LOCAL") or environ.get("AWS_CHALICE_CLI_MODE"))


class UntracedTracer:
    """The part of Powertools' ``Tracer`` that tierq uses, for when tracing is off: the
    decorators return the function unchanged and annotations go nowhere, and nothing of
    X-Ray is imported."""

    disabled = True

    def __init__(self, service: str) -> None:
        self.service = service

    def capture_lambda_handler(self, lambda_handler: HandlerT | None = None,
                               capture_response: bool | None = None,
                               capture_error: bool | None = None) -> Any:
        return lambda_handler if lambda_handler is not None else _unchanged

    def capture_method(self, method: HandlerT | None = None,
                       capture_response: bool | None = None,
                       capture_error: bool | None = None) -> Any:
        return method if method is not None else _unchanged

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass


def _unchanged(function: HandlerT) -> HandlerT:
    return function


logger = Logger(service=SERVICE)
tracer: Tracer | UntracedTracer = (
    Tracer(service=SERVICE) if tracing_enabled() else UntracedTracer(SERVICE))

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
            settings = get_settings()
            _engine = Tierq(settings=settings)
            if settings.dispatcher_function:  # (boto3 is imported only then)
                from tierq.aws.consumers import install_waker

                install_waker(settings)
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
