"""What a Lambda execution environment keeps between invocations: the engine (connections to
PostgreSQL and Valkey, opened on first use and reused) and the Powertools Logger and Tracer.

The Tracer exists only when tracing is on (:func:`tracing_enabled`): constructing
Powertools' ``Tracer`` imports the X-Ray SDK (outside Lambda also botocore's session), even
when it is disabled, which was a fifth of a function's cold import. With tracing off the
handlers are decorated by :class:`UntracedTracer`, which leaves them as they are.

On AWS the database URL comes from the Secrets Manager secret named by ``DB_SECRET_ARN``
(fetched through Powertools parameters, cached); elsewhere from ``DATABASE_URL``
(see :mod:`tierq.dal.connect`).

A deployment with several PostgreSQL shards (``TIERQ_SHARD_URLS``, :mod:`tierq.dal.shards`)
is served by a :class:`~tierq.sharded.ShardedTierq` instead of one ``Tierq``: :func:`engine`
returns whichever the deployment has, typed as their contract
(:class:`tierq.contract.Deployment`); :func:`pair_engine` is the engine of one (queue,
tenant) pair's shard, and :func:`shard_engines` every shard's, for what is read or written
per shard (lists, dead letters, schedules). One database is one shard.

With Lambda SnapStart (template.yaml's ``SnapStart`` parameter) an execution environment
may resume from a snapshot of another's initialisation, as many times as Lambda scales out.
:func:`after_restore` runs first in each of them (registered with ``snapshot_restore_py``,
which exists only in Lambda's Python runtimes): it drops the engine, whose pooled
PostgreSQL and Valkey connections belong to the environment that was snapshotted (the next
request opens its own), and re-seeds what would otherwise repeat in every copy:

| state | after a restore |
| --- | --- |
| the engine (connection pools, IAM tokens) | closed and forgotten; the next request builds one |
| ``random``'s generator | re-seeded from the system's entropy |
| the task-id counter (``tierq.core.ids``) | forgotten; the next id draws a fresh one |
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger, Tracer

from tierq.config import Settings, SettingsError, get_settings
from tierq.contract import Deployment
from tierq.core import ids
from tierq.dal.shards import (
    ShardSpec,
    parse_shard_names,
    parse_shard_urls,
    shards_from_settings,
)
from tierq.engine import Tierq

if TYPE_CHECKING:
    from tierq.logic.dispatch.invocation import ConsumerFunctions

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])
T = TypeVar("T")


def tracing_enabled(settings: Settings) -> bool:
    """Powertools' own rule for its Tracer: off when POWERTOOLS_TRACE_DISABLED is true,
    outside Lambda (no LAMBDA_TASK_ROOT) and under SAM local or Chalice's local mode."""
    if settings.powertools_trace_disabled or not settings.lambda_task_root:
        return False
    return not (settings.aws_sam_local or settings.aws_chalice_cli_mode)


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


def _settings_at_import() -> Settings:
    """The settings the logger and the tracer are built with, before any request. With a
    bad setting, the defaults: the initialisation goes on, and each request fails naming
    the variable, when the engine reads the settings (``get_settings``)."""
    try:
        return get_settings()
    except SettingsError:
        return Settings.from_environ({})


_AT_IMPORT = _settings_at_import()
SERVICE = _AT_IMPORT.powertools_service_name
logger = Logger(service=SERVICE)
tracer: Tracer | UntracedTracer = (
    Tracer(service=SERVICE) if tracing_enabled(_AT_IMPORT) else UntracedTracer(SERVICE))

_engine: Deployment | None = None
_engine_lock = threading.Lock()
# the consumer functions the engines' contexts get when they are built (use_consumers)
_consumers: ConsumerFunctions | None = None


def shard_specs(settings: Settings) -> list[ShardSpec] | None:
    """The deployment's shards when it names more than one, else None (one database:
    ``DATABASE_URL`` or the secret's): ``TIERQ_SHARD_URLS``, or on AWS ``TIERQ_SHARD_NAMES``
    with the further shards' Parameter Store entries (``shards_from_settings``)."""
    names = parse_shard_names(settings.shard_names) if settings.shard_names else []
    if not settings.shard_urls and len(names) < 2:
        return None  # (one name or none: the one database, no Parameter Store read)
    specs = shards_from_settings(settings)
    return specs if len(specs) > 1 else None


def _create(settings: Settings, specs: list[ShardSpec] | None) -> Deployment:
    if specs is None:
        only = settings.shard_urls
        # one shard named in TIERQ_SHARD_URLS is that database, exactly as without shards
        return Tierq(database_url=parse_shard_urls(only)[0].url if only else None,
                     settings=settings)
    from tierq.sharded import ShardedTierq  # (a deployment of one database never needs it)

    return ShardedTierq(specs, settings=settings)


def engine() -> Deployment:
    """The execution environment's engine (one ``Tierq``, or a ``ShardedTierq`` over the
    deployment's shards), created on first use from the environment."""
    global _engine
    current = _engine
    if current is not None:
        return current
    with _engine_lock:
        if _engine is None:
            settings = get_settings()
            _engine = _create(settings, shard_specs(settings))
            _give_consumers(_engine)
            if settings.dispatcher_function:  # (boto3 is imported only then)
                from tierq.aws.consumers import install_waker

                install_waker(settings)
            logger.debug("engine created")
        return _engine


def use_consumers(functions: ConsumerFunctions | None) -> ConsumerFunctions | None:
    """Make ``functions`` the consumer functions of this environment's engines (the local
    stack's, tests'), on the engine built already and on those built later; returns the
    ones it replaces. Without, the dispatcher's function gives its engines the Lambda
    functions of the allow-list (tierq.aws.consumers.provide_functions)."""
    global _consumers
    with _engine_lock:
        previous, _consumers = _consumers, functions
        if _engine is not None:
            for tq in _engine.engines.values():
                tq.ctx.consumers = functions
    return previous


def _give_consumers(deployment: Deployment) -> None:
    if _consumers is not None:
        for tq in deployment.engines.values():
            tq.ctx.consumers = _consumers


def pair_engine(queue: str, tenant: str, *, create: bool = True) -> Tierq:
    """The engine of the shard that holds (queue, tenant): the only one without shards.
    With ``create`` off, a pair that has no home yet is placed nowhere: the default shard's
    engine answers (it holds nothing of the pair). ``ShardDown`` (503) when the pair's home
    cannot be known."""
    current = engine()
    found = current.engine_of(queue, tenant, create=create)
    return found if found is not None else current.engines[current.default_shard]


def default_shard() -> str:
    """The default shard's name (the one shard's, without shards)."""
    return engine().default_shard


def default_engine() -> Tierq:
    """The default shard's engine: for what the warm tier alone holds (every shard's engine
    reaches the same Valkey) and for queue settings (every shard holds the same)."""
    current = engine()
    return current.engines[current.default_shard]


def on_shard(name: str, call: Callable[[Tierq], T]) -> T:
    """``call`` with shard ``name``'s engine, under the shard's call deadline (``ShardDown``,
    503, when it does not answer); without shards, with the one engine."""
    return engine().on_shard(name, call)


def shard_rows(name: str, rows: Iterator[T], chunk: int) -> Iterator[T]:
    """The rows of an iterator that reads shard ``name``, pulled ``chunk`` at a time, each
    pull under the shard's call deadline (a shard that hangs, or is behind on migrations,
    answers 503 as every other call on it does)."""
    while True:
        part = on_shard(name, lambda _engine: list(itertools.islice(rows, chunk)))
        yield from part
        if len(part) < chunk:
            return


def shard_engines() -> dict[str, Tierq]:
    """Every shard's engine by shard name (``{DEFAULT_SHARD: engine}`` without shards)."""
    return dict(engine().engines)


def reset_engine() -> None:
    """Close the engine and forget the settings read from the environment, so the next
    :func:`engine` call starts afresh (tests; the local stack on shutdown)."""
    global _engine
    with _engine_lock:
        if _engine is not None:
            _engine.close()
            _engine = None
        get_settings.cache_clear()


def after_restore() -> None:
    """What an execution environment resumed from a SnapStart snapshot does before its
    first request (see the module docstring); a failure to close is logged, never raised, so
    the restore goes on. Lambda allows the hooks 10 s; this takes milliseconds."""
    global _engine
    started = time.monotonic()
    with _engine_lock:
        stale, _engine = _engine, None
    if stale is not None:
        try:
            stale.close()  # the sockets of the snapshotted environment: dead to the servers
        except Exception:  # the next request builds a new engine anyway
            logger.warning("closing the snapshot's engine failed", exc_info=True)
    random.seed()
    ids.reseed()
    logger.info("restored from a snapshot", extra={
        "engine_dropped": stale is not None,
        "hook_ms": round((time.monotonic() - started) * 1000, 1)})


def register_snapshot_hooks() -> bool:
    """Register :func:`after_restore` with Lambda's SnapStart runtime hooks; False where
    ``snapshot_restore_py`` does not exist (outside Lambda's Python runtimes)."""
    try:
        from snapshot_restore_py import register_after_restore  # type: ignore[import-not-found]
    except ImportError:
        return False
    register_after_restore(after_restore)
    return True


register_snapshot_hooks()
