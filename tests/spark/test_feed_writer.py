"""The partition writer's COPY text: ids in order, places in line from the reserved seqs,
states from run_at, escaping done upstream passed through untouched."""

from __future__ import annotations

import itertools
import uuid

import pytest
from tierq_feeder.writer import FIELD, copy_lines, parse_record

from tierq.core.ids import uuid7, uuid7_strings

pytestmark = pytest.mark.spark


def test_copy_lines() -> None:
    now_us = 1_700_000_000_000_000
    rows = [
        (10, "_", None, "_\tk1\t3\t{\"a\":1}"),
        (12, "acme", now_us + 60_000_000, "acme\tk\\\\2\t0\t{\"b\":\"x\\\\\\\\y\"}"),
        (11, "beta", now_us - 1, "beta\tk3\t9\t{}"),
    ]
    text, ready, tenants = copy_lines(rows, [100, 105, 107], 10, now_us)
    lines = [line.split("\t") for line in text.splitlines()]
    assert [line[1:] for line in lines] == [
        ["100", "_", "k1", "3", '{"a":1}', "cold", "\\N"],
        ["107", "acme", "k\\\\2", "0", '{"b":"x\\\\\\\\y"}', "delayed",
         "2023-11-14T22:14:20+00:00"],
        ["105", "beta", "k3", "9", "{}", "cold", "2023-11-14T22:13:19.999999+00:00"],
    ]
    ids = [uuid.UUID(line[0]) for line in lines]
    assert ids == sorted(ids) and all(i.version == 7 for i in ids)
    assert (ready, tenants) == ({"_", "beta"}, {"_", "acme", "beta"})


def test_uuid7_strings_continue_the_process_order() -> None:
    before = uuid7()
    batch = [uuid.UUID(s) for s in uuid7_strings(5000)]
    after = uuid7()
    every = [before, *batch, after]
    assert all(a < b for a, b in itertools.pairwise(every))
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in batch)
    assert uuid7_strings(0) == []


def test_records_carry_rank_tenant_run_at_and_text() -> None:
    text = "acme\tk\t3\t{\"note\":\"a\\u001fb\"}"
    assert parse_record(FIELD.join(["42", "acme", "", text])) == (42, "acme", None, text)
    assert parse_record(FIELD.join(["7", "_", "1700000000000000", "x"])) == (
        7, "_", 1_700_000_000_000_000, "x")
