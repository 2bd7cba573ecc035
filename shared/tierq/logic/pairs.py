"""The (queue, tenant) registry in PostgreSQL: registration under the per-tenant cap on
queues, and the sliced walks of maintenance (which pairs have work, where the last pass
stopped, how much time a pass may take).

A pair is registered before its first task is written, and registered again by a process
that keeps using it at least every ``refresh_seconds(settings)`` (``last_seen``). The reaper
forgets a pair only when it has no row left and ``last_seen`` is older than the pair
retention, which is at least four times the refresh interval. So a process that still
remembers a pair has registered it again before that can happen, and one that remembers a
pair forgotten meanwhile registers it anew on its next use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import field
from datetime import UTC, datetime
from typing import Any

from tierq.config import Settings
from tierq.core.lazy import lazy_dataclass
from tierq.dal.task_store import Conn, TaskStore
from tierq.errors import QuotaExceeded
from tierq.logic.homes import require_here

Pair = tuple[str, str]
START: Pair = ("", "")  # before every pair: a queue name is never empty
REFRESH_CAP_SECONDS = 3600.0


def refresh_seconds(settings: Settings) -> float:
    """How long a process may use a pair it registered before registering it again."""
    return min(REFRESH_CAP_SECONDS, settings.pair_retention_seconds / 4)


def register(store: TaskStore, conn: Conn, queue: str, tenants: Iterable[str], *,
             now: float, cap: int, sharded: bool = False) -> None:
    """Register (or refresh) the pairs of ``queue`` on ``conn``, inside the caller's
    transaction. A new pair whose tenant already has ``cap`` queues raises QuotaExceeded
    (the caller's transaction then writes nothing). ``sharded``: a pair being moved off
    this shard, or moved already, raises PairMoving instead of being registered here."""
    wanted = sorted(set(tenants))
    if not wanted:
        return
    if sharded:
        require_here(store, conn, queue, wanted)
    # every tenant's quota lock (in name order) before any registry row is locked: taken
    # only for the new ones, after refreshing the others, two registrations of overlapping
    # tenants could each hold what the other waits for (a row refreshed by one, the quota
    # lock of a tenant new to both by the other)
    store.lock_tenant_quota(conn, wanted)
    at = datetime.fromtimestamp(now, UTC)
    known = set(store.refresh_pairs(conn, queue, wanted, at))
    new = [t for t in wanted if t not in known]
    if not new:
        return
    added = set(store.insert_pairs_within_quota(conn, queue, new, at, cap))
    refused = [t for t in new if t not in added]
    if refused:
        raise QuotaExceeded(
            f"tenant {refused[0]!r} already has {cap} queues (TIERQ_MAX_QUEUES_PER_TENANT); "
            f"queue {queue!r} would be one more",
            details=[{"field": "queue", "message": f"tenant {t!r} is at its cap of {cap} "
                      "queues"} for t in refused])


def register_pairs(store: TaskStore, queue: str, tenants: Iterable[str], *, now: float,
                   cap: int, sharded: bool = False) -> None:
    """``register`` in a transaction of its own."""
    with store.db.transaction() as conn:
        register(store, conn, queue, tenants, now=now, cap=cap, sharded=sharded)


# -- sliced walks -------------------------------------------------------------------------


class Budget:
    """The time one maintenance pass may take. Work already started finishes; what is past
    the budget waits for the next pass (whose walk goes on from the saved cursor)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.deadline = clock() + seconds

    @property
    def spent(self) -> bool:
        return self.clock() >= self.deadline


def load_cursors(store: TaskStore, conn: Conn | None = None) -> dict[str, Pair]:
    """Where each walk's last pass stopped (read on ``conn`` when given)."""
    return {r.walk: (r.queue, r.tenant) for r in store.maintenance_cursors(conn)}


def save_cursor(store: TaskStore, walk: str, at: Pair) -> None:
    store.save_maintenance_cursor(walk, at)


@lazy_dataclass
class WalkStats:
    """What one pass of a walk did: the items visited, the slices read, where it stopped
    and whether it got once around every item with work."""

    visited: int = 0
    slices: int = 0
    cursor: Pair = START
    completed: bool = False
    items: list[Any] = field(default_factory=list)


def walk(store: TaskStore, name: str, fetch_slice: Callable[[Pair], Sequence[Any]],
         key: Callable[[Any], Pair], budget: Budget, stats: WalkStats,
         cursors: dict[str, Pair], limit: int) -> Iterator[Sequence[Any]]:
    """Yield slices of items (in key order) starting after the walk's saved cursor, going
    round to the start once, until every item with work was visited once or the budget is
    spent. The caller visits each item of a slice and appends the ones it visited to
    ``stats.items`` (it may stop early when the budget is spent; at least one item of each
    pass is visited, so a tiny budget still moves on). The cursor saved after each slice is
    the last item visited: the next pass starts after it. ``fetch_slice`` returns at most
    ``limit`` items; fewer means the end was reached."""
    begin = cursors.get(name, START)
    position = begin
    wrapped = begin == START  # a walk from the start has nothing to come back round to
    stats.cursor = begin
    at_end = False  # the last slice was short: nothing lies after it
    while True:
        items = [] if at_end else list(fetch_slice(position))
        at_end = len(items) < limit
        if wrapped:
            items = [i for i in items if key(i) <= begin] if begin != START else items
        if not items:
            if wrapped:
                stats.completed = True
                return
            wrapped, position, at_end = True, START, False
            continue
        before = len(stats.items)
        stats.slices += 1
        yield items
        done = stats.items[before:]
        stats.visited += len(done)
        if done:
            position = key(done[-1])
            if position != stats.cursor:  # a walk round the same pairs writes nothing
                stats.cursor = position
                save_cursor(store, name, position)
        if len(done) < len(items) or budget.spent:
            return
        if wrapped and begin != START and position >= begin:
            stats.completed = True
            return
