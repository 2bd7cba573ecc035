"""Queues and their (queue, tenant) pairs (``sql/queries/engine.sql``, second part, and
``queue_views.sql``): settings, the pair registry, the sliced walks of maintenance and
their cursors, the listings of the HTTP API and a queue's view."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from psycopg.rows import scalar_row, tuple_row

from tierq.core.batch_ids import batch_of
from tierq.dal.postgres import int_array, uuid_array
from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import (
    ClaimedTaskRow,
    CursorRow,
    ForgetRow,
    MarkedPair,
    Pair,
    PairOldestReady,
    PairStateCounts,
    QueueSettingsRow,
    ReadyTenant,
    StateTotals,
)


class Keep(enum.Enum):
    """A setting an upsert leaves as stored (where None would clear it)."""

    KEEP = "keep"


KEEP = Keep.KEEP


class RegistryQueries(StoreBase):
    # -- queue settings -------------------------------------------------------------------

    def queue_settings_row(self, queue: str, *,
                           conn: Conn | None = None) -> QueueSettingsRow | None:
        rows = self._fetch("queue_settings_row", {"queue": queue}, positional(QueueSettingsRow),
                           conn)
        return rows[0] if rows else None

    def upsert_queue_settings(self, queue: str, *, warm_max: int | None,
                              warm_max_bytes: int | None, lease_seconds: int | None,
                              max_attempts: int | None, backoff_kind: str | None,
                              backoff_base_seconds: float | None,
                              backoff_cap_seconds: float | None, backoff_jitter: float | None,
                              retention_seconds: int | None,
                              paused: bool | None,
                              max_leased: int | Keep | None = KEEP,
                              rate: tuple[float, int] | Keep | None = KEEP,
                              tenant_max_leased: int | Keep | None = KEEP,
                              tenant_rate: tuple[float, int] | Keep | None = KEEP,
                              consumer: str | Keep | None = KEEP,
                              group_max_leased: int | Keep | None = KEEP,
                              timeout_seconds: int | Keep | None = KEEP) -> QueueSettingsRow:
        """Store the settings given (None keeps the stored value); the row after. The
        limits (a rate is ``(per_second, burst)``), the consumer (its JSON object as
        text) and the time limit are cleared by None and kept by ``KEEP``."""
        def put(value: object) -> object:
            return None if isinstance(value, Keep) else value

        rate_pair = put(rate)
        tenant_rate_pair = put(tenant_rate)
        [row] = self._fetch("upsert_queue_settings", {
            "queue": queue, "warm_max": warm_max, "warm_max_bytes": warm_max_bytes,
            "lease_seconds": lease_seconds, "max_attempts": max_attempts,
            "backoff_kind": backoff_kind, "backoff_base_seconds": backoff_base_seconds,
            "backoff_cap_seconds": backoff_cap_seconds, "backoff_jitter": backoff_jitter,
            "retention_seconds": retention_seconds, "paused": paused,
            "max_leased": put(max_leased), "set_max_leased": not isinstance(max_leased, Keep),
            "rate_per_second": rate_pair[0] if isinstance(rate_pair, tuple) else None,
            "rate_burst": rate_pair[1] if isinstance(rate_pair, tuple) else None,
            "set_rate": not isinstance(rate, Keep),
            "tenant_max_leased": put(tenant_max_leased),
            "set_tenant_max_leased": not isinstance(tenant_max_leased, Keep),
            "tenant_rate_per_second":
                tenant_rate_pair[0] if isinstance(tenant_rate_pair, tuple) else None,
            "tenant_rate_burst":
                tenant_rate_pair[1] if isinstance(tenant_rate_pair, tuple) else None,
            "set_tenant_rate": not isinstance(tenant_rate, Keep),
            "consumer": put(consumer), "set_consumer": not isinstance(consumer, Keep),
            "group_max_leased": put(group_max_leased),
            "set_group_max_leased": not isinstance(group_max_leased, Keep),
            "timeout_seconds": put(timeout_seconds),
            "set_timeout": not isinstance(timeout_seconds, Keep),
        }, positional(QueueSettingsRow))
        return row

    def known_queues(self) -> list[str]:
        """Every queue with settings or tasks, by name."""
        return self._fetch("known_queues", None, scalar_row)

    def metric_queues(self, limit: int) -> list[str]:
        """The configured queues whose metrics carry their name: the first ``limit`` by
        when their settings were first stored."""
        return self._fetch("metric_queues", {"limit": limit}, scalar_row)

    def queue_known(self, queue: str, tenant: str | None) -> bool:
        """Whether the queue has settings or has had tasks (of ``tenant``, if given)."""
        [known] = self._fetch("queue_known", {"queue": queue, "tenant": tenant}, scalar_row)
        return bool(known)

    # -- the pair registry ----------------------------------------------------------------

    def all_pairs(self) -> list[Pair]:
        return cast(list[Pair], self._fetch("all_pairs", None, tuple_row))

    def tenants_of_queue(self, queue: str) -> list[str]:
        return self._fetch("tenants_of_queue", {"queue": queue}, scalar_row)

    def refresh_pairs(self, conn: Conn, queue: str, tenants: Sequence[str],
                      now: datetime) -> list[str]:
        """Mark the pairs seen now; the tenants that were registered."""
        return self._fetch("refresh_pairs", {"queue": queue, "tenants": tenants, "now": now},
                           scalar_row, conn)

    def lock_tenant_quota(self, conn: Conn, tenants: Sequence[str]) -> None:
        """Hold the tenants' quota locks until ``conn``'s transaction ends."""
        self._fetch("lock_tenant_quota", {"tenants": tenants}, scalar_row, conn)

    def insert_pairs_within_quota(self, conn: Conn, queue: str, tenants: Sequence[str],
                                  now: datetime, cap: int) -> list[str]:
        """Register new pairs while their tenant is under ``cap``; the tenants registered."""
        return self._fetch("insert_pairs_within_quota", {
            "queue": queue, "tenants": tenants, "now": now, "cap": cap}, scalar_row, conn)

    def touch_pairs(self, pairs: Sequence[Pair], now: datetime, stale: datetime) -> None:
        """Pairs seen busy now (those last seen before ``stale``); a row another
        transaction holds is passed over, not waited for."""
        self._execute("touch_pairs", {"queues": [p[0] for p in pairs],
                                      "tenants": [p[1] for p in pairs],
                                      "now": now, "stale": stale})

    def mark_cold_mode(self, pairs: Sequence[Pair], cold: Sequence[bool],
                       now: datetime) -> None:
        """Record which pairs the mover left in cold mode (``cold``) or found warm again."""
        self._execute("mark_cold_mode", {"queues": [p[0] for p in pairs],
                                         "tenants": [p[1] for p in pairs],
                                         "cold": cold, "now": now})

    def mark_cold_mode_unless_held(self, pairs: Sequence[Pair], cold: Sequence[bool],
                                   now: datetime) -> list[Pair]:
        """As :meth:`mark_cold_mode`, passing over a row another transaction holds, not
        waiting for it; returns the pairs passed over."""
        return cast(list[Pair], self._fetch("mark_cold_mode_unless_held", {
            "queues": [p[0] for p in pairs], "tenants": [p[1] for p in pairs],
            "cold": cold, "now": now}, tuple_row))

    def forget_idle_pairs(self, after: Pair, limit: int, before: datetime) -> list[ForgetRow]:
        """Forget the idle pairs of one slice of the registry after ``after``; a pair
        whose row another transaction holds is kept, not waited for."""
        return self._fetch("forget_idle_pairs", {
            "after_queue": after[0], "after_tenant": after[1], "limit": limit,
            "before": before}, positional(ForgetRow))

    # -- the walks of maintenance ---------------------------------------------------------

    def maintenance_cursors(self, conn: Conn | None = None) -> list[CursorRow]:
        return self._fetch("maintenance_cursors", None, positional(CursorRow), conn)

    def save_maintenance_cursor(self, walk: str, at: Pair) -> None:
        self._execute("save_maintenance_cursor", {"walk": walk, "queue": at[0],
                                                  "tenant": at[1]})

    def walk_warm_pairs(self, after: Pair, limit: int) -> list[Pair]:
        """Pairs with warm rows after ``after``."""
        return cast(list[Pair], self._fetch("walk_warm_pairs", {
            "after_queue": after[0], "after_tenant": after[1], "limit": limit}, tuple_row))

    def walk_cold_to_warm_pairs(self, after: Pair, limit: int) -> list[MarkedPair]:
        """Pairs with cold rows or recorded in cold mode, after ``after``."""
        return self._fetch("walk_cold_to_warm_pairs", {
            "after_queue": after[0], "after_tenant": after[1], "limit": limit},
            positional(MarkedPair))

    def walk_finished_queues(self, after_queue: str, limit: int) -> list[str]:
        """Queues with done or dead rows after ``after_queue``."""
        return self._fetch("walk_finished_queues", {"after_queue": after_queue,
                                                    "limit": limit}, scalar_row)

    def walk_gauge_pairs(self, after: Pair, limit: int) -> list[Pair]:
        """Pairs with warm, cold, delayed or dead rows after ``after``."""
        return cast(list[Pair], self._fetch("walk_gauge_pairs", {
            "after_queue": after[0], "after_tenant": after[1], "limit": limit}, tuple_row))

    # -- listings -------------------------------------------------------------------------

    def queue_names_page(self, after: str, limit: int, tenant: str | None) -> list[str]:
        """Queue names after ``after``; with ``tenant``, only the queues it has had tasks in."""
        params = {"after": after, "limit": limit, "tenant": tenant}
        if tenant is None:
            return self._fetch("queue_names_page", params, scalar_row)
        return self._fetch("queue_names_of_tenant_page", params, scalar_row)

    def pairs_page(self, after: Pair, limit: int, *, tenant: str | None,
                   queue: str | None) -> list[Pair]:
        """Registered pairs after ``after`` (of ``tenant`` and/or ``queue`` when given), each
        filter by a statement of its own (and so by its own index)."""
        params: dict[str, Any] = {"after_queue": after[0], "after_tenant": after[1],
                                  "limit": limit, "tenant": tenant, "queue": queue}
        if tenant is not None and queue is not None:
            name = "pair_of_queue_and_tenant_page"
        elif tenant is not None:
            name = "pairs_of_tenant_page"
        elif queue is not None:
            name = "pairs_of_queue_page"
        else:
            name = "pairs_page"
        return cast(list[Pair], self._fetch(name, params, tuple_row))

    def pairs_with_warm_rows(self, pairs: Sequence[Pair]) -> list[Pair]:
        """Which of ``pairs`` have warm rows, in their order."""
        return cast(list[Pair], self._fetch("pairs_with_warm_rows", {
            "queues": [q for q, _ in pairs], "tenants": [t for _, t in pairs]}, tuple_row))

    def pair_state_counts(self, pairs: Sequence[Pair]) -> list[PairStateCounts]:
        return self._fetch("pair_state_counts", {
            "queues": [q for q, _ in pairs], "tenants": [t for _, t in pairs]},
            positional(PairStateCounts))

    def pair_oldest_ready(self, pairs: Sequence[Pair],
                          heads: Sequence[str]) -> list[PairOldestReady]:
        """When the oldest ready task of each pair became ready: of its cold rows and of
        the warm tasks ``heads`` (the first of each priority in the pairs' ready sets),
        rows or batch rows' members (ready since their batch was made)."""
        members = [m for m in map(batch_of, heads) if m is not None]
        return self._fetch("pair_oldest_ready", {
            "queues": [q for q, _ in pairs], "tenants": [t for _, t in pairs],
            "heads": heads, "head_batches": uuid_array(m[0] for m in members),
            "head_places": int_array(m[1] for m in members)}, positional(PairOldestReady))

    # -- a queue's view -------------------------------------------------------------------

    def queue_view_state_totals(self, queue: str) -> StateTotals:
        [row] = self._fetch("queue_view_state_totals", {"queue": queue},
                            positional(StateTotals))
        return row

    def queue_view_ready_tenants(self, queue: str) -> list[ReadyTenant]:
        return self._fetch("queue_view_ready_tenants", {"queue": queue},
                           positional(ReadyTenant))

    def queue_view_tenant_count(self, queue: str) -> int:
        [count] = self._fetch("queue_view_tenant_count", {"queue": queue}, scalar_row)
        return int(count)

    # -- idempotent claims ----------------------------------------------------------------

    def claimed_tasks_by_ids(self, queue: str, ids: Sequence[str],
                             tenants: Sequence[str]) -> list[ClaimedTaskRow]:
        """The claimed tasks' rows, each when it is of the tenant given with its id; a
        member still in its batch row as the row it would have."""
        found: list[tuple[str, str, int, str]] = []
        for task_id, tenant in zip(ids, tenants, strict=True):
            member = batch_of(task_id)
            if member is not None:
                found.append((task_id, member[0], member[1], tenant))
        return self._fetch("claimed_tasks_by_ids", {
            "queue": queue, "ids": uuid_array(ids), "tenants": list(tenants),
            "member_ids": uuid_array(f[0] for f in found),
            "batches": uuid_array(f[1] for f in found),
            "places": int_array(f[2] for f in found),
            "member_tenants": [f[3] for f in found]}, positional(ClaimedTaskRow))

