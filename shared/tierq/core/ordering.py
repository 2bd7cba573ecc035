"""The order of a ready line — priority first (9 before 0), then enqueue order (``seq``) —
and the one place where a task's entry in the warm tier's ready set is built (``place``)
or read (``task_of``, ``unpack``; the scripts' twin is ``dal/lua/ready_member.lua``).

A sorted set orders by a score, a double (exact to 2^53), then members of equal score by
their bytes. ``seq`` is a bigint from ``tierq_task_seq`` (steps of 512, values up to
``SEQ_MAX``), too large to share a score with the priority, so from 2^49 on the member
carries it:

| seq | score | member |
| --- | --- | --- |
| below 2^49 (``SPLIT``) | ``(9 - priority) * 2^49 + seq`` | the task id |
| 2^49 and later | ``(10 - priority) * 2^49`` | ``<seq: 16 lowercase hex digits>|<id>`` |

A priority's short-form scores lie strictly between ``(9 - priority) * 2^49`` and
``(10 - priority) * 2^49`` (seq is at least 1), so its long-form entries come after all of
them and before the next lower priority, and among themselves in seq order (fixed-width
hex). Every score is an integer below 10 * 2^49 < 2^53, exact in a double and in Lua. A warm
tier that holds short-form entries only, as one written before the long form existed,
keeps its order with nothing converted (docs/architecture.md §2).
"""

from __future__ import annotations

from typing import NamedTuple

PRIORITY_MIN = 0
PRIORITY_MAX = 9
SPLIT_BITS = 49
SPLIT = 1 << SPLIT_BITS
SEQ_MIN = 1  # tierq_task_seq's MINVALUE
# tierq_task_seq's MAXVALUE (migration 0015): every block of 512 places a value opens, and
# the bound ``first + 512`` the feeder compares with, fit in a bigint
SEQ_MAX = (1 << 63) - 1024
SEQ_STEP = 512  # tierq_task_seq's INCREMENT (migration 0004)
_HEX_DIGITS = 16
_SEP_AT = _HEX_DIGITS  # the index of the '|' of a long form member


class Place(NamedTuple):
    """A task's place in its ready set: ``ZADD key score member``. Tuples compare as the
    sorted set orders them (score, then the member's bytes: members are ASCII)."""

    score: int
    member: str


def place(priority: int, seq: int, task_id: str) -> Place:
    """The ready-set place of a task; ValueError for a priority or seq that no row can
    hold (every value tierq_task_seq hands out has a place)."""
    if PRIORITY_MIN <= priority <= PRIORITY_MAX and SEQ_MIN <= seq < SPLIT:
        # the short form, as most places are (one per task enqueued: built without the
        # named tuple's own constructor)
        return _new_place(Place, ((PRIORITY_MAX - priority) * SPLIT + seq, task_id))
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(f"priority must be {PRIORITY_MIN}..{PRIORITY_MAX}, got {priority}")
    if not SEQ_MIN <= seq <= SEQ_MAX + SEQ_STEP - 1:
        raise ValueError(f"seq must be {SEQ_MIN}..{SEQ_MAX + SEQ_STEP - 1}, got {seq}")
    if seq < SPLIT:
        return Place((PRIORITY_MAX - priority) * SPLIT + seq, task_id)
    return Place((PRIORITY_MAX + 1 - priority) * SPLIT, f"{seq:016x}|{task_id}")


_new_place = tuple.__new__


def task_of(member: str) -> str:
    """The task id of a ready-set member (either form)."""
    if len(member) > _SEP_AT and member[_SEP_AT] == "|":
        return member[_SEP_AT + 1:]
    return member


def unpack(score: float | int, member: str) -> tuple[int, int, str]:
    """(priority, seq, id) of a ready-set entry: what ``place`` was given."""
    value = int(score)
    if len(member) > _SEP_AT and member[_SEP_AT] == "|":
        return PRIORITY_MAX + 1 - value // SPLIT, int(member[:_SEP_AT], 16), member[_SEP_AT + 1:]
    bucket, seq = divmod(value, SPLIT)
    return PRIORITY_MAX - bucket, seq, member

