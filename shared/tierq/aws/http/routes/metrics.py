"""Live numbers: ``GET /v1/metrics/queues/detailed`` (per (queue, tenant): warm, cold, waiting,
held, delayed, leased and dead counts, the oldest ready task, the groups with work and the
oldest group head) and ``GET /v1/metrics/queues/running`` (current leases: who holds them,
since when, until when, of which group); ``GET /v1/queues/{queue}/throughput``
(tasks enqueued and acked per second over the last 15 minutes).

Both list in (queue, tenant) order, page by page (see :mod:`tierq.aws.http.paging`): a caller
pinned to a tenant gets only its tenant's pairs, selected in SQL."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from tierq.aws.http import paging, request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import QueuePath, QueueQuery, TenantQuery
from tierq.aws.runtime import (
    default_engine,
    engine,
    pair_engine,
    shard_engines,
    shard_rows,
)
from tierq.engine import Tierq
from tierq.errors import NotFound
from tierq.logic import queues as queue_logic
from tierq.logic import throughput as throughput_logic
from tierq.logic.context import Pair
from tierq.models import RunningLease, TenantCounts
from tierq.models.envelopes import DetailedMetrics, RunningMetrics
from tierq.models.throughput import QueueThroughput

router = Router()

MAX_PAGE = 5000
DEFAULT_PAGE = 1000
# Pairs whose counts are read per round while a page fills.
COUNTS_CHUNK = 100
# Pairs one page of running leases may visit (each is a Valkey round trip): past it the page
# ends early with a cursor, so a request stays short however many pairs have work.
RUNNING_SCAN_PAIRS = 2000
_QUEUE = paging.CursorPart("queue", paging.NAME_PART)
_TENANT = paging.CursorPart("tenant", paging.NAME_PART)
PAIRS = paging.CursorForm("pairs", (_QUEUE, _TENANT))
# a lease's start (ms since the epoch) and id; no id: after every lease of that start
LEASES = paging.CursorForm("leases", (
    _QUEUE, _TENANT, paging.CursorPart("started_ms", paging.COUNT_PART, int),
    paging.CursorPart("id", f"({paging.UUID_PART})?")))

LATEST_MS = 10**16 - 1
PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")]
PAGING = ("At most `limit` per page and never more than fits a Lambda response (6 MB as the "
          "runtime writes it): a page may hold fewer. `next` is the cursor of the next page, "
          "null on the last.")


@router.get(
    "/v1/metrics/queues/detailed",
    summary="Counts per queue and tenant",
    description="One row per (queue, tenant), in that order (only the caller's tenant when "
                "it is pinned). " + PAGING,
    operation_id="queueMetricsDetailed",
    tags=["metrics"],
    responses=responses("One row per (queue, tenant)."),
)
def detailed(queue: QueueQuery = None, limit: PageSize = DEFAULT_PAGE,
             after: Annotated[str | None, PAIRS.query()] = None) -> DetailedMetrics:
    pinned = request.pinned_tenant()
    start = PAIRS.decode(after)
    # each pair is on one shard: the shards' rows, in (queue, tenant) order, merged
    chunk = min(limit + 1, COUNTS_CHUNK)
    source = heapq.merge(*(shard_rows(name, queue_logic.iter_counts(
        tq.ctx, (start[0], start[1]) if start else ("", ""), tenant=pinned, queue=queue,
        chunk=chunk), chunk) for name, tq in shard_engines().items()), key=_pair_of)
    rows, last = paging.fill(source, _pair_of, limit=limit)
    return DetailedMetrics(queues=rows, timestamp=datetime.now(UTC),
                           next=None if last is None else
                           PAIRS.encode(*last))


def _pair_of(row: TenantCounts) -> Pair:
    return row.queue, row.tenant


LeasePosition = tuple[str, str, int, str]


def _lease_position(lease: RunningLease) -> LeasePosition:
    return (lease.queue, lease.tenant, *queue_logic.lease_key(lease))


def leases_after(after: LeasePosition | None, *, tenant: str | None,
                 queue: str | None) -> Iterator[RunningLease | paging.Resume[LeasePosition]]:
    """Current leases after a position, pair by pair (pairs with warm rows only, of the
    tenant and queue given, selected in SQL); a resting point after RUNNING_SCAN_PAIRS."""
    if after is not None:
        # the rest of the pair the previous page stopped in
        pair, started = (after[0], after[1]), (after[2], after[3])
        if (tenant is None or pair[1] == tenant) and (queue is None or pair[0] == queue):
            home = pair_engine(pair[0], pair[1], create=False)
            yield from queue_logic.pair_leases(home.ctx, pair, started)
    start: Pair = (after[0], after[1]) if after else ("", "")
    # the pairs of every shard in (queue, tenant) order, each with its shard's engine
    pairs = heapq.merge(*(shard_rows(name, _pairs_of(tq, start, tenant, queue),
                                     RUNNING_SCAN_PAIRS)
                          for name, tq in shard_engines().items()), key=lambda item: item[0])
    for visited, (pair, tq) in enumerate(pairs):
        if visited == RUNNING_SCAN_PAIRS:
            # the next page starts after the last pair visited, all of its leases returned
            yield paging.Resume(_after_pair(start))
            return
        yield from queue_logic.pair_leases(tq.ctx, pair)
        start = pair


def _pairs_of(tq: Tierq, start: Pair, tenant: str | None,
              queue: str | None) -> Iterator[tuple[Pair, Tierq]]:
    """The pairs with warm rows of one shard after ``start``, each with its engine."""
    for pair in queue_logic.iter_pairs(tq.ctx, start, tenant=tenant, queue=queue,
                                       with_warm_rows=True):
        yield pair, tq


def _after_pair(pair: Pair) -> LeasePosition:
    """A position after every lease of a pair (leases start at ms ≥ 0, before this one, the
    largest a cursor holds; ids sort after '')."""
    return pair[0], pair[1], LATEST_MS, ""


@router.get(
    "/v1/metrics/queues/running",
    summary="Current leases",
    description="Every lease held now, by (queue, tenant) and oldest first within each (only "
                "the caller's tenant when it is pinned). " + PAGING,
    operation_id="queueMetricsRunning",
    tags=["metrics"],
    responses=responses("Every lease held now."),
)
def running(queue: QueueQuery = None, limit: PageSize = DEFAULT_PAGE,
            after: Annotated[str | None, LEASES.query()] = None) -> RunningMetrics:
    pinned = request.pinned_tenant()
    start = LEASES.decode(after)
    position: LeasePosition | None = (start[0], start[1], start[2], start[3]) if start else None
    leases, last = paging.fill(leases_after(position, tenant=pinned, queue=queue),
                               _lease_position, limit=limit)
    return RunningMetrics(running=leases, timestamp=datetime.now(UTC),
                          next=None if last is None else
                          LEASES.encode(*last))


@router.get(
    "/v1/queues/<queue>/throughput",
    summary="Tasks enqueued and acked per second",
    description="Per second over the last 15 minutes (900 buckets, oldest first, on the warm "
                "tier's clock): tasks created by enqueues and tasks acknowledged, of `tenant` "
                "or, without it, of every tenant of the queue summed. A caller pinned to a "
                "tenant gets its own tenant's counts, for any valid queue name (zeros where "
                "it has none: never 404, so it tells nothing of other tenants' queues); "
                "naming another tenant is 403. Counts "
                "live in the warm tier: a cache that evicts them (or loses its data) loses "
                "chart data only.",
    operation_id="queueThroughput",
    tags=["metrics"],
    responses=responses("Enqueued and acked per second.", 404),
)
def throughput(queue: QueuePath, tenant: TenantQuery = None) -> QueueThroughput:
    tenant = request.check_tenant(tenant)  # a pinned caller: its own tenant, or 403
    if request.pinned_tenant() is None and not engine().queue_known(queue):
        raise NotFound(f"no queue {queue!r} (it has no settings and never had tasks)")
    # the counts are in the warm tier, which every shard's engine reaches
    return throughput_logic.queue_throughput(default_engine().ctx, queue, tenant)
