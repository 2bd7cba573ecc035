"""Statements of groups, ordered work per key (``sql/queries/groups.sql``, migration 0019;
``tierq.logic.groups`` runs them)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import orjson
from psycopg.rows import scalar_row, tuple_row

from tierq.dal.postgres import Statement, pipelined_transaction, uuid_array
from tierq.dal.store.base import Conn, StoreBase, checked, positional
from tierq.dal.store.rows import GroupCountRow, GroupedTaskRow, GroupReleasedRow, HeldGroupRow


def _json(names: Sequence[str]) -> str:
    """Names as a JSON array of strings (for jsonb_array_elements_text): far cheaper to
    send than a text[], which psycopg dumps element by element."""
    return orjson.dumps(list(names)).decode()


class GroupQueries(StoreBase):
    def lock_groups(self, conn: Conn, queue: str, tenants: Sequence[str],
                    grps: Sequence[str]) -> list[GroupCountRow]:
        """Lock the groups named (created when missing), in name order; each one's count
        of active tasks."""
        return self._fetch("lock_groups", {"queue": queue, "tenants": list(tenants),
                                           "grps": list(grps)}, positional(GroupCountRow),
                           conn)

    def lock_groups_quietly(self, conn: Conn, queue: str, tenants: Sequence[str],
                            grps: Sequence[str]) -> None:
        """Lock the groups named (created when missing), in name order, writing nothing
        to those found: for a release, which recounts."""
        self._execute("lock_groups_quietly", {"queue": queue, "tenants": _json(tenants),
                                              "grps": _json(grps)}, conn)

    def count_group_tasks(self, conn: Conn, queue: str, now: datetime, tenants: Sequence[str],
                          grps: Sequence[str], active: Sequence[int],
                          held: Sequence[int]) -> None:
        """Count tasks made active or held on their (locked) groups."""
        self._execute("count_group_tasks", {
            "queue": queue, "now": now, "tenants": list(tenants), "grps": list(grps),
            "active": list(active), "held": list(held)}, conn)

    def release_group_heads(self, conn: Conn, queue: str, now: datetime, max_active: int,
                            tenants: Sequence[str], grps: Sequence[str],
                            ready_states: Sequence[str]) -> list[GroupReleasedRow]:
        """Release the first held tasks of the (locked) groups up to ``max_active`` active
        each, those due into each group's ``ready_states`` entry (warm, cold, or delayed);
        the tasks released."""
        return self._fetch("release_group_heads", {
            "queue": queue, "now": now, "max": max_active, "tenants": _json(tenants),
            "grps": _json(grps), "ready_states": _json(ready_states)},
            positional(GroupReleasedRow), conn)

    def release_groups(self, queue: str, now: datetime, max_active: int,
                       slices: Sequence[tuple[Sequence[str], Sequence[str], Sequence[str]]],
                       held_gone: tuple[Sequence[str], Sequence[str], Sequence[int]] | None
                       = None) -> list[GroupReleasedRow]:
        """One transaction in one round trip: for each slice (tenants, groups, ready
        states), its groups locked (``lock_groups_quietly``) then released
        (``release_group_heads``, a statement of its own after the locks); then, if given,
        held tasks gone counted down (``held_gone``); committed. The tasks released."""
        row = positional(GroupReleasedRow)
        statements: list[Statement] = []
        for tenants, grps, states in slices:
            names = {"tenants": _json(tenants), "grps": _json(grps)}
            statements.append((self._sql["lock_groups_quietly"], {"queue": queue, **names},
                               None))
            statements.append((self._sql["release_group_heads"], {
                "queue": queue, "now": now, "max": max_active, **names,
                "ready_states": _json(states)}, row.factory))
        if held_gone is not None:
            statements.append((self._sql["held_gone"], {
                "queue": queue, "tenants": list(held_gone[0]), "grps": list(held_gone[1]),
                "counts": list(held_gone[2])}, None))
        with self.db.connection() as conn:
            cursors = pipelined_transaction(conn, statements)
        out: list[GroupReleasedRow] = []
        for cur in cursors[1:2 * len(slices):2]:
            checked(row, "release_group_heads", cur)
            out.extend(cur.fetchall())
        return out

    def release_free_groups(self, queue: str, now: datetime, max_active: int,
                            tenants: Sequence[str], grps: Sequence[str],
                            ready_states: Sequence[str], slice_size: int
                            ) -> tuple[list[GroupReleasedRow], list[tuple[str, str]]]:
        """The reaper's sweep's release, in one transaction: the groups named whose row
        another transaction holds are passed over, never waited for (``lock_free_groups``);
        the others are locked (``lock_groups_quietly``, rows created when missing) and
        released (``release_group_heads``) ``slice_size`` groups a statement, as
        ``release_groups`` does. The tasks released, and the (tenant, group) passed over."""
        def body(conn: Conn) -> tuple[list[GroupReleasedRow], list[tuple[str, str]]]:
            names = {"queue": queue, "tenants": _json(tenants), "grps": _json(grps)}
            locked = set(self._fetch("lock_free_groups", names, tuple_row, conn))
            held = sorted(g for g in self._fetch("groups_found", names, tuple_row, conn)
                          if g not in locked)
            skip = set(held)
            kept = [i for i, g in enumerate(zip(tenants, grps, strict=True)) if g not in skip]
            out: list[GroupReleasedRow] = []
            for start in range(0, len(kept), slice_size):
                part = kept[start:start + slice_size]
                sliced = {"queue": queue, "tenants": _json([tenants[i] for i in part]),
                          "grps": _json([grps[i] for i in part])}
                self._execute("lock_groups_quietly", sliced, conn)
                # (a statement of its own: it sees every task committed before the locks)
                out.extend(self._fetch("release_group_heads", {
                    **sliced, "now": now, "max": max_active,
                    "ready_states": _json([ready_states[i] for i in part])},
                    positional(GroupReleasedRow), conn))
            return out, held

        return self.db.run_transaction(body, what="a release of stalled groups")

    def held_gone(self, conn: Conn, queue: str, tenants: Sequence[str], grps: Sequence[str],
                  counts: Sequence[int]) -> None:
        """Held tasks that went without running: their (locked) groups count them down."""
        self._execute("held_gone", {"queue": queue, "tenants": list(tenants),
                                    "grps": list(grps), "counts": list(counts)}, conn)

    def groups_of_tasks(self, queue: str, ids: Sequence[str],
                        tenants: Sequence[str]) -> list[GroupedTaskRow]:
        """The groups of the stored tasks given (of ``queue``, each of the tenant given
        with it) that have one."""
        return self._fetch("groups_of_tasks", {"queue": queue, "ids": uuid_array(ids),
                                               "tenants": list(tenants)},
                           positional(GroupedTaskRow))

    def grouped_of_ids(self, conn: Conn, ids: Sequence[str]) -> list[GroupedTaskRow]:
        """Which of the tasks given have a group, in ``conn``'s transaction."""
        return self._fetch("grouped_of_ids", {"ids": uuid_array(ids)},
                           positional(GroupedTaskRow), conn)

    def replay_into_groups(self, conn: Conn, held_ids: Sequence[str]) -> list[str]:
        """Replayed tasks that join their group's back held, in the order given."""
        return self._fetch("replay_into_groups", {"held_ids": uuid_array(held_ids)},
                           scalar_row, conn)

    def walk_held_groups(self, after: tuple[str, str, str], limit: int) -> list[HeldGroupRow]:
        """Groups with held tasks after ``after`` (queue, tenant, group), at most
        ``limit``, each flagged when nothing of it is active."""
        return self._fetch("walk_held_groups", {
            "after_queue": after[0], "after_tenant": after[1], "after_grp": after[2],
            "limit": limit}, positional(HeldGroupRow))

    def forget_queue_groups(self, queue: str) -> int:
        """A purged queue's groups go; how many."""
        return self._execute("forget_queue_groups", {"queue": queue})
