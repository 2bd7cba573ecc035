"""batch_unpack: every member still in a batch row moved out into a row of ``tierq_tasks``,
so that code which serves no batch row (0.1.0) can run on the database (README.md,
*Upgrading*; ``tierq unpack-batches``).

A downgrade cannot wait for the reaper to empty ``tierq_batches``: a member nobody claims
stays in its batch row for as long as it waits. This moves each one out as a nack, an
expiry or a release does (``move_out_of_batches``): the same id, seq, payload and attempts,
warm since its batch was made, so Valkey's copy of it and any lease on it stay valid, and
the task's ack then deletes its row.

| what it finds                                  | becomes                                   |
| ---------------------------------------------- | ----------------------------------------- |
| a member without an end (waiting or leased)    | a row of ``tierq_tasks``, its place moved |
| a member acked or moved before                 | left as it is                             |
| a batch row whose every member has an end      | deleted with its ends by the sweep, here  |
|                                                | and by the reaper's passes                |
| a member an ack ends while this runs           | ended by the ack, not moved (each batch's |
|                                                | advisory lock orders the two)             |
| batch rows still being written (the setting on | moved too; left ones counted in ``left``: |
| somewhere)                                     | the command fails and says so             |
| a batch row a purge holds past the sweep's     | left for the reaper's sweep (this         |
| lock timeout, or a sweep statement past its    | version's; 0.1.0's never sweeps them, and |
| timeout                                        | such leftovers, all ended, are harmless)  |

One pass reads ``slice`` batch rows at a time in key order and moves their members in one
transaction; it makes up to ``passes`` passes and stops after one that found nothing to
move. Each statement runs under the pool's statement and lock timeouts; the whole command
is bounded by ``passes`` times the table's size, not by a time budget: an operator runs it
once, and it shows progress as it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
from pydantic import Field

from tierq.core.batch_ids import member_id
from tierq.dal.store.batches import FIRST_KEY
from tierq.dal.task_store import TaskStore
from tierq.errors import DatabaseTimedOut
from tierq.models.base import Model

# Batch rows a statement of the sweep looks at (its deletes are cheap: ended rows only).
SWEEP_SLICE = 500


class UnpackConfig(Model):
    """How much one transaction moves, and how many passes the command makes at most."""

    slice: int = Field(default=20, ge=1, le=1000)  # batch rows read and moved at a time
    passes: int = Field(default=3, ge=1, le=100)  # over every batch row, at most


@dataclass
class UnpackSummary:
    """What the command did, and what it left."""

    moved: int = 0  # members moved out into rows
    passes: int = 0  # passes made over the batch rows
    batch_rows_seen: int = 0  # batch rows read, over every pass
    swept: int = 0  # batch rows deleted, every member ended
    left: int = 0  # members still without an end after the last pass
    batch_rows_left: int = 0  # batch rows still there (left for the reaper's sweep)
    table: bool = True  # False: the schema has no tierq_batches (before migration 0030)


def run(store: TaskStore, config: UnpackConfig | None = None,
        say: Callable[[str], None] = lambda _: None) -> UnpackSummary:
    """Move every member without an end out into a row and sweep the ended batch rows
    (the module's table); ``say`` is given a line of progress per slice and per pass."""
    config = config or UnpackConfig()
    summary = UnpackSummary()
    try:
        for _ in range(config.passes):
            summary.passes += 1
            found = _one_pass(store, config, summary, say)
            summary.swept += _sweep(store)
            say(f"pass {summary.passes}: {found:,} member(s) without an end found, "
                f"{summary.moved:,} moved so far, {summary.swept:,} batch row(s) swept")
            if found == 0:
                break
        summary.left, summary.batch_rows_left = _left(store, config)
    except psycopg.errors.UndefinedTable:
        summary.table = False
    return summary


def _slices(store: TaskStore, size: int) -> Iterator[list[tuple[str, list[int]]]]:
    """The batch rows in key order, ``size`` at a time, each with its places without an
    end (``unended_batch_members``)."""
    after = FIRST_KEY
    while rows := store.unended_batch_members(after, size):
        yield rows
        after = rows[-1][0]


def _one_pass(store: TaskStore, config: UnpackConfig, summary: UnpackSummary,
              say: Callable[[str], None]) -> int:
    """One walk over the batch rows in key order, each slice's members moved in one
    transaction; the members without an end it found."""
    found = 0
    for rows in _slices(store, config.slice):
        summary.batch_rows_seen += len(rows)
        ids = [member_id(key, place) for key, places in rows for place in places]
        if ids:
            found += len(ids)
            moved = store.move_out_of_batches(None, ids, None)
            summary.moved += len(moved)
            say(f"  moved {len(moved):,} of {len(ids):,} member(s) of {len(rows)} batch "
                f"row(s) up to {rows[-1][0]}")
    return found


def _sweep(store: TaskStore) -> int:
    """One round of the batch sweep over every key; the batch rows it deleted. One an ack
    or a move holds, and the rest of the round once a statement times out (a purge holding
    a row past the sweep's lock timeout, or the statement timeout), are left for the
    reaper's passes."""
    after = FIRST_KEY
    swept = 0
    while True:
        try:
            last, gone = store.sweep_batches(after, SWEEP_SLICE)
        except DatabaseTimedOut:
            return swept
        swept += gone.batches
        if last is None:
            return swept
        after = last


def _left(store: TaskStore, config: UnpackConfig) -> tuple[int, int]:
    """(Members without an end, batch rows) still there: one read over every key."""
    members = batch_rows = 0
    for rows in _slices(store, config.slice):
        batch_rows += len(rows)
        members += sum(len(places) for _, places in rows)
    return members, batch_rows
