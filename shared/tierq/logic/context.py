"""What every operation needs: the two stores, settings, a clock and a few short-lived
in-process caches (queue settings, known tenants, last seen tier modes)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from tierq.config import Settings
from tierq.dal.postgres import Database
from tierq.dal.store.base import Conn
from tierq.dal.store.rows import QueueSettingsRow
from tierq.dal.task_store import TaskStore
from tierq.dal.warm_tier import WarmTier
from tierq.logic.metric_queues import MetricQueues
from tierq.logic.pairs import refresh_seconds, register_pairs
from tierq.models.queues import (
    GROUP_MAX_LEASED_DEFAULT,
    BackoffSettings,
    ConsumerSettings,
    QueueSettings,
    RateLimit,
)

if TYPE_CHECKING:
    from tierq.logic.dispatch.invocation import ConsumerFunctions

Pair = tuple[str, str]  # (queue, tenant)


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class OffsetClock:
    """The system clock shifted by a settable offset (tests move time forward with it)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def to_ms(seconds: float) -> int:
    return int(seconds * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class QueueSettingsCache:
    """Effective per-queue settings (stored row over deployment defaults), cached briefly
    (``settings_cache_seconds``) for at most ``max_entries`` queues, the least recently used
    dropped first: every queue name a caller uses is an entry, and a Lambda environment lives
    for hours. A row the settings model refuses (a value the table allows, written by hand)
    is cached as its refusal, raised again on each hit: a maintenance pass over the
    queue's many pairs reads it once, not once a pair."""

    # ~1 KB an entry (the name, a QueueSettings): about 10 MB at most per process
    MAX_ENTRIES = 10_000

    def __init__(self, store: TaskStore, defaults: Settings, *,
                 max_entries: int = MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.store = store
        self.defaults = defaults
        self.max_entries = max_entries
        self._cache: OrderedDict[str, tuple[float, QueueSettings | ValidationError]] = \
            OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def get(self, queue: str, *, conn: Conn | None = None) -> QueueSettings:
        """The queue's settings, from the cache while fresh; a miss reads the row on
        ``conn`` when given (a caller inside a transaction must not wait for a second
        pooled connection)."""
        ttl = self.defaults.settings_cache_seconds
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(queue)
            if hit is not None and now - hit[0] < ttl:
                self._cache.move_to_end(queue)
                found = hit[1]
                if isinstance(found, ValidationError):
                    raise found.with_traceback(None)  # (a fresh traceback each time)
                return found
        value: QueueSettings | ValidationError
        try:
            value = self.effective(self.store.queue_settings_row(queue, conn=conn))
        except ValidationError as exc:
            value = exc
        with self._lock:
            self._cache[queue] = (now, value)
            self._cache.move_to_end(queue)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        if isinstance(value, ValidationError):
            raise value
        return value

    def effective(self, row: QueueSettingsRow | None) -> QueueSettings:
        d = self.defaults

        def pick(column: str, default: Any) -> Any:
            value = None if row is None else getattr(row, column)
            return default if value is None else value

        return QueueSettings(
            warm_max=pick("warm_max", d.warm_max),
            warm_max_bytes=pick("warm_max_bytes", d.warm_max_bytes),
            lease_seconds=pick("lease_seconds", d.lease_seconds),
            max_attempts=pick("max_attempts", d.max_attempts),
            backoff=BackoffSettings(
                kind=pick("backoff_kind", d.backoff_kind),
                base_seconds=pick("backoff_base_seconds", d.backoff_base_seconds),
                cap_seconds=pick("backoff_cap_seconds", d.backoff_cap_seconds),
                jitter=pick("backoff_jitter", d.backoff_jitter),
            ),
            retention_seconds=pick("retention_seconds", d.retention_seconds),
            paused=row is not None and row.paused,
            max_leased=None if row is None else row.max_leased,
            rate=None if row is None or row.rate_per_second is None or row.rate_burst is None
            else RateLimit(per_second=row.rate_per_second, burst=row.rate_burst),
            tenant_max_leased=None if row is None else row.tenant_max_leased,
            tenant_rate=None if row is None or row.tenant_rate_per_second is None
            or row.tenant_rate_burst is None
            else RateLimit(per_second=row.tenant_rate_per_second, burst=row.tenant_rate_burst),
            consumer=None if row is None or row.consumer is None
            else ConsumerSettings.model_validate_json(row.consumer),
            group_max_leased=pick("group_max_leased", GROUP_MAX_LEASED_DEFAULT),
            timeout_seconds=None if row is None else row.timeout_seconds,
        )

    def invalidate(self, queue: str) -> None:
        with self._lock:
            self._cache.pop(queue, None)


class PairRegistry:
    """The (queue, tenant) pairs that have had work, as registered in Postgres.

    A pair this process registered is taken as registered for ``refresh`` seconds, then
    registered again on its next use (one statement): the reaper forgets only pairs nobody
    registered for much longer than that (``tierq.logic.pairs``), so a pair forgotten while
    this process still remembered it is registered anew before new work is written."""

    def __init__(self, store: TaskStore, ttl: float, *, refresh: float = 3600.0,
                 max_queues_per_tenant: int = 0,
                 clock: Callable[[], float] = time.time,
                 sharded: Callable[[], bool] = lambda: False) -> None:
        self.store = store
        self.sharded = sharded  # registrations check the pairs' homes (logic.homes)
        self.ttl = ttl
        self.refresh = refresh
        self.max_queues_per_tenant = max_queues_per_tenant
        self.clock = clock
        self._known: dict[Pair, float] = {}  # pair -> when this process registered it
        # The reaper's round over the pairs with warm rows: pairs visited in the last full
        # round and in the current one. A pair of the last round missing from this one lost
        # its warm rows; it gets one more visit for what Valkey still keeps of it (claim
        # records of acked leases). Only in this process: a pair missed after a restart
        # keeps a few claim records until its next work.
        self.warm_round_before: set[Pair] = set()
        self.warm_round_now: set[Pair] = set()
        self._tenants: dict[str, tuple[float, list[str]]] = {}
        self._lock = threading.Lock()

    def ensure(self, queue: str, tenants: Iterable[str]) -> list[str]:
        """Register pairs (QuotaExceeded, writing nothing, if a new one is over its tenant's
        cap); returns the tenants this process had not registered lately."""
        now = self.clock()
        stale_before = now - self.refresh
        with self._lock:
            due = sorted({t for t in tenants
                          if self._known.get((queue, t), float("-inf")) <= stale_before})
        if not due:
            return []
        register_pairs(self.store, queue, due, now=now, cap=self.max_queues_per_tenant,
                       sharded=self.sharded())
        with self._lock:
            self._known.update(((queue, t), now) for t in due)
            self._tenants.pop(queue, None)
        return due

    def forget_local(self, pairs: Iterable[Pair]) -> None:
        """Drop pairs from this process's memory (they were forgotten in Postgres)."""
        with self._lock:
            for pair in pairs:
                self._known.pop(pair, None)
                self._tenants.pop(pair[0], None)

    def tenants(self, queue: str) -> list[str]:
        now = time.monotonic()
        with self._lock:
            hit = self._tenants.get(queue)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        tenants = self.store.tenants_of_queue(queue)
        with self._lock:
            self._tenants[queue] = (now, tenants)
        return tenants

    def all(self) -> list[Pair]:
        return self.store.all_pairs()


@dataclass
class AckCommitCounts:
    """What this process's acks committed together did (logic/ack_gathering.py)."""

    commits: int = 0  # commits this process made for gathered acks
    committed: int = 0  # the acks those commits carried (its own and others')
    answered: int = 0  # acks of this process another's commit answered
    alone: int = 0  # acks that committed alone after gathering failed or was left


@dataclass
class Context:
    db: Database
    warm: WarmTier
    settings: Settings
    clock: Clock = field(default_factory=SystemClock)
    store: TaskStore = field(init=False)  # every statement on ``db``, as typed methods
    queue_settings: QueueSettingsCache = field(init=False)
    pairs: PairRegistry = field(init=False)
    # last mode each (queue, tenant) was seen in; only "warm" lets an admission skip a round
    # trip, and a wrong guess is caught by push_ready (it refuses, and the rows go cold).
    modes: dict[Pair, str] = field(default_factory=dict)
    rotation: dict[str, int] = field(default_factory=dict)
    # per queue, the tenant this process's last queue-wide claim started its turn with
    # (logic/ready_tenants.py: the next claim's window starts after it)
    claim_turns: dict[str, str] = field(default_factory=dict)
    # per queue, until when (monotonic seconds) this process's queue-wide claims may rotate
    # over the window of ready tenants they last read, and that window as the next claim
    # takes it (logic/ready_tenants.py, ``claim_window``)
    claim_windows: dict[str, tuple[float, list[str]]] = field(default_factory=dict)
    # acks committed together (logic/ack_gathering.py), as this process saw them
    ack_commits: AckCommitCounts = field(default_factory=AckCommitCounts)
    # when this process last topped up each (queue, tenant) at the claim's low-water mark
    low_water_refills: dict[Pair, float] = field(default_factory=dict)
    # pairs, and Valkey masters, that failed a claim spanning several tenants, until when
    # (monotonic seconds): this process's claims over several tenants pass them over
    # meanwhile (logic/claim_isolation.py)
    claim_set_aside: dict[Pair, float] = field(default_factory=dict)
    claim_masters_down: dict[str, float] = field(default_factory=dict)
    # Valkey masters of ready-tenant indexes that did not answer an index call, until when
    # (monotonic seconds), and per queue the tenants to enter once its index answers
    # (logic/ready_tenants.py)
    ready_index_down: dict[str, float] = field(default_factory=dict)
    ready_index_pending: dict[str, set[str]] = field(default_factory=dict)
    # Valkey masters a cron tick found down (registering a pair, withdrawing an occurrence),
    # until when (monotonic seconds): the tick does not ask them meanwhile
    # (logic/masters_down.py)
    warm_down_until: dict[str, float] = field(default_factory=dict)
    # a shard of a sharded deployment writes its tag into the ids it makes (dal/shards.py)
    id_tag: int | None = None
    # the queues whose metrics carry their name (logic/metric_queues.py)
    metric_queues: MetricQueues = field(default_factory=MetricQueues)
    # where consumer functions are checked and called (logic/dispatch/invocation.py), set by
    # the entry point that builds the engine; None: checked by the settings' allow-list,
    # and no dispatcher runs
    consumers: ConsumerFunctions | None = None

    def __post_init__(self) -> None:
        self.store = TaskStore(self.db)
        self.queue_settings = QueueSettingsCache(self.store, self.settings)
        self.pairs = PairRegistry(
            self.store, self.settings.settings_cache_seconds,
            refresh=refresh_seconds(self.settings),
            max_queues_per_tenant=self.settings.max_queues_per_tenant, clock=self.now,
            sharded=lambda: self.id_tag is not None)

    def now(self) -> float:
        return self.clock.now()
