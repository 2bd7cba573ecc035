"""Ids of the tasks kept in a batch row, which name their batch and their place in it.

A batch row (``tierq_batches``, migration 0030) holds the tasks of one enqueued batch in
one row of PostgreSQL (docs/design-rotating-tables.md, *Design D*). A member's id finds
its row with no look-up: it is the batch's key with the member's place written in three
hex digits. The layout keeps what every task id keeps (``tierq.core.ids``): a UUIDv7
whose milliseconds and counter order one process's ids, and whose last four hex digits
are a shard's tag where a sharded deployment replaces them (``tierq.dal.shards``).

=========================================  ===============================================
hex digits of ``tttttttt-tttt-7ccc-vrrr-rrrrrPPPgggg``  what they hold
=========================================  ===============================================
``t`` (12), ``7``, ``ccc``                 the batch's milliseconds, version, counter
``v``                                      the variant (``10``), then ``BATCH_MARK``, set
                                           for a member and clear in every other id
                                           ``tierq.core.ids`` makes, then a random bit
``r`` (8)                                  random bits shared by the batch
``PPP``                                    the member's place, from 0
``gggg``                                   random bits of the batch, or the shard's tag
=========================================  ===============================================

The batch's key is a member's id with its place zeroed. The mark is a hint, not a proof:
ids made before the mark existed carry it by chance, so a reader that finds no batch row
for an id marked as a member reads ``tierq_tasks`` as it would for any other id; and an
id older than ``MEMBERS_SINCE_MS`` is never taken for a member at all.
"""

from __future__ import annotations

import os

from tierq.core.ids import uuid7_strings

# The bit of the variant's hex digit (text position 19) that marks a member: 0x2 of the
# digit, whose top two bits are the variant's 0b10.
BATCH_MARK = 0x2
# No member's id is older than this (2026-12-01T00:00:00Z, before any code wrote batch
# rows), where half the ids made before it carry the mark by chance: those read as rows,
# so a queue upgraded with tasks in it pays nothing for batch rows it never had.
MEMBERS_SINCE_MS = 1_796_083_200_000
# Where the place sits in an id's text, and how many places a batch row can have: a batch's
# seqs are its first seq plus each place, within one block of tierq_task_seq (it steps by
# 512, migration 0004), as an enqueued batch's are.
PLACE_AT = slice(29, 32)
MAX_PLACES = 512


def batch_member(task_id: object) -> bool:
    """Whether ``task_id`` (a ``UUID`` or its canonical text, as tierq's models give it)
    may name a batch member: it carries the mark and is not older than
    ``MEMBERS_SINCE_MS``."""
    text = str(task_id)
    return int(text[19], 16) & BATCH_MARK != 0 \
        and int(text[:8] + text[9:13], 16) >= MEMBERS_SINCE_MS


def batch_of(task_id: object) -> tuple[str, int] | None:
    """(The batch row's key, the member's place) of an id that may name a member
    (``batch_member``); None for any other."""
    text = str(task_id)
    if not batch_member(text):
        return None
    return f"{text[:29]}000{text[32:]}", int(text[PLACE_AT], 16)


def batch_ids(n: int, now_ms: int | None = None, tag: int | None = None) -> list[str]:
    """The ids of a batch row's ``n`` members, in place order; the first is also its key.

    The batch takes one UUIDv7 of this process (``uuid7_strings``), so later batches'
    ids sort after these; ``tag``, when given, is the shard's (its last four digits).

    | ``n``                   | result                                 |
    | ----------------------- | -------------------------------------- |
    | 1 to ``MAX_PLACES``     | ``n`` ids, places 0 to ``n - 1``       |
    | below 1 or above it     | ``ValueError``                         |
    """
    if not 1 <= n <= MAX_PLACES:
        raise ValueError(f"a batch row holds 1 to {MAX_PLACES} tasks, got {n}")
    [base] = uuid7_strings(1, now_ms)
    variant = 0x8 | BATCH_MARK | (os.urandom(1)[0] & 0x1)
    tail = f"{tag:04x}" if tag is not None else base[32:]
    head = f"{base[:19]}{variant:x}{base[20:29]}"
    return [f"{head}{place:03x}{tail}" for place in range(n)]


def member_id(key: str, place: int) -> str:
    """The id of the member at ``place`` of the batch row keyed ``key``."""
    return f"{key[:29]}{place:03x}{key[32:]}"
