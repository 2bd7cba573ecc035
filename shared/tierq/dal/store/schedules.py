"""Cron schedules and their installed occurrences (``sql/queries/schedules.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from psycopg.rows import dict_row, scalar_row, tuple_row

from tierq.dal.store.base import Conn, StoreBase, positional
from tierq.dal.store.rows import LiveOccurrence, PendingOccurrence, ScheduleDue, ScheduleRow


class ScheduleQueries(StoreBase):
    def schedule_lock(self, conn: Conn, tenant: str, name: str) -> None:
        """Wait for the schedule's lock, held until ``conn``'s transaction ends."""
        self._fetch("schedule_lock", {"tenant": tenant, "name": name}, scalar_row, conn)

    def schedules_try_lock(self, conn: Conn,
                           keys: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """Take the locks of those of the schedules ``keys`` (tenant, name) that are free,
        held until ``conn``'s transaction ends (a tick's: see the query for its commit);
        the keys locked, in the order given."""
        if not keys:
            return []
        rows = self._fetch("schedules_try_lock", {"tenants": [k[0] for k in keys],
                                                  "names": [k[1] for k in keys]},
                           tuple_row, conn)
        return [(str(r[0]), str(r[1])) for r in rows]

    def upsert_schedule(self, conn: Conn, *, name: str, queue: str, tenant: str,
                        payload: str, priority: int, cron: str | None, every_ms: int | None,
                        daily_times: Sequence[str] | None, timezone: str, horizon: int,
                        enabled: bool, config_hash: str,
                        now: datetime) -> tuple[ScheduleRow, bool]:
        """Create or replace the schedule; its row, and whether it was created."""
        [row] = self._fetch("upsert_schedule", {
            "name": name, "queue": queue, "tenant": tenant, "payload": payload,
            "priority": priority, "cron": cron, "every_ms": every_ms,
            "daily_times": daily_times, "timezone": timezone, "horizon": horizon,
            "enabled": enabled, "config_hash": config_hash, "now": now}, dict_row, conn)
        created = bool(row.pop("created"))
        return ScheduleRow(**row), created

    def schedule_by_name(self, tenant: str, name: str, *,
                         conn: Conn | None = None) -> ScheduleRow | None:
        rows = self._fetch("schedule_by_name", {"tenant": tenant, "name": name},
                           positional(ScheduleRow), conn)
        return rows[0] if rows else None

    def schedules_for_tick(self, conn: Conn, keys: Sequence[tuple[str, str]],
                           ) -> dict[tuple[str, str], tuple[ScheduleRow, bool]]:
        """The rows of the schedules ``keys`` (tenant, name), each with whether its ledger
        holds occurrences of another config (of any, when disabled); a removed schedule is
        not in the answer."""
        if not keys:
            return {}
        rows = self._fetch("schedules_for_tick", {"tenants": [k[0] for k in keys],
                                                  "names": [k[1] for k in keys]},
                           dict_row, conn)
        out: dict[tuple[str, str], tuple[ScheduleRow, bool]] = {}
        for row in rows:
            stale = bool(row.pop("stale"))
            out[(row["tenant"], row["name"])] = (ScheduleRow(**row), stale)
        return out

    def schedules_page(self, tenant: str | None, after: tuple[str, str],
                       limit: int) -> list[ScheduleRow]:
        """Schedules after ``after`` (tenant, name), of ``tenant`` or (None) of all."""
        return self._fetch("schedules_page", {"tenant": tenant, "after_tenant": after[0],
                                              "after_name": after[1], "limit": limit},
                           positional(ScheduleRow))

    def schedules_due(self, now_ms: int, after: tuple[int, str, str],
                      limit: int) -> list[ScheduleDue]:
        """The next ``limit`` schedules (and remnants of removed ones) due by ``now_ms``,
        after ``after`` (tick_at_ms, tenant, name), soonest due first."""
        return self._fetch("schedules_due", {
            "now_ms": now_ms, "after_at": after[0], "after_tenant": after[1],
            "after_name": after[2], "limit": limit}, positional(ScheduleDue))

    def schedule_has_occurrences(self, conn: Conn, tenant: str, name: str) -> bool:
        """Whether ledger rows of the (removed) schedule remain."""
        [found] = self._fetch("schedule_has_occurrences", {"tenant": tenant, "name": name},
                              scalar_row, conn)
        return bool(found)

    def keep_remnant(self, conn: Conn, tenant: str, name: str, tick_at_ms: int) -> None:
        """Record (or move) a removed schedule's remnant, due at ``tick_at_ms``."""
        self._execute("keep_remnant", {"tenant": tenant, "name": name,
                                       "tick_at_ms": tick_at_ms}, conn)

    def forget_remnant(self, conn: Conn, tenant: str, name: str) -> None:
        self._execute("forget_remnant", {"tenant": tenant, "name": name}, conn)

    def lock_tenant_schedules(self, conn: Conn, tenant: str) -> None:
        """Wait for the tenant's schedule-quota lock, held until the transaction ends."""
        self._fetch("lock_tenant_schedules", {"tenant": tenant}, scalar_row, conn)

    def count_tenant_schedules(self, tenant: str, cap: int, *,
                               conn: Conn | None = None) -> int:
        """The tenant's schedules, counted up to ``cap``."""
        [count] = self._fetch("count_tenant_schedules", {"tenant": tenant, "cap": cap},
                              scalar_row, conn)
        return int(count)

    def lock_pending_occurrences(self, conn: Conn, tenant: str, name: str,
                                 keep_hash: str | None) -> list[PendingOccurrence]:
        """Never-claimed occurrences of every config but ``keep_hash``, locked."""
        return self._fetch("lock_pending_occurrences", {
            "tenant": tenant, "name": name, "keep_hash": keep_hash},
            positional(PendingOccurrence), conn)

    def delete_occurrence_tasks(self, conn: Conn, ids: Sequence[str]) -> list[UUID]:
        """Delete the occurrences' tasks still live and never claimed; their ids."""
        return self._fetch("delete_occurrence_tasks", {"ids": ids}, scalar_row, conn)

    def prune_occurrences(self, conn: Conn, tenant: str, name: str) -> None:
        """Forget occurrences whose task is not live any more."""
        self._execute("prune_occurrences", {"tenant": tenant, "name": name}, conn)

    def insert_occurrences(self, conn: Conn, *, name: str, config_hash: str, queue: str,
                           tenant: str, priority: int, payload: str, max_attempts: int,
                           now: datetime, task_ids: Sequence[str], keys: Sequence[str],
                           fire_at_ms: Sequence[int]) -> list[UUID]:
        """Occurrences as delayed tasks with their ledger rows; the task ids created."""
        return self._fetch("insert_occurrences", {
            "name": name, "config_hash": config_hash, "queue": queue, "tenant": tenant,
            "priority": priority, "payload": payload, "max_attempts": max_attempts,
            "now": now, "task_ids": task_ids, "keys": keys, "fire_at_ms": fire_at_ms},
            scalar_row, conn)

    def mark_installed(self, conn: Conn, tenant: str, name: str, installed_hash: str | None,
                       installed_through_ms: int | None, tick_at_ms: int | None,
                       keep_hash: str | None, now_ms: int, now: datetime) -> None:
        """Record the install, and the next tick: ``tick_at_ms``, or ``now_ms`` while
        ledger rows of another config than ``keep_hash`` (None: any) remain."""
        self._execute("mark_installed", {
            "tenant": tenant, "name": name, "installed_hash": installed_hash,
            "installed_through_ms": installed_through_ms, "tick_at_ms": tick_at_ms,
            "keep_hash": keep_hash, "now_ms": now_ms, "now": now}, conn)

    def delete_schedule_row(self, conn: Conn, tenant: str, name: str) -> None:
        self._fetch("delete_schedule_row", {"tenant": tenant, "name": name}, scalar_row, conn)

    def live_occurrences(self, schedules: Sequence[ScheduleRow],
                         limits: Sequence[int]) -> list[LiveOccurrence]:
        """The soonest ``limits[i]`` live occurrences of each schedule, with their total."""
        return self._fetch("live_occurrences", {
            "tenants": [s.tenant for s in schedules], "names": [s.name for s in schedules],
            "limits": limits}, positional(LiveOccurrence))
