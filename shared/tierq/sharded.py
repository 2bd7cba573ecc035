"""``ShardedTierq``: the queue over several PostgreSQL shards and one warm tier.

Each shard is served by a ``Tierq`` engine of its own (its database, its caches, its id
tag) over the shared Valkey; this class routes each call by the (queue, tenant) pairs it
touches, whose homes ``tierq.logic.homes`` keeps (docs/architecture.md §14). Every pair's
tasks are on one shard, so each engine's guarantees hold per pair as on one database.

- enqueues are grouped by the home of each task's tenant, and the outcomes returned in the
  request's order (a request whose tasks live on several shards commits once per shard);
- a claim for one tenant goes to its home; a claim over the queue's tenants asks the shards
  in turn (starting one further each time), each over the pairs it holds;
- acks, nacks, releases and heartbeats go to the home of the tenant in each lease token;
- a task id names its shard (its tag); ids without a known tag are looked up everywhere;
- queue settings are written to every shard (each shard's claims read them there);
- lists merge the shards' sorted lists, counts are summed; maintenance runs per shard in
  parallel, each under its own budget, so a slow or stopped shard delays only its own pairs;
- dead-letter replays and purges go to the shards the ids' tags name (every shard for all
  of them); throughput counts live in the warm tier, read once.

Its operations are those of ``Tierq`` (the contract: ``tierq.contract.Deployment``); moves
and the pairs' homes are its own.

A shard that does not answer fails only the calls that need it (``ShardDown``: 503).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from tierq.config import Settings, get_settings
from tierq.contract import Deployment
from tierq.core.ids import tenant_of_token
from tierq.dal import connect
from tierq.dal.migrate import available as shipped_migrations
from tierq.dal.shards import ShardSpec, parse_shard_urls, tag_of
from tierq.dal.warm_tier import WarmTier
from tierq.engine import Tierq
from tierq.errors import DatabaseTimedOut, InvalidInput, NotFound, WarmTierUnavailable
from tierq.logic import ack_claim, claim_replay, idempotency, shard_ops
from tierq.logic import bulk as bulk_logic
from tierq.logic import claim as claim_logic
from tierq.logic.context import Clock, SystemClock
from tierq.logic.homes import (
    SHARD_ERRORS,
    HomeRegistry,
    PairMoving,
    ShardDown,
    SyncSummary,
)
from tierq.logic.idempotency import Caller, keyed_call, models_body
from tierq.logic.pair_moves import MoveSummary, MoveTimings, PairMove
from tierq.logic.queues import TENANTS_SHOWN
from tierq.logic.schedules import parse_body as schedule_body
from tierq.maintenance.registry import JobRun
from tierq.models import (
    AckItem,
    ClaimedTask,
    ClaimRequest,
    Enqueued,
    HeartbeatItem,
    NackItem,
    QueueSettingsUpdate,
    RunningLease,
    TaskIn,
    TenantCounts,
)
from tierq.models.ack_claims import AckClaimResult
from tierq.models.envelopes import SLICE_MAX_ITEMS, SLICE_SECONDS, PurgeResult, ReplayResult
from tierq.models.flows import FlowIn, FlowResult
from tierq.models.leases import (
    AckResult,
    HeartbeatResult,
    NackResult,
    Rejection,
    ReleaseItem,
    ReleaseResult,
)
from tierq.models.names import DEFAULT_TENANT
from tierq.models.queues import QueueCounts, QueueSettings, QueueView, TenantQueueView
from tierq.models.schedules import ScheduleIn, ScheduleRemoved, ScheduleView
from tierq.models.tasks import TaskView
from tierq.models.throughput import QueueThroughput

if TYPE_CHECKING:
    from tierq.core.warm_up import WarmedUp

T = TypeVar("T")
P = TypeVar("P")
log = logging.getLogger(__name__)
POLL_SECONDS = 0.05  # a long poll over several shards looks again this often
NO_HOME_POLL_SECONDS = 0.5  # a pinned long poll on a pair without a home, this often
# How long one call on one shard may take (beyond what it waits for by design, a long
# poll) before the shard counts as hung: the call answers 503 and, for SUSPECT_SECONDS,
# so does every call that needs that shard, at once. (Connection failures answer within
# TIERQ_DB_POOL_TIMEOUT; this catches a server that accepts and never answers.)
CALL_SECONDS = 10.0
SUSPECT_SECONDS = 5.0


R = TypeVar("R", AckResult, NackResult, ReleaseResult, HeartbeatResult)


class ShardedTierq(Deployment):
    """The two-tier queue over the shards ``specs`` (the first is the default shard)."""

    def __init__(self, specs: Sequence[ShardSpec], *, valkey_url: str | None = None,
                 settings: Settings | None = None, clock: Clock | None = None,
                 warm: WarmTier | None = None, call_seconds: float = CALL_SECONDS,
                 suspect_seconds: float = SUSPECT_SECONDS) -> None:
        self.settings = settings or get_settings()
        self.call_seconds = call_seconds
        self.suspect_seconds = suspect_seconds
        self._suspect_until: dict[str, float] = {}
        # the newest migration this code ships; shards found at it (or past it) are current
        self.schema_version = shipped_migrations()[-1].version
        self._current: set[str] = set()
        self._behind_until: dict[str, float] = {}
        self._behind_detail: dict[str, str] = {}
        # the calls run here, so that a caller can give up on a shard that hangs (the
        # thread stays with the hung call until the server answers or the socket fails)
        self._calls = ThreadPoolExecutor(max_workers=8 * max(1, len(specs)),
                                         thread_name_prefix="tierq-shard")
        self.specs = list(specs)
        self.warm = warm or WarmTier.from_url(valkey_url or connect.valkey_url(self.settings),
                                              cluster=self.settings.valkey_cluster,
                                              credential_provider=connect.valkey_credentials(
                                                  self.settings))
        self._own_warm = warm is None
        shared_clock = clock or SystemClock()
        self._engines: dict[str, Tierq] = {}
        try:
            for spec in self.specs:
                engine = Tierq(database_url=spec.url, settings=self.settings,
                               clock=shared_clock, warm=self.warm,
                               resolve_url=spec.resolve_url)  # a rotated secret, on AWS
                if len(self.specs) > 1:
                    engine.ctx.id_tag = spec.tag
                self._engines[spec.name] = engine
        except BaseException:
            self.close()
            raise
        self.homes = HomeRegistry({name: e.ctx.store for name, e in self.engines.items()},
                                  run=lambda name, call: self._on(
                                      name, lambda e: call(e.ctx.store)),
                                  cap=self.settings.max_queues_per_tenant,
                                  cache_seconds=self.settings.home_cache_seconds)
        self.by_tag = {spec.tag: spec.name for spec in self.specs}
        self._turn = itertools.count()
        self._lock = threading.Lock()

    @classmethod
    def from_urls(cls, text: str, **kwargs: Any) -> ShardedTierq:
        """From a ``TIERQ_SHARD_URLS`` value (``name=url`` or bare URLs, comma-separated)."""
        return cls(parse_shard_urls(text), **kwargs)

    def warm_up(self, *, tune_collector: bool = True) -> WarmedUp:
        """``Tierq.warm_up`` for the shards' warm tier (one for all of them)."""
        self.warm.scripts.register_all()
        return super().warm_up(tune_collector=tune_collector)

    def close(self) -> None:
        self._calls.shutdown(wait=False, cancel_futures=True)
        for engine in self.engines.values():
            engine.db.close()
        if self._own_warm:
            self.warm.close()

    # -- shards ----------------------------------------------------------------------------

    @property
    def engines(self) -> dict[str, Tierq]:
        return self._engines

    @property
    def default_shard(self) -> str:
        return self.specs[0].name

    def engine_of(self, queue: str, tenant: str, *, create: bool = True) -> Tierq | None:
        """The engine of the pair's home (None: the pair has none and ``create`` is off)."""
        home = self.homes.home_of(queue, tenant, create=create)
        return None if home is None else self.engines[home]

    def on_shard(self, name: str, call: Callable[[Tierq], T], *, waits: float = 0.0) -> T:
        """``call`` with shard ``name``'s engine, under the shard's call deadline."""
        return self._on(name, call, waits=waits)

    def _on(self, name: str, call: Callable[[Tierq], T], *, waits: float = 0.0,
            undo_late: Callable[[Tierq, T], None] | None = None) -> T:
        """``call`` on shard ``name``. A shard that fails to connect, or gives no answer
        within ``call_seconds`` (+ ``waits``, what the call waits for by design), is
        ``ShardDown`` (503); after a hang it is for ``suspect_seconds`` without trying.
        A call given up on may still complete later (as any request whose answer is lost:
        a retried enqueue should carry an Idempotency-Key or a task key). With
        ``undo_late`` a call given up on is cancelled if it has not started, else
        ``undo_late`` is run on the shard's engine with its late result (a claim gives its
        tasks back: else their leases, held by nobody, would each cost an attempt and keep
        the task out of line until they expired)."""
        if time.monotonic() < self._suspect_until.get(name, 0.0):
            raise ShardDown(name, detail="it did not answer in time moments ago")
        future = self._calls.submit(self._current_then, name, call)
        limit = self.call_seconds + waits
        try:
            return future.result(timeout=limit)
        except FuturesTimeout:
            with self._lock:
                self._suspect_until[name] = time.monotonic() + self.suspect_seconds
            if undo_late is not None and not future.cancel():
                # it runs (or just ended): undone once it ends, by the thread that ran it
                # (by this one, before the 503, if it ended already)
                future.add_done_callback(
                    lambda done: self._undo_late(name, done, undo_late))
            raise ShardDown(name, detail=f"no answer within {limit:g} s") from None
        except PairMoving as moving:  # the shard answered: this process's home was stale
            self.homes.invalidate(moving.queue, moving.tenant)
            raise
        except (ShardDown, DatabaseTimedOut, WarmTierUnavailable):  # their own answers
            raise
        except SHARD_ERRORS as exc:
            raise ShardDown(name, detail=str(exc)) from exc

    def _undo_late(self, name: str, done: Future[T],
                   undo: Callable[[Tierq, T], None]) -> None:
        """``undo`` a call's result that came after ``_on`` gave up on it (run by the
        thread that completed it); a call that failed or was cancelled left nothing to
        undo, and a failing undo is logged (nothing is waiting for it)."""
        if done.cancelled() or done.exception() is not None:
            return
        try:
            undo(self.engines[name], done.result())
        except Exception:
            log.exception("undoing a late answer of shard %r failed", name)

    def _current_then(self, name: str, call: Callable[[Tierq], T]) -> T:
        """``call`` on shard ``name`` once its schema has every migration this code ships:
        a shard behind on migrations (one that failed when the others were migrated) is
        out of service, ``ShardDown``, and is looked at again every ``suspect_seconds``."""
        engine = self.engines[name]
        if name not in self._current:
            if time.monotonic() < self._behind_until.get(name, 0.0):
                raise ShardDown(name, why=self._behind_detail.get(name, "is behind"))
            version = engine.ctx.store.schema_version()
            if version is None or version < self.schema_version:
                why = (f"is behind on migrations (at {version or 'none'}, this code needs "
                       f"{self.schema_version}: run the migrations)")
                with self._lock:
                    self._behind_until[name] = time.monotonic() + self.suspect_seconds
                    self._behind_detail[name] = why
                raise ShardDown(name, why=why)
            self._current.add(name)
        return call(engine)

    def migrate(self) -> dict[str, list[str]]:
        """Apply pending migrations to every shard, then put the shards in service
        (``HomeRegistry.sync``). Every shard is tried; the versions applied per shard are
        returned, and when some shard failed, ``ShardMigrationFailed`` names each one (run
        it again: migrations are recorded per shard)."""
        applied: dict[str, list[str]] = {}
        failed: dict[str, str] = {}
        for name, engine in self.engines.items():
            try:
                applied[name] = engine.migrate()
            except Exception as exc:  # reported per shard, the others still migrated
                failed[name] = f"{type(exc).__name__}: {exc}"
        with self._lock:  # looked at again: the shards migrated now are current
            self._behind_until.clear()
        if failed:
            raise ShardMigrationFailed(failed, applied)
        self.sync_homes()
        return applied

    def sync_homes(self, progress: Callable[[str], None] | None = None) -> SyncSummary:
        return self.homes.sync(progress)

    def move_pair(self, queue: str, tenant: str, to: str, *,
                  drain_seconds: float = 600.0, poll_seconds: float = 1.0,
                  say: Callable[[str], None] | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> MoveSummary:
        """Move the pair to shard ``to`` once its tasks are worked off on its home
        (``tierq.logic.pair_moves``): new work for it answers 503 meanwhile. Run again, it
        finishes a move that stopped half way."""
        move = self._pair_move(queue, tenant, to, drain_seconds=drain_seconds,
                               poll_seconds=poll_seconds, say=say, sleep=sleep)
        return move.run()

    def give_up_move(self, queue: str, tenant: str) -> bool:
        """Give up the pair's move if it has not switched (it takes new work again where it
        is); whether there was one."""
        return self._pair_move(queue, tenant, self.default_shard).give_up()

    def _pair_move(self, queue: str, tenant: str, to: str, *, drain_seconds: float = 600.0,
                   poll_seconds: float = 1.0, say: Callable[[str], None] | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> PairMove:
        # every process's cached home has expired, and a request that read it just before
        # has ended (its call on a shard is given up after call_seconds)
        timings = MoveTimings(settle_seconds=self.settings.home_cache_seconds
                              + self.call_seconds,
                              tenants_settle_seconds=self.settings.settings_cache_seconds,
                              drain_seconds=drain_seconds, poll_seconds=poll_seconds)
        ctx = self.engines[self.default_shard].ctx
        stale_ms = int(self.settings.admission_stale_seconds * 1000)

        def admissions_in_flight() -> int:
            settings = ctx.queue_settings.get(queue)
            return ctx.warm.mode(queue, tenant, op="observe", now_ms=int(time.time() * 1000),
                                 stale_ms=stale_ms, warm_max=settings.warm_max,
                                 warm_max_bytes=settings.warm_max_bytes).inflight

        return PairMove(self.homes, queue, tenant, to, timings=timings,
                        admissions_in_flight=admissions_in_flight, say=say, sleep=sleep)

    # -- producers -------------------------------------------------------------------------

    def enqueue(self, queue: str, items: Sequence[TaskIn | Mapping[str, Any]], *,
                tenant: str | None = None, idempotency_key: str | None = None,
                caller: Caller | None = None,
                body_fingerprint: bytes | None = None) -> Enqueued:
        """Enqueue a batch (≤ 500), each task on its pair's home (``shard_ops.enqueue``)."""
        tasks = [i if isinstance(i, TaskIn) else TaskIn.model_validate(i) for i in items]
        call = keyed_call("enqueue", queue, idempotency_key, caller, body_fingerprint,
                          lambda: shard_ops.enqueue_body(tasks, tenant))
        return shard_ops.enqueue(self, queue, tasks, tenant, call)

    def flow(self, flow: FlowIn | Mapping[str, Any], *,
             tenant: str | None = None, idempotency_key: str | None = None,
             caller: Caller | None = None,
             body_fingerprint: bytes | None = None) -> FlowResult:
        """Create a graph of tasks all or nothing, on the one shard of its pairs."""
        model = flow if isinstance(flow, FlowIn) else FlowIn.model_validate(flow)
        call = keyed_call("flow", shard_ops.FLOW_SCOPE, idempotency_key, caller,
                          body_fingerprint, lambda: shard_ops.flow_body(model, tenant))
        return shard_ops.flow(self, model, tenant, call)

    def shard_of_flow(self, flow: FlowIn, tenant: str | None) -> str:
        """The one home of the flow's pairs (a new pair gets one); a task whose pair, or an
        existing task named in its ``after`` (its id's tag), lives on another shard than the
        first task's pair is 422 naming the field: a flow is one transaction on one
        shard."""
        who = tenant or flow.tenant or DEFAULT_TENANT
        refs = {t.ref for t in flow.tasks}
        first: str | None = None
        for i, task in enumerate(flow.tasks):
            home = self.homes.home_of(task.queue, who)
            assert home is not None
            if first is None:
                first = home
            elif home != first:
                raise InvalidInput.field(
                    f"tasks[{i}].queue",
                    f"({task.queue!r}, {who!r}) lives on shard {home!r}, the flow's first "
                    f"task's on {first!r}: a flow's tasks share one shard")
        assert first is not None
        for i, task in enumerate(flow.tasks):
            for j, name in enumerate(task.after):
                if name in refs:
                    continue
                try:
                    shard = self.by_tag.get(tag_of(str(UUID(name))))
                except ValueError:  # neither a ref nor an id: the engine says so (422)
                    continue
                if shard is not None and shard != first:
                    raise InvalidInput.field(
                        f"tasks[{i}].after[{j}]",
                        f"task {name} is on shard {shard!r}, the flow's tasks on "
                        f"{first!r}: a task waits only for tasks on its own shard")
        return first

    def shards_of_tasks(self, queue: str, tasks: Sequence[TaskIn],
                        tenant: str | None) -> dict[str, list[int]]:
        """The tasks' indexes grouped by their pairs' homes (a new pair gets one), in the
        order of each home's first task."""
        groups: dict[str, list[int]] = defaultdict(list)
        for index, task in enumerate(tasks):
            home = self.homes.home_of(queue, task.tenant or tenant or DEFAULT_TENANT)
            assert home is not None
            groups[home].append(index)
        return dict(groups)

    # -- bulk loads (logic/bulk.py; the Glue feeder drives them) ------------------------------

    @contextlib.contextmanager
    def bulk_load(self, queue: str, *, rows: int, tenants: Iterable[str]
                  ) -> Iterator[bulk_logic.BulkLoad | bulk_logic.ShardedBulkLoad]:
        """``Tierq.bulk_load`` over the shards: one load on each home shard of the tenants'
        pairs (a new pair gets its home). A home that cannot be known, or a home shard that
        is down or behind on migrations, fails the load (ShardDown) before anything is
        written: a pair is never given a second home."""
        wanted = sorted(set(tenants))
        homes = {tenant: self.homes.home_of(queue, tenant) for tenant in wanted}
        by_home: dict[str, list[str]] = defaultdict(list)
        for tenant, home in homes.items():
            assert home is not None
            by_home[home].append(tenant)
        if len(self.engines) == 1:
            with self.engines[self.default_shard].bulk_load(queue, rows=rows,
                                                      tenants=wanted) as load:
                yield load
            return
        with contextlib.ExitStack() as stack:
            loads: dict[str, bulk_logic.BulkLoad] = {}
            for home, members in sorted(by_home.items()):
                self._on(home, lambda engine: None)  # up and current, or ShardDown
                loads[home] = stack.enter_context(
                    self.engines[home].bulk_load(queue, rows=rows, tenants=members))
            first = next(iter(loads.values()))
            yield bulk_logic.ShardedBulkLoad(
                queue=queue, rows=rows, id_ms=first.id_ms, id_tail=first.id_tail,
                loads=loads, homes={t: h for t, h in homes.items() if h is not None},
                tags={spec.name: spec.tag for spec in self.specs if spec.name in loads})

    @contextlib.contextmanager
    def bulk_writer(self, load: bulk_logic.BulkLoad | bulk_logic.ShardedBulkLoad
                    ) -> Iterator[bulk_logic.BulkWriter | bulk_logic.ShardedBulkWriter]:
        """``Tierq.bulk_writer`` over the shards: each chunk's rows written on their pairs'
        home shards (a connection to each, opened on first use)."""
        if isinstance(load, bulk_logic.BulkLoad):
            with self.engines[self.default_shard].bulk_writer(load) as writer:
                yield writer
            return
        with contextlib.ExitStack() as stack:
            def open_writer(home: str) -> bulk_logic.BulkWriter:
                return stack.enter_context(self.engines[home].bulk_writer(load.loads[home]))

            yield bulk_logic.ShardedBulkWriter(load, open_writer)

    def bulk_warm_up(self, queue: str, tenants: Iterable[str]) -> int:
        """``Tierq.bulk_warm_up`` on each pair's home shard."""
        by_home: dict[str, list[str]] = defaultdict(list)
        for tenant in sorted(set(tenants)):
            home = self.homes.home_of(queue, tenant, create=False)
            if home is not None:
                by_home[home].append(tenant)
        return sum(self._on(home, partial(_bulk_warm_up, queue=queue, tenants=members))
                   for home, members in by_home.items())

    # -- workers ---------------------------------------------------------------------------

    def claim(self, queue: str, request: ClaimRequest | None = None, *, max_bytes: int = 0,
              answer_by: float | None = None, idempotency_key: str | None = None,
              caller: Caller | None = None, body_fingerprint: bytes | None = None,
              **fields: Any) -> list[ClaimedTask]:
        return self.claim_outcome(queue, request, max_bytes=max_bytes, answer_by=answer_by,
                                  idempotency_key=idempotency_key, caller=caller,
                                  body_fingerprint=body_fingerprint, **fields).tasks

    def claim_outcome(self, queue: str, request: ClaimRequest | None = None, *,
                      max_bytes: int = 0, answer_by: float | None = None,
                      idempotency_key: str | None = None, caller: Caller | None = None,
                      body_fingerprint: bytes | None = None,
                      **fields: Any) -> claim_logic.ClaimOutcome:
        """Lease up to ``request.max`` tasks: of one tenant on its home, or over the
        queue's tenants shard after shard; a long poll looks again until ``wait_seconds``
        (or ``answer_by``) is over. Keyed: ``claim_replay.claim_once``."""
        request = request or ClaimRequest(**fields)
        if idempotency_key is not None:
            call = keyed_call("claim", queue, idempotency_key, caller, body_fingerprint,
                              lambda: request.model_dump(mode="json"))
            assert call is not None
            return claim_replay.claim_once(self, queue, request, max_bytes=max_bytes,
                                           answer_by=answer_by, call=call)
        if len(self.engines) == 1:
            return self.engines[self.default_shard].claim_outcome(
                queue, request, max_bytes=max_bytes, answer_by=answer_by)
        deadline = time.monotonic() + request.wait_seconds
        if answer_by is not None:
            deadline = min(deadline, answer_by)
        if request.tenant is not None:
            # a pair without a home has nothing to claim yet: a long poll looks again for
            # its birth (less often: the lookup asks every shard) until its deadline
            while (home := self.homes.home_of(queue, request.tenant, create=False)) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return claim_logic.ClaimOutcome([])
                time.sleep(min(NO_HOME_POLL_SECONDS, left))
            left = max(0.0, deadline - time.monotonic())
            pinned = request.model_copy(update={"wait_seconds": left})
            return self._on(home, lambda e: e.claim_outcome(
                queue, pinned, max_bytes=max_bytes, answer_by=answer_by), waits=left,
                undo_late=lambda e, late: e.give_back(queue, late.tasks))
        once = request.model_copy(update={"wait_seconds": 0})
        while True:
            outcome = self._claim_round(queue, once, max_bytes, answer_by)
            if outcome.tasks or time.monotonic() + POLL_SECONDS >= deadline:
                return outcome
            time.sleep(POLL_SECONDS)

    def _claim_round(self, queue: str, request: ClaimRequest, max_bytes: int,
                     answer_by: float | None) -> claim_logic.ClaimOutcome:
        names = list(self.engines)
        with self._lock:
            start = next(self._turn) % len(names)
        tasks: list[ClaimedTask] = []
        failed_pairs = 0
        retry: list[int] = []
        down: list[ShardDown] = []
        for name in names[start:] + names[:start]:
            want = request.max - len(tasks)
            if want <= 0:
                break
            try:
                got = self._on(name, lambda e, w=want: e.claim_outcome(  # type: ignore[misc]
                    queue, request.model_copy(update={"max": w}), max_bytes=max_bytes,
                    answer_by=answer_by),
                    undo_late=lambda e, late: e.give_back(queue, late.tasks))
            except ShardDown as exc:  # the other shards' pairs still serve
                down.append(exc)
                continue
            tasks.extend(got.tasks)
            failed_pairs += got.failed_pairs
            if got.retry_after_ms is not None:
                retry.append(got.retry_after_ms)
            if max_bytes and got.tasks:
                break  # the byte budget was one shard's to fill: one answer must fit it
        if len(down) == len(names):
            raise down[0]
        return claim_logic.ClaimOutcome(tasks, min(retry) if retry else None,
                                        failed_pairs=failed_pairs)

    def replay_claim(self, queue: str, record: Any) -> list[ClaimedTask]:
        """A kept claim record's tasks still leased, rebuilt on each pair's home, in the
        record's order (a pair without a home has nothing leased)."""
        entries: list[list[Any]] = record["tasks"]
        groups: dict[str, list[list[Any]]] = defaultdict(list)
        for entry in entries:
            home = self.homes.home_of(queue, entry[1], create=False)
            if home is not None:
                groups[home].append(entry)
        found: dict[str, ClaimedTask] = {}
        for home, part in groups.items():
            for task in self._on(home, lambda e, p=part: e.replay_claim(  # type: ignore[misc]
                    queue, {"tasks": p})):
                found[str(task.id)] = task
        return [found[entry[0]] for entry in entries if entry[0] in found]

    def give_back(self, queue: str, tasks: Sequence[ClaimedTask]) -> None:
        """Return claimed tasks that could not be answered, each on its home; a shard that
        does not answer is logged (the reconciler puts its tasks back in line)."""
        groups, _ = self._by_home(queue, enumerate(t.lease_token for t in tasks))
        for home, indexes in groups.items():
            part = [tasks[i] for i in indexes]
            try:
                self._on(home, lambda e, p=part: e.give_back(queue, p))  # type: ignore[misc]
            except ShardDown:
                log.exception("giving back %d claimed tasks on shard %r failed; the "
                              "reconciler puts them back in line", len(part), home)

    def _by_home(self, queue: str, tokens: Iterable[tuple[int, str]]
                 ) -> tuple[dict[str, list[int]], list[int]]:
        """Item indexes grouped by the home of their lease token's tenant; the indexes
        whose token names no tenant with a home (rejected as not found)."""
        groups: dict[str, list[int]] = defaultdict(list)
        unknown: list[int] = []
        for index, token in tokens:
            tenant = tenant_of_token(token)
            home = None if tenant is None else self.homes.home_of(queue, tenant,
                                                                  create=False)
            if home is None:
                unknown.append(index)
            else:
                groups[home].append(index)
        return groups, unknown

    def _settle(self, queue: str, models: Sequence[Any], result: R,
                call: Callable[[Tierq, list[Any]], R], lists: Sequence[str]) -> R:
        """Send each item to the home of its lease token's tenant (``call`` with that
        shard's items) and gather the answers' ``lists`` into ``result``; items whose token
        names no pair with a home are rejected as not found."""
        groups, unknown = self._by_home(queue, enumerate(m.lease_token for m in models))
        result.rejected.extend(Rejection(id=models[i].id, reason="not_found") for i in unknown)
        for home, indexes in groups.items():
            got = self._on(home, partial(_with_items, call, [models[i] for i in indexes]))
            for name in (*lists, "rejected"):
                getattr(result, name).extend(getattr(got, name))
        return result

    def _settle_once(self, route: str, queue: str, models: Sequence[Any], result: R,
                     call: Callable[[Tierq, list[Any]], R], lists: Sequence[str],
                     idempotency_key: str | None, caller: Caller | None,
                     body_fingerprint: bytes | None) -> R:
        """:meth:`_settle`, once per key (the record in the warm tier every shard shares)."""
        keyed = keyed_call(route, queue, idempotency_key, caller, body_fingerprint,
                           lambda: models_body(models))
        return idempotency.answer_once(
            self.engines[self.default_shard].ctx, keyed,
            lambda: self._settle(queue, models, result, call, lists), type(result))

    def ack(self, queue: str, items: Sequence[AckItem | ClaimedTask | Mapping[str, Any]], *,
            idempotency_key: str | None = None, caller: Caller | None = None,
            body_fingerprint: bytes | None = None) -> AckResult:
        models = [i if isinstance(i, AckItem | ClaimedTask) else AckItem.model_validate(i)
                  for i in items]
        return self._settle_once("ack", queue, models, AckResult(),
                                 lambda e, m: e.ack(queue, m), ["acked", "cancelled"],
                                 idempotency_key, caller, body_fingerprint)

    def ack_and_claim(self, queue: str,
                      items: Sequence[AckItem | ClaimedTask | Mapping[str, Any]],
                      request: ClaimRequest | None = None, *, max_bytes: int = 0,
                      answer_by: float | None = None, idempotency_key: str | None = None,
                      caller: Caller | None = None, body_fingerprint: bytes | None = None,
                      **fields: Any) -> AckClaimResult:
        """``ack`` then ``claim_outcome``: on one shard in one call whose drop rides with
        the claim (``Tierq.ack_and_claim``); over several, the ack on the items' homes, then
        the claim over the shards (logic/ack_claim.py says what a failed claim answers).
        Keyed, a repeat answers the first answer again, its tasks still leased."""
        request = request or ClaimRequest(**fields)
        if len(self.engines) == 1:
            return self.engines[self.default_shard].ack_and_claim(
                queue, items, request, max_bytes=max_bytes, answer_by=answer_by,
                idempotency_key=idempotency_key, caller=caller,
                body_fingerprint=body_fingerprint)
        models = [i if isinstance(i, AckItem | ClaimedTask) else AckItem.model_validate(i)
                  for i in items]
        call = keyed_call("ack_and_claim", queue, idempotency_key, caller, body_fingerprint,
                          lambda: {"acks": models_body(models),
                                   "claim": request.model_dump(mode="json")})
        return ack_claim.keyed(
            self, queue, call,
            lambda: ack_claim.then_claim(queue, self.ack(queue, models), lambda: (
                self.claim_outcome(queue, request, max_bytes=max_bytes, answer_by=answer_by))))

    def nack(self, queue: str, items: Sequence[NackItem | Mapping[str, Any]], *,
             idempotency_key: str | None = None, caller: Caller | None = None,
             body_fingerprint: bytes | None = None) -> NackResult:
        models = [i if isinstance(i, NackItem) else NackItem.model_validate(i) for i in items]
        return self._settle_once("nack", queue, models, NackResult(),
                                 lambda e, m: e.nack(queue, m), ["retried", "dead", "cancelled"],
                                 idempotency_key, caller, body_fingerprint)

    def release(self, queue: str, items: Sequence[ReleaseItem | ClaimedTask | Mapping[str, Any]],
                *, idempotency_key: str | None = None, caller: Caller | None = None,
                body_fingerprint: bytes | None = None) -> ReleaseResult:
        models = [i if isinstance(i, ReleaseItem | ClaimedTask)
                  else ReleaseItem.model_validate(i) for i in items]
        return self._settle_once("release", queue, models, ReleaseResult(),
                                 lambda e, m: e.release(queue, m), ["released"],
                                 idempotency_key, caller, body_fingerprint)

    def heartbeat(self, queue: str, items: Sequence[HeartbeatItem | Mapping[str, Any]], *,
                  idempotency_key: str | None = None, caller: Caller | None = None,
                  body_fingerprint: bytes | None = None) -> HeartbeatResult:
        models = [i if isinstance(i, HeartbeatItem) else HeartbeatItem.model_validate(i)
                  for i in items]
        return self._settle_once("heartbeat", queue, models, HeartbeatResult(),
                                 lambda e, m: e.heartbeat(queue, m), ["extended", "cancelled"],
                                 idempotency_key, caller, body_fingerprint)

    # -- tasks -----------------------------------------------------------------------------

    def _shards_for_id(self, task_id: UUID | str) -> list[str]:
        """The shard the id's tag names first, then every other (ids made before the
        deployment was sharded carry no tag)."""
        first = self.by_tag.get(tag_of(str(task_id)))
        rest = [name for name in self.engines if name != first]
        return ([first] if first else []) + rest

    def _find_task(self, task_id: UUID | str, call: Callable[[Tierq], T], *,
                   waits: float = 0.0) -> T:
        down: ShardDown | None = None
        for name in self._shards_for_id(task_id):
            try:
                return self._on(name, call, waits=waits)
            except NotFound:
                continue
            except ShardDown as exc:
                down = down or exc
        if down is not None:
            raise down  # it may be on the shard that did not answer
        raise NotFound(f"task {task_id} not found")

    def get_task(self, queue: str, task_id: UUID | str, *, wait_seconds: float = 0,
                 tenant: str | None = None) -> TaskView:
        """The task, found by its id's tag; a wait runs on the shard that holds it (a
        shard without it answers ``NotFound`` before any wait)."""
        return self._find_task(task_id, lambda e: e.get_task(
            queue, task_id, wait_seconds=wait_seconds, tenant=tenant), waits=wait_seconds)

    def cancel_task(self, queue: str, task_id: UUID | str, *,
                    tenant: str | None = None) -> TaskView:
        return self._find_task(task_id, lambda e: e.cancel_task(queue, task_id, tenant=tenant))

    def cancel(self, queue: str, task_id: UUID | str, *,
               tenant: str | None = None) -> TaskView:
        """Cancel the task on the shard that holds it (found by its id's tag; another
        tenant's is not found on any)."""
        return self._find_task(task_id, lambda e: e.cancel(queue, task_id, tenant=tenant))

    # -- queues ----------------------------------------------------------------------------

    def _each(self, call: Callable[[Tierq], T]) -> dict[str, T]:
        """``call`` on every shard, in parallel; raises the first ``ShardDown``."""
        return self._each_part(dict.fromkeys(self.engines),
                               lambda engine, _part: call(engine))

    def _each_part(self, parts: Mapping[str, P], call: Callable[[Tierq, P], T]
                   ) -> dict[str, T]:
        """``call(engine, part)`` on each shard of ``parts`` with its part, in parallel; every
        call ends before the first ``ShardDown`` (in ``parts``' order) is raised."""
        if not parts:
            return {}
        with ThreadPoolExecutor(max_workers=len(parts)) as pool:
            futures = {name: pool.submit(self._on, name, partial(_with_part, call, part))
                       for name, part in parts.items()}
        return {name: future.result() for name, future in futures.items()}

    def put_queue(self, queue: str,
                  update: QueueSettingsUpdate | Mapping[str, Any]) -> QueueSettings:
        """Write the settings on every shard (each shard's pairs read them there); a shard
        that does not answer fails the call, and a repeat writes the same again."""
        model = update if isinstance(update, QueueSettingsUpdate) else \
            QueueSettingsUpdate.model_validate(update)
        return self._each(lambda e: e.put_queue(queue, model))[self.default_shard]

    def queue_settings(self, queue: str) -> QueueSettings:
        for name in self.engines:  # one answer: every shard holds the same
            try:
                return self._on(name, lambda e: e.queue_settings(queue))
            except ShardDown:
                continue
        raise ShardDown(self.default_shard)

    def get_queue(self, queue: str) -> QueueView:
        """A queue's admin view summed over the shards (a tenant's: :meth:`tenant_queue`)."""
        views = list(self._each(lambda e: e.get_queue(queue)).values())
        return merge_views(views)

    def tenant_queue(self, queue: str, tenant: str) -> TenantQueueView:
        """A tenant's view, read on its pair's home alone (the default shard for a pair that
        has none: the same defaults and zero counts)."""
        home = self.homes.home_of(queue, tenant, create=False) or self.default_shard
        return self._on(home, lambda e: e.tenant_queue(queue, tenant))

    def queue_known(self, queue: str) -> bool:
        """Whether any shard knows the queue (a shard that does not answer, when none of the
        others does, is ``ShardDown``: it may be the one that knows it)."""
        down: ShardDown | None = None
        for name in self.engines:
            try:
                if self._on(name, lambda e: e.queue_known(queue)):
                    return True
            except ShardDown as exc:
                down = down or exc
        if down is not None:
            raise down
        return False

    def purge_queue(self, queue: str) -> int:
        """Delete every task of a queue on every shard; how many. A shard that does not
        answer fails the call once the others are purged (a repeat purges the rest)."""
        return sum(self._each(lambda e: e.purge_queue(queue)).values())

    def queue_views_after(self, after: str, *, limit: int) -> Iterator[QueueView]:
        """Up to ``limit`` queues named after ``after``, in name order, each summed over the
        shards: every shard's first ``limit`` after ``after`` hold every view of the first
        ``limit`` names of all, so the page is whole."""
        by_queue: dict[str, list[QueueView]] = defaultdict(list)
        for views in self._each(lambda e: list(e.queue_views_after(
                after, limit=limit))).values():
            for view in views:
                by_queue[view.queue].append(view)
        return iter([merge_views(by_queue[q]) for q in sorted(by_queue)[:limit]])

    def tenant_queues_after(self, after: str, *, limit: int,
                            tenant: str) -> Iterator[TenantQueueView]:
        """:meth:`queue_views_after` for a tenant's views: its queues over every shard (a pair
        whose tasks stayed behind on a shard it moved from is on two), summed per queue."""
        by_queue: dict[str, list[TenantQueueView]] = defaultdict(list)
        for views in self._each(lambda e: list(e.tenant_queues_after(
                after, limit=limit, tenant=tenant))).values():
            for view in views:
                by_queue[view.queue].append(view)
        return iter([merge_views(by_queue[q]) for q in sorted(by_queue)[:limit]])

    def detailed_counts(self) -> list[TenantCounts]:
        """Every shard's counts per (queue, tenant), merged in that order (a pair whose
        finished tasks stayed on a shard it moved from has a row from each)."""
        lists = self._each(lambda e: e.detailed_counts()).values()
        return list(heapq.merge(*lists, key=lambda row: (row.queue, row.tenant)))

    def running(self, queue: str | None = None) -> list[RunningLease]:
        """Every current lease (of one queue if given), oldest first: the leases of the
        pairs each shard holds, merged."""
        lists = self._each(lambda e: e.running(queue)).values()
        return list(heapq.merge(*lists, key=lambda lease: lease.started_at))

    def throughput(self, queue: str, tenant: str | None = None) -> QueueThroughput:
        """The queue's throughput (``Tierq.throughput``): its counts are in the warm tier,
        which every shard's engine reads the same, so no shard is asked."""
        return self.engines[self.default_shard].throughput(queue, tenant)

    # -- cron schedules --------------------------------------------------------------------

    def put_schedule(self, name: str, body: ScheduleIn | Mapping[str, Any]) -> ScheduleView:
        """Create or replace a schedule on the home of its (queue, tenant), where its
        occurrences are enqueued; a copy of the same (tenant, name) on another shard (its
        queue was another) is removed first, so that one schedule fires once. Every shard
        must answer (503 otherwise, nothing written)."""
        model = schedule_body(body)
        tenant = model.tenant or DEFAULT_TENANT
        home = self.homes.home_of(model.queue, tenant)
        assert home is not None
        for shard in self.engines:  # every shard up and current before anything is removed
            self._on(shard, lambda engine: None)
        for other in self.engines:
            if other != home:
                with contextlib.suppress(NotFound):
                    self._on(other, lambda e: e.delete_schedule(name, tenant))
        return self._on(home, lambda e: e.put_schedule(name, model))

    def _find_schedule(self, name: str, tenant: str | None, call: Callable[[Tierq], T]) -> T:
        down: ShardDown | None = None
        for shard in self.engines:
            try:
                return self._on(shard, call)
            except NotFound as exc:
                missing = exc
            except ShardDown as exc:
                down = down or exc
        if down is not None:
            raise down  # it may be on the shard that did not answer
        raise missing

    def get_schedule(self, name: str, tenant: str | None = None) -> ScheduleView:
        return self._find_schedule(name, tenant, lambda e: e.get_schedule(name, tenant))

    def delete_schedule(self, name: str, tenant: str | None = None) -> ScheduleRemoved:
        return self._find_schedule(name, tenant, lambda e: e.delete_schedule(name, tenant))

    def schedules_after(self, after: tuple[str, str] | None, *, limit: int,
                        tenant: str | None = None) -> Iterator[ScheduleView]:
        """Up to ``limit`` schedules after (tenant, name) ``after``, over every shard."""
        lists = self._each(lambda e: list(e.schedules_after(after, limit=limit,
                                                            tenant=tenant))).values()
        return itertools.islice(heapq.merge(*lists, key=schedule_position), limit)

    def list_schedules(self, tenant: str | None = None) -> list[ScheduleView]:
        """Every schedule, or those of one tenant, in (tenant, name) order over every shard
        (a schedule lives on its pair's home)."""
        lists = self._each(lambda e: e.list_schedules(tenant)).values()
        return list(heapq.merge(*lists, key=schedule_position))

    # -- dead letters ----------------------------------------------------------------------

    def dlq_list(self, queue: str, *, tenant: str | None = None, limit: int = 100,
                 after: tuple[datetime, UUID] | None = None) -> list[TaskView]:
        """Dead letters, most recently dead first, after a position: of ``tenant`` on its
        pair's home, else the shards' lists merged."""
        if tenant is not None:
            home = self.homes.home_of(queue, tenant, create=False)
            if home is None:
                return []
            return self._on(home, lambda e: e.dlq_list(queue, tenant=tenant, limit=limit,
                                                       after=after))
        lists = self._each(lambda e: e.dlq_list(queue, limit=limit, after=after)).values()
        merged = heapq.merge(*lists, key=dead_position, reverse=True)
        return list(itertools.islice(merged, limit))

    def dlq_replay_slice(self, queue: str, *, ids: Sequence[UUID | str] = (),
                         all_dead: bool = False, tenant: str | None = None,
                         max_items: int | None = SLICE_MAX_ITEMS,
                         seconds: float | None = SLICE_SECONDS,
                         idempotency_key: str | None = None, caller: Caller | None = None,
                         body_fingerprint: bytes | None = None) -> ReplayResult:
        """Replay dead letters on the shards that hold them (``shard_ops.replay_dead``)."""
        return shard_ops.replay_dead(self, queue, ids=ids, all_dead=all_dead, tenant=tenant,
                                     max_items=max_items, seconds=seconds,
                                     idempotency_key=idempotency_key, caller=caller,
                                     body_fingerprint=body_fingerprint)

    def dlq_purge_slice(self, queue: str, *, ids: Sequence[UUID | str] = (),
                        all_dead: bool = False, tenant: str | None = None,
                        max_items: int | None = SLICE_MAX_ITEMS,
                        seconds: float | None = SLICE_SECONDS) -> PurgeResult:
        """Delete dead letters on the shards that hold them (``shard_ops.purge_dead``)."""
        return shard_ops.purge_dead(self, queue, ids=ids, all_dead=all_dead, tenant=tenant,
                                    max_items=max_items, seconds=seconds)

    def shards_for_selection(self, queue: str, tenant: str | None,
                             ids: Sequence[UUID]) -> dict[str, list[UUID]]:
        """Where a selection of dead letters is: {shard: the ids to ask it} (every shard,
        with no ids, for all of them; the pair's home alone for a pinned ``tenant``; an id
        that names no shard is asked of every shard)."""
        if tenant is not None:
            home = self.homes.home_of(queue, tenant, create=False)
            if home is None:
                return {}
            return {home: list(ids)}
        if not ids:
            return {name: [] for name in self.engines}
        out: dict[str, list[UUID]] = {}
        for task_id in ids:
            tagged = self.by_tag.get(tag_of(str(task_id)))
            for name in [tagged] if tagged else list(self.engines):
                out.setdefault(name, []).append(task_id)
        return out

    def list_queues(self) -> list[QueueView]:
        by_queue: dict[str, list[QueueView]] = defaultdict(list)
        for views in self._each(lambda e: e.list_queues()).values():
            for view in views:
                by_queue[view.queue].append(view)
        return [merge_views(by_queue[q]) for q in sorted(by_queue)]

    # -- maintenance -----------------------------------------------------------------------

    def run_job(self, name: str) -> JobRun[Any]:
        """One pass of maintenance job ``name`` on every shard at once, each under its own
        budget: each shard's summary, or the ShardDown of a shard that did not answer. A
        shard counts as hung only past the pass's budget and the call deadline together.
        The pairs a shard's reaper forgot lose their homes' copies on the other shards."""
        budget = self.engines[self.default_shard].job_config(name).budget_seconds

        def one(shard: str) -> Any:
            try:
                summary = self._on(shard, lambda e: e.run_job(name).summary(), waits=budget)
            except ShardDown as exc:
                return exc
            self.after_pass(shard, summary)
            return summary

        with ThreadPoolExecutor(max_workers=len(self.engines)) as pool:
            return JobRun(name, dict(zip(self.engines, pool.map(one, list(self.engines)),
                                         strict=True)))

    def after_pass(self, shard: str, summary: object) -> None:
        """After a pass on ``shard``: the pairs its reaper forgot (``forgotten``) lose their
        homes' copies on the other shards (``forget_homes``); a copy left is logged."""
        missed = self.forget_homes(shard, getattr(summary, "forgotten", ()))
        if missed:
            log.warning("some copies of the homes of pairs forgotten on shard %r were not "
                        "dropped (a later pass or lookup settles them): %s", shard, missed)

    def forget_homes(self, shard: str, forgotten: Iterable[str]) -> list[str]:
        """After the reaper of ``shard`` forgot idle pairs ("queue|tenant", with their home
        record there, in the statement that found them without rows): drop the copies of
        their homes on the other shards. Returns the pairs some shard missed (their copies
        name the same home, which is harmless: a later pass or lookup settles them)."""
        missed = []
        for item in forgotten:
            queue, _, tenant = item.partition("|")
            if self.homes.forget_elsewhere(queue, tenant, shard):
                missed.append(item)
        return missed


def _bulk_warm_up(engine: Tierq, *, queue: str, tenants: list[str]) -> int:
    return engine.bulk_warm_up(queue, tenants)


def _with_items(call: Callable[[Tierq, list[Any]], R], items: list[Any], engine: Tierq) -> R:
    return call(engine, items)


def _with_part(call: Callable[[Tierq, P], T], part: P, engine: Tierq) -> T:
    return call(engine, part)


class ShardMigrationFailed(RuntimeError):
    """Migrations failed on some shards (``failed``: shard → error); the others are applied
    (``applied``: shard → versions). Run the migration again."""

    def __init__(self, failed: Mapping[str, str], applied: Mapping[str, list[str]]) -> None:
        super().__init__("migrations failed on shard(s) " + "; ".join(
            f"{name}: {error}" for name, error in failed.items()))
        self.failed = dict(failed)
        self.applied = dict(applied)


def schedule_position(view: ScheduleView) -> tuple[str, str]:
    """Where a schedule is in the (tenant, name) order of the schedule lists."""
    return view.tenant, view.name


def dead_position(task: TaskView) -> tuple[datetime, UUID]:
    """Where a dead letter is in the newest-first order of the dead-letter lists."""
    return task.finished_at or task.created_at, task.id


ViewT = TypeVar("ViewT", QueueView, TenantQueueView)


def merge_views(views: Sequence[ViewT]) -> ViewT:
    """One view of a queue from each shard's (all admin views, or all one tenant's): counts
    summed, cold when any shard's part is; an admin view's tenant totals summed and its first
    tenants of all joined (settings and the queue-wide limits' use are the same on every
    shard: the first's are kept)."""
    first = views[0]
    counts = QueueCounts(**{field: sum(getattr(v.counts, field) for v in views)
                            for field in QueueCounts.model_fields})
    update: dict[str, Any] = {"counts": counts,
                              "mode": "cold" if any(v.mode == "cold" for v in views)
                              else "warm"}
    if isinstance(first, QueueView):
        total = sum(v.tenants_total for v in views)
        shown = sorted({t for v in views for t in v.tenants})[:TENANTS_SHOWN]
        update |= {"tenants": shown, "tenants_total": total,
                   "tenants_truncated": total > len(shown)}
    return first.model_copy(update=update)
