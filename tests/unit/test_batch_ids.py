"""Batch members' ids (tierq.core.batch_ids): each names its batch's key and its place, the
batch's ids sort in place order and after the process's earlier ids, a shard's tag stays
in its last digits, and no other id tierq makes carries the mark."""

from __future__ import annotations

import uuid

import pytest

from tierq.core.batch_ids import (
    MAX_PLACES,
    MEMBERS_SINCE_MS,
    batch_ids,
    batch_member,
    batch_of,
)
from tierq.core.ids import uuid7, uuid7_strings
from tierq.dal.shards import tag_of
from tierq.logic.bulk import load_id, new_id_tail


def test_a_members_id_names_its_batch_and_its_place() -> None:
    ids = batch_ids(MAX_PLACES)
    key = ids[0]
    assert len(set(ids)) == MAX_PLACES
    for place, task_id in enumerate(ids):
        parsed = uuid.UUID(task_id)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert batch_member(task_id) and batch_member(parsed)
        assert batch_of(task_id) == (key, place)
        assert batch_of(parsed) == (key, place)
    assert ids == sorted(ids)


def test_later_batches_sort_after_earlier_ids_of_the_process() -> None:
    before = uuid7_strings(3)
    first, second = batch_ids(10), batch_ids(10)
    after = uuid7_strings(3)
    assert before + first + second + after == sorted(before + first + second + after)
    assert batch_of(first[0]) != batch_of(second[0])


def test_a_shards_tag_stays_in_the_last_digits() -> None:
    ids = batch_ids(40, tag=0xBEEF)
    assert {tag_of(i) for i in ids} == {0xBEEF}
    assert [batch_of(i) for i in ids] == [(ids[0], n) for n in range(40)]


@pytest.mark.parametrize("n", [0, -1, MAX_PLACES + 1])
def test_a_batch_row_holds_one_to_max_places_tasks(n: int) -> None:
    with pytest.raises(ValueError, match=f"1 to {MAX_PLACES} tasks, got {n}"):
        batch_ids(n)


def test_no_other_id_carries_the_mark() -> None:
    others = [str(uuid7()) for _ in range(2000)] + uuid7_strings(5000)
    others += [str(uuid.UUID(load_id(1_700_000_000_000, n, new_id_tail())))
               for n in range(2000)]
    assert not any(batch_member(i) for i in others)
    assert {batch_of(i) for i in others} == {None}


def test_an_id_older_than_batch_rows_is_never_a_member() -> None:
    """Half the ids made before the mark existed carry it by chance: older than
    MEMBERS_SINCE_MS, none is taken for a member, so their acks cost what they did."""
    [new] = batch_ids(1)

    def at(ms: int) -> str:  # (the id of a member made at ``ms``)
        digits = f"{ms:012x}"
        return f"{digits[:8]}-{digits[8:]}{new[13:]}"

    assert (batch_member(at(MEMBERS_SINCE_MS - 1)), batch_of(at(MEMBERS_SINCE_MS - 1))) \
        == (False, None)
    assert batch_of(at(MEMBERS_SINCE_MS)) == (at(MEMBERS_SINCE_MS), 0)
    assert batch_of(new) == (new, 0)
