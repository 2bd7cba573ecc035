"""``tierq-engine``: the ``Tierq`` engine in each worker process. Producers enqueue in
batches of 500 (plain mappings, validated by the engine as one list); consumers claim up to
400 and acknowledge the claimed tasks; one loop per process; default settings. The
scheduled maintenance jobs run beside the workers (``Maintenance``). A ``Workload`` changes
the batch sizes and gives the tasks tenants, priorities and keys (bench.vs_bare); claims
then name no tenant and rotate across the tenants."""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from bench.phases import Sync, Target
from bench.systems import (
    QUEUE,
    TIERQ_CLAIM_BATCH,
    TIERQ_ENQUEUE_BATCH,
    Prepared,
    System,
    Workload,
    batches,
    claim_and_ack_loop,
    count_rows,
    mixed_rows,
    produced,
    quiet_logs,
)

if TYPE_CHECKING:
    from bench.stores import Stores
    from tierq import Tierq

# The fork server of tierq's worker processes (engine and HTTP paths) imports these once.
# The engine imports its enqueue, claim and lease logic on first use (tierq.core.lazy: what
# a Lambda function's requests never call costs its cold start nothing); a long-running
# worker holds them after its first call, so they are preloaded too, not imported (and,
# without bytecode caches, compiled) inside the measured phase; the last one builds what
# tierq defers to first use, once for every process (bench/systems/tierq_prebuilt.py).
TIERQ_PRELOAD = ("bench.systems.tierq_engine", "bench.systems.tierq_http", "tierq.engine",
                 "tierq.config", "tierq.models", "psycopg", "redis", "httpx",
                 "tierq.logic.enqueue", "tierq.logic.claim", "tierq.logic.leases",
                 "tierq.logic.tiering", "tierq.models.leases", "bench.systems.tierq_prebuilt")
UNFINISHED = "SELECT count(*) FROM tierq_tasks WHERE state IN ('delayed', 'cold', 'warm')"
# a spec's "sketch": the module of bench/systems/ whose sketch_store the engines take
SKETCH_MODULES = {"hot": "hot_sketch", "log": "log_sketch", "batch": "batch_sketch",
                  "append": "append_sketch"}


# Connections a worker process's engine may hold (one loop a process needs few).
ENGINE_POOL_MAX = 4
# The settings each worker process's engine is given by the benchmark itself, never by an
# option (``parsed_settings``).
BENCH_FIELDS = ("database_url", "valkey_url", "db_pool_max")


def tierq_engine(spec: dict[str, Any]) -> Tierq:
    from tierq import Tierq
    from tierq.config import Settings

    fields = dict(spec.get("settings", {}))
    if spec.get("sketch"):  # (a sketch's statements stand in for the rows' statements)
        fields.setdefault("batch_rows", False)
    settings = Settings(database_url=spec["database_url"], valkey_url=spec["valkey_url"],
                        db_pool_max=ENGINE_POOL_MAX, **fields)
    tq = Tierq(settings=settings)
    if spec.get("sketch"):  # a design's writes (bench/systems/sketches.py)
        import importlib

        module = SKETCH_MODULES[spec["sketch"]]
        importlib.import_module(f"bench.systems.{module}").sketch_store(tq.ctx.store)
    return tq


def tierq_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    quiet_logs()
    tq = tierq_engine(spec)
    tq.queue_settings(spec["queue"])  # connect and warm the settings cache before the start
    tq.warm.ping()  # (and Valkey's connection, as the consumers do)
    tq.warm_up()  # a long-running worker's first calls: before the start (tierq.core.warm_up)
    latencies: list[float] = []
    lo = spec["range"][0]
    rows = mixed_rows(spec, os.urandom(4).hex())
    sync.ready_and_wait(spec["index"])
    for batch in batches(spec, sync, spec.get("batch", TIERQ_ENQUEUE_BATCH)):
        items: list[dict[str, Any]]
        if rows is None:  # plain mappings: one list validated
            items = [{"payload": {"i": i}} for i in batch]
        else:
            items = [{"payload": {"i": i}, "tenant": rows.tenants[i - lo],
                      "priority": rows.priorities[i - lo], "key": rows.keys[i - lo]}
                     for i in batch]
        began = time.perf_counter()
        tq.enqueue(spec["queue"], items)
        latencies.append(time.perf_counter() - began)
        sync.add_enqueued(len(items))
    t_end = time.time()
    tq.close()
    return produced(spec, t_end, latencies)


def tierq_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A worker: claim a batch, acknowledge it, until the phase's tasks are finished."""
    return _claim_and_ack(spec, sync, recycle=False)


def tierq_recycle(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    """A worker that keeps the backlog constant: claim a batch, ack it, enqueue as many new
    tasks (they join the back of the line). Counts acks."""
    return _claim_and_ack(spec, sync, recycle=True)


def _claim_and_ack(spec: dict[str, Any], sync: Sync, *, recycle: bool) -> dict[str, Any]:
    from tierq import ClaimRequest

    quiet_logs()
    tq = tierq_engine(spec)
    queue = spec["queue"]
    tq.queue_settings(queue)
    tq.warm.ping()
    tq.warm_up()
    request = ClaimRequest(max=spec.get("claim_batch", TIERQ_CLAIM_BATCH),
                           lease_seconds=spec.get("lease_seconds", 300))
    next_payload = [spec["index"] * 1_000_000_000]  # recycled tasks' payloads

    # an ack that claims the next batch (TierqEngine(ack_and_claim=True)): the tasks it
    # claimed are the next claim's, which then makes no call
    fused = spec.get("ack_and_claim", False)
    claimed_along: list[Any] = []

    def claim() -> Sequence[Any]:
        if claimed_along:
            got = list(claimed_along)
            claimed_along.clear()
            return got
        return tq.claim(queue, request)

    # acks of several claims at once (TierqEngine(ack_claims=N)): claimed tasks held back
    # until N claims are, or a claim finds nothing
    ack_claims = spec.get("ack_claims", 1)
    held: list[Any] = []
    claims_held = [0]

    def ack(got: Sequence[Any]) -> tuple[int, int]:
        if ack_claims > 1:
            held.extend(got)
            claims_held[0] += 1
            if claims_held[0] < ack_claims:
                return 0, 0
            return flush()
        return ack_now(got)

    def flush() -> tuple[int, int]:
        if not held:
            return 0, 0
        got = list(held)
        held.clear()
        claims_held[0] = 0
        return ack_now(got)

    def ack_now(got: Sequence[Any]) -> tuple[int, int]:
        # the claimed tasks themselves, acked without a result
        if fused:
            answer = tq.ack_and_claim(queue, got, request)
            claimed_along.extend(answer.tasks)
            n, refused = len(answer.acked), len(answer.rejected)
        else:
            result = tq.ack(queue, got)
            n, refused = len(result.acked), len(result.rejected)
        if recycle:
            tq.enqueue(queue, [{"payload": {"i": next_payload[0] + i}} for i in range(n)])
            next_payload[0] += n
            sync.add_enqueued(n)
        return n, refused

    sync.ready_and_wait(spec["index"])
    out = claim_and_ack_loop(sync, claim, ack, flush if ack_claims > 1 else None)
    tq.close()
    return out


class Maintenance:
    """The scheduled jobs of a deployment, in a thread: delayed mover every second,
    cold -> warm and the reaper every 5 s (the defaults of TIERQ_*_EVERY)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tierq-maintenance",
                                        daemon=True)
        self.errors: list[str] = []

    def _run(self) -> None:
        tq = tierq_engine(self.spec)
        s = tq.settings
        jobs = [(s.delayed_every, tq.run_delayed_mover), (s.cold_to_warm_every,
                tq.run_cold_to_warm), (s.reaper_every, tq.run_reaper)]
        next_at = [time.monotonic() + every for every, _ in jobs]
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                for i, (every, job) in enumerate(jobs):
                    if now >= next_at[i]:
                        try:
                            job()
                        except Exception as exc:  # reported, the bench goes on
                            self.errors.append(f"{job.__name__}: {exc}")
                        next_at[i] = now + every
                self._stop.wait(max(0.01, min(next_at) - time.monotonic()))
        finally:
            tq.close()

    def __enter__(self) -> Maintenance:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def tierq_remaining(database_url: str) -> int:
    return count_rows(database_url, UNFINISHED)


class TierqEngine(System):
    name = "tierq-engine"
    uses_valkey = True
    preload: tuple[str, ...] = TIERQ_PRELOAD

    def __init__(self, settings: dict[str, Any] | None = None, maintenance: bool = True,
                 workload: Workload | None = None, ack_claims: int = 1,
                 named_settings: bool = False, ack_and_claim: bool = False) -> None:
        """``ack_claims`` > 1: each consumer acks its tasks once it holds that many claims
        (or a claim finds nothing), as acks of several workers committed together would
        reach PostgreSQL (docs/design-rotating-tables.md, section 6); named
        ``tierq-engine+acks-of-<N>-claims``. ``named_settings``: the settings name the
        system (``tierq-engine+<field>=<value>``, comma separated, or a sketch's name and
        them; after ``+acks-of-<N>-claims`` or ``+ack-and-claim``), to run beside the
        defaults.
        ``ack_and_claim``: each consumer acks a batch and claims the next in one call
        (``Tierq.ack_and_claim``), named ``tierq-engine+ack-and-claim``; its claim latency
        is that of the claims made alone (the first, and after one found nothing)."""
        if ack_claims > 1 and ack_and_claim:
            raise ValueError("ack_claims and ack_and_claim do not go together")
        if ack_claims < 1:
            raise ValueError(f"ack_claims must be 1 or more, got {ack_claims}")
        self.settings = settings or {}
        self.maintenance = maintenance
        self.workload = workload
        self.ack_claims = ack_claims
        self.ack_and_claim = ack_and_claim
        named = ",".join(f"{k}={v}" for k, v in self.settings.items()) \
            if named_settings else ""
        if ack_claims > 1:
            self.name = f"tierq-engine+acks-of-{ack_claims}-claims" + (named and f"+{named}")
        elif ack_and_claim:
            self.name = "tierq-engine+ack-and-claim" + (named and f"+{named}")
        elif named:
            # (a sketch's settings name it after the sketch: tierq-append-sketch+…)
            self.name = f"{type(self).name}+{named}"

    def prepare(self, stores: Stores) -> Prepared:
        url = stores.fresh_tierq("bench_tierq")
        spec: dict[str, Any] = {"database_url": url, "valkey_url": stores.valkey_url,
                                "queue": QUEUE, "settings": self.settings}
        if self.workload is not None:
            spec.update(self.workload.spec())
        if self.ack_claims > 1:
            spec["ack_claims"] = self.ack_claims
        if self.ack_and_claim:
            spec["ack_and_claim"] = True
        return Prepared(self.name, spec, url)

    def producer(self) -> Target:
        return tierq_produce

    def consumer(self) -> Target:
        return tierq_consume

    @contextlib.contextmanager
    def running(self, prepared: Prepared) -> Iterator[None]:
        if not self.maintenance:
            yield
            return
        with Maintenance(prepared.spec) as jobs:
            yield
        if jobs.errors:
            print(f"  maintenance errors: {jobs.errors[:3]}", flush=True)

    def remaining(self, prepared: Prepared) -> int:
        return tierq_remaining(prepared.database_url)


def parsed_settings(parser: argparse.ArgumentParser, items: Sequence[str],
                    option: str = "--tierq-setting") -> dict[str, Any]:
    """``FIELD=VALUE`` items of ``option`` as settings, each checked by
    ``tierq.config.Settings``: a field it does not have, one the benchmark sets itself
    (``BENCH_FIELDS``), a field named twice or a value its rule refuses ends the run before
    anything starts."""
    from tierq.config import Settings, SettingsError

    out: dict[str, Any] = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or field not in Settings.fields:
            parser.error(f"{option} wants FIELD=VALUE with a field of "
                         f"tierq.config.Settings, got {item!r}")
        if field in BENCH_FIELDS:
            parser.error(f"{option}: {field} is the benchmark's own ("
                         f"{', '.join(BENCH_FIELDS)} are set for every worker process)")
        if field in out:
            parser.error(f"{option}: {field} is named twice")
        out[field] = value
    try:
        Settings(database_url="postgresql://check", valkey_url="redis://check", **out)
    except SettingsError as exc:
        parser.error(f"{option}: {exc}")
    return out
