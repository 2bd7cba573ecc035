"""The maintenance jobs, each declared once (after River's ``internal/maintenance``: one
service per job with its config, its validation and a timeout per pass).

A job module of :mod:`tierq.maintenance` exports ``JOB = MaintenanceJob(...)``: its name
(also its function's code folder and the ``job`` of its schedule's input), its pass, the
``Settings`` field that says how often it ticks, and a config model whose defaults and
validation live in one place. Every config carries the pass's time budget:

- ``budget_seconds``: wall clock, checked between batches (or slices, or schedules); a pass
  that has spent it starts no new batch, and the next pass goes on from there;
- ``statement_timeout_ms`` and ``lock_timeout_ms``: ``SET LOCAL`` on each statement and
  transaction of the pass (``tierq.dal.postgres.scoped_timeouts``) where shorter than the
  pool's, so one stuck statement or lock wait cannot hold a pass for long. The pool's
  (``TIERQ_STATEMENT_TIMEOUT_MS``, ``TIERQ_LOCK_TIMEOUT_MS``) stay the upper bound; 0 on
  either side sets no limit from that side. A statement cancelled there
  (``tierq.errors.DatabaseTimedOut``) costs the item it was on (a pair, a schedule), not
  the pass.

A field is read from these, each overriding the ones before:

1. the model's default;
2. the shared setting it follows (``TIERQ_MAINTENANCE_BUDGET_SECONDS``,
   ``TIERQ_MAINTENANCE_SLICE``);
3. the environment, as ``TIERQ_<JOB>_<FIELD>`` (``TIERQ_REAPER_EXPIRED_BATCH=200``);
4. the caller's overrides.

A bad value is refused with the variable that holds it named.

:func:`jobs` finds the jobs; the engine (``Tierq.run_job``), the scheduled handlers
(``tierq.aws.scheduled.jobs``), the local gateway's scheduler and ``tests/template`` derive
from it. A run of a job on an engine is a :class:`JobRun`: each shard's summary (one entry
on one database) and their total (:func:`merge_fields` says how summaries add up).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, is_dataclass, replace
from functools import cache
from typing import Any, Generic, Self, TypeVar

from pydantic import ConfigDict, Field, ValidationError, model_validator

from tierq.config import MAINTENANCE_BUDGET_MAX_SECONDS, Settings
from tierq.dal.postgres import scoped_timeouts
from tierq.logic.context import Context
from tierq.logic.homes import ShardDown
from tierq.models.base import Model

# Settings that a field of every config follows unless the job's own variable is set.
SHARED_SETTINGS: dict[str, str] = {
    "budget_seconds": "maintenance_budget_seconds",
    "slice_size": "maintenance_slice",
}


class JobConfigError(ValueError):
    """A maintenance job's configuration was refused; the message names the bad values."""


class JobConfig(Model):
    """What every job's config has: the time budget of one pass."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # below the 5 s ticks of the reaper and the cold -> warm mover
    budget_seconds: float = Field(default=2.5, gt=0, le=MAINTENANCE_BUDGET_MAX_SECONDS)
    # at most these; the pool's (TIERQ_STATEMENT_TIMEOUT_MS, TIERQ_LOCK_TIMEOUT_MS, by
    # default 15 s and 5 s) when shorter: a pass gives up sooner, so a stuck statement costs
    # one tick, not several, and never later than the operator allows. 0: the pool's alone.
    statement_timeout_ms: int = Field(default=10_000, ge=0, le=600_000)
    lock_timeout_ms: int = Field(default=2_000, ge=0, le=600_000)

    @model_validator(mode="after")
    def _lock_wait_within_statement(self) -> Self:
        # a lock wait is part of its statement: a longer lock timeout would never fire
        if self.statement_timeout_ms and self.lock_timeout_ms > self.statement_timeout_ms:
            raise ValueError(f"lock_timeout_ms ({self.lock_timeout_ms}) must not exceed "
                             f"statement_timeout_ms ({self.statement_timeout_ms})")
        return self


class SlicedWalkConfig(JobConfig):
    """A job that walks the pairs (or queues, or schedules) with work in slices after a
    cursor."""

    slice_size: int = Field(default=200, ge=1, le=10_000)


C = TypeVar("C", bound=JobConfig)
S = TypeVar("S")


@dataclass(frozen=True)
class MaintenanceJob(Generic[C, S]):
    """One maintenance job. ``run_pass`` does one pass with a validated config; callers go
    through :meth:`run`, which applies the pass's timeouts."""

    name: str
    run_pass: Callable[[Context, C], S]
    config: type[C]
    schedule_setting: str  # the Settings field: seconds between two ticks
    summary: type[S]
    description: str

    def __post_init__(self) -> None:
        if self.schedule_setting not in Settings.fields:
            raise ValueError(f"{self.name}: no setting {self.schedule_setting!r}")

    def env_name(self, field: str) -> str:
        """The environment variable of one config field."""
        return f"TIERQ_{self.name.upper()}_{field.upper()}"

    @property
    def schedule_env(self) -> str:
        """The environment variable of the tick interval (``TIERQ_REAPER_EVERY``)."""
        return Settings.fields[self.schedule_setting].variable

    def every(self, settings: Settings) -> float:
        """Seconds between two ticks of this job."""
        return float(getattr(settings, self.schedule_setting))

    def configure(self, settings: Settings, environ: Mapping[str, str] | None = None,
                  **overrides: Any) -> C:
        """The job's config from ``settings``, the environment and ``overrides``."""
        env = os.environ if environ is None else environ
        fields = self.config.model_fields
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for field, setting in SHARED_SETTINGS.items():
            if field in fields:
                values[field] = getattr(settings, setting)
                sources[field] = Settings.fields[setting].variable
        for field in fields:
            raw = env.get(self.env_name(field))
            if raw is not None and raw.strip():
                values[field] = raw.strip()
                sources[field] = self.env_name(field)
        for field, value in overrides.items():
            values[field] = value
            sources[field] = f"{self.name}.{field}"
        return self._validate(values, sources)

    def with_overrides(self, config: C, **overrides: Any) -> C:
        """``config`` with some fields changed, validated again."""
        sources = {field: f"{self.name}.{field}" for field in overrides}
        return self._validate({**config.model_dump(), **overrides}, sources)

    def _validate(self, values: dict[str, Any], sources: Mapping[str, str]) -> C:
        try:
            return self.config.model_validate(values)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else ""
                where = sources.get(field, f"{self.name}.{field}" if field else self.name)
                shown = f"={error['input']!r}" if field else ""
                problems.append(f"{where}{shown}: {error['msg']}")
            raise JobConfigError(f"maintenance job {self.name!r}: " + "; ".join(problems)) \
                from None

    def run(self, ctx: Context, config: C | None = None, **overrides: Any) -> S:
        """One pass under the config's timeouts (where shorter than the pool's);
        ``config`` defaults to ``configure``."""
        if config is None:
            config = self.configure(ctx.settings, **overrides)
        elif overrides:
            config = self.with_overrides(config, **overrides)
        with scoped_timeouts(config.statement_timeout_ms, config.lock_timeout_ms):
            return self.run_pass(ctx, config)


@cache
def jobs() -> dict[str, MaintenanceJob[Any, Any]]:
    """Every job, by name: the ``JOB`` of each module of :mod:`tierq.maintenance`."""
    import pkgutil  # (every job: the local stack's and the tests'; a function names its own)

    import tierq.maintenance as package

    found: dict[str, MaintenanceJob[Any, Any]] = {}
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        job = getattr(module, "JOB", None)
        if not isinstance(job, MaintenanceJob):
            continue
        if job.name in found:
            raise ValueError(f"two maintenance jobs are named {job.name!r}")
        found[job.name] = job
    return found


def job(name: str) -> MaintenanceJob[Any, Any]:
    """The job called ``name``; a KeyError naming the known ones otherwise. A job's module
    is named after it, so a scheduled function imports its own job alone."""
    if name.isidentifier():
        try:
            module = importlib.import_module(f"tierq.maintenance.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tierq.maintenance.{name}":
                raise
        else:
            own = getattr(module, "JOB", None)
            if isinstance(own, MaintenanceJob) and own.name == name:
                return own
    known = jobs()
    if name not in known:
        raise KeyError(f"unknown maintenance job {name!r}; known: {sorted(known)}")
    return known[name]


@dataclass(frozen=True)
class JobRun(Generic[S]):
    """One pass of maintenance job ``job`` on every shard of an engine: each shard's summary,
    or the ``ShardDown`` of a shard that did not answer (one entry, named
    ``tierq.dal.shards.DEFAULT_SHARD``, on one database; there an error is raised, not
    kept)."""

    job: str
    by_shard: dict[str, S | ShardDown]

    @property
    def answered(self) -> dict[str, S]:
        """The summaries of the shards that answered."""
        return {name: s for name, s in self.by_shard.items() if not isinstance(s, ShardDown)}

    @property
    def down(self) -> dict[str, ShardDown]:
        """The shards that did not answer."""
        return {name: s for name, s in self.by_shard.items() if isinstance(s, ShardDown)}

    @property
    def total(self) -> S | None:
        """The answered shards' summaries added up (:func:`merge_summaries`); None when no
        shard answered."""
        answered = list(self.answered.values())
        return merge_summaries(answered) if answered else None

    def summary(self) -> S:
        """The total of every shard's summary; when a shard did not answer, its
        ``ShardDown`` is raised (the other shards' passes are done)."""
        for down in self.down.values():
            raise down
        total = self.total
        assert total is not None  # (every shard answered, and there is at least one)
        return total


def merge_summaries(summaries: Iterable[S]) -> S:
    """Summaries of one job (dataclasses of the same class) added up into one of that class,
    field by field as :func:`merge_fields` says."""
    items = list(summaries)
    if len(items) == 1:
        return items[0]
    merged = merge_fields(summary_fields(s) for s in items)
    return replace(items[0], **merged)  # type: ignore[type-var]


def summary_fields(summary: Any) -> dict[str, Any]:
    """A summary's fields by name (a dataclass's, or a mapping's items)."""
    if is_dataclass(summary) and not isinstance(summary, type):
        return asdict(summary)
    return dict(summary)


def merge_fields(summaries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Summaries' fields added up, by the type of each value:

    | value | added up as |
    | --- | --- |
    | flag (bool) | true when true in every summary |
    | number | summed |
    | list | joined, in the summaries' order |
    | mapping | merged, numbers under one key summed |
    | anything else | the first summary's |
    """
    out: dict[str, Any] = {}
    for summary in summaries:
        for name, value in summary.items():
            if name not in out:
                out[name] = list(value) if isinstance(value, list) else \
                    dict(value) if isinstance(value, dict) else value
            elif isinstance(value, bool):
                out[name] = out[name] and value
            elif isinstance(value, int | float):
                out[name] += value
            elif isinstance(value, list):
                out[name].extend(value)
            elif isinstance(value, dict):
                for key, item in value.items():
                    out[name][key] = out[name].get(key, 0) + item \
                        if isinstance(item, int | float) else item
    return out
