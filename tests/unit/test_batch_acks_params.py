"""The parameters a plain ack of batch members sends (``_grouped_acks``, migration 0033):
runs of at least ``GROUP_MIN`` members of one batch, tenant and attempt as groups, shorter
runs alone, other tasks as rows, and each member's number in the answer."""

from __future__ import annotations

import struct

from tierq.core.batch_ids import batch_ids, batch_of
from tierq.core.ids import uuid7_strings
from tierq.dal.store.batches import GROUP_MIN, _grouped_acks


def test_long_runs_are_groups_short_ones_alone_and_unmarked_ids_rows() -> None:
    first = batch_ids(GROUP_MIN + 2)
    second = batch_ids(3)
    [row] = uuid7_strings(1)
    # a's run in the first batch row is long (places given out of order), b's is short;
    # the second batch row's run of a is short; a repeat is dropped
    a_run = first[:GROUP_MIN][::-1]
    ids = [*a_run, first[GROUP_MIN], row, *second, first[0]]
    tenants = ["a"] * GROUP_MIN + ["b", "a", "a", "a", "a", "a"]
    attempts = [1] * GROUP_MIN + [2, 3, 1, 1, 1, 1]
    params, numbered = _grouped_acks(ids, tenants, attempts)
    assert params["batches"] == "{" + ",".join([first[0], second[0]]) + "}"
    assert params["tenants"] == '{"a","b"}'
    assert params["groups"] == struct.pack(">HHi", 0, 0, 1)
    assert params["places"] == '{"{' + ",".join(map(str, range(GROUP_MIN))) + '}"}'
    alone = [struct.unpack(">HHHi", params["members"][i:i + 10])
             for i in range(0, len(params["members"]), 10)]
    assert alone == [(0, GROUP_MIN, 1, 2), (1, 0, 0, 1), (1, 1, 0, 1), (1, 2, 0, 1)]
    assert params["row_ids"] == "{" + row + "}"
    assert params["rows"] == struct.pack(">Hi", 0, 3)
    # (alone: their index; a group's place: -(group * 4096 + place) - 1)
    expected = {n: m for n, m in enumerate([first[GROUP_MIN], *second])}
    expected.update({-(0 * 4096 + batch_of(m)[1]) - 1: m for m in a_run})  # type: ignore[index]
    assert numbered == expected


def test_a_second_group_is_numbered_past_every_place_of_the_first() -> None:
    one, two = batch_ids(GROUP_MIN), batch_ids(GROUP_MIN)
    _, numbered = _grouped_acks(one + two, ["t"] * 2 * GROUP_MIN, [1] * 2 * GROUP_MIN)
    assert sorted(numbered) == sorted([-p - 1 for p in range(GROUP_MIN)]
                                      + [-(4096 + p) - 1 for p in range(GROUP_MIN)])
