"""The enqueue's shortcuts (logic/enqueue.py, logic/admission.py, core/ordering.py,
core/ids.py) give what the general code gives: the same blobs, places, ids and names in
errors, made with less work per task."""

from __future__ import annotations

import re
import uuid

import orjson
import pytest

from tierq.core import ids as ids_module
from tierq.core.ids import uuid7_strings
from tierq.core.ordering import PRIORITY_MAX, SEQ_MAX, SEQ_STEP, SPLIT, Place, place, unpack
from tierq.logic.admission import plain_blob, task_blob
from tierq.logic.enqueue import Prepared, _sizes, _warm_items

CREATED_MS = 1_795_883_663_545
PAYLOADS = [{"i": 1}, None, 0, "x", [], {"q": '"' * 95, "b": "\\" * 7}, "é ✓ \u007f",
            '"' * 990, {"nested": [1.5, None, "\\"]}]
UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize(("priority", "max_attempts"), [(0, 1), (9, 1000), (4, 25)])
def test_a_plain_blob_is_the_general_blob(payload, priority, max_attempts):
    payload_json = orjson.dumps(payload)
    assert plain_blob(payload_json, priority, max_attempts, CREATED_MS) == task_blob(
        0, payload_json, None, priority, max_attempts, CREATED_MS)


@pytest.mark.parametrize("priority", range(PRIORITY_MAX + 1))
@pytest.mark.parametrize("seq", [1, 512, SPLIT - 1, SPLIT, SEQ_MAX + SEQ_STEP - 1])
def test_a_place_is_a_place_of_either_form(priority, seq):
    at = place(priority, seq, "some-id")
    assert type(at) is Place
    assert unpack(at.score, at.member) == (priority, seq, "some-id")
    if seq < SPLIT:
        assert at == Place((PRIORITY_MAX - priority) * SPLIT + seq, "some-id")
    else:
        assert at == Place((PRIORITY_MAX + 1 - priority) * SPLIT, f"{seq:016x}|some-id")


@pytest.mark.parametrize(("priority", "seq", "message"), [
    (-1, 5, "priority must be"), (10, 5, "priority must be"), (True + 9, 5, "priority"),
    (0, 0, "seq must be"), (0, SEQ_MAX + SEQ_STEP, "seq must be"), (11, 0, "priority"),
])
def test_a_place_no_row_can_hold_is_refused(priority, seq, message):
    with pytest.raises(ValueError, match=message):
        place(priority, seq, "some-id")


def test_uuid7_strings_are_version_7_in_order_across_milliseconds():
    ids = uuid7_strings(9000)  # (the counter carries into two more milliseconds)
    ids += uuid7_strings(3)
    assert all(UUID7.match(i) for i in ids)
    parsed = [uuid.UUID(i) for i in ids]
    assert [str(u) for u in parsed] == ids
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in parsed)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert len({i[:13] for i in ids}) >= 3  # (the milliseconds, as uuid7 writes them)
    assert uuid7_strings(0) == []


def test_the_counters_hex_digits_are_the_formatted_ones():
    formatted = [f"{c:03x}" for c in range(0x1000)]
    table = ids_module._COUNTER_HEX
    assert table == formatted


def task(i: int, payload: object, *, tenant: str = "acme", key: str | None = None,
         group: str | None = None, timeout_seconds: int | None = None,
         trace: bytes | None = None) -> Prepared:
    p = Prepared(i, str(uuid.uuid4()), tenant, key, i % 10, orjson.dumps(payload), False,
                 0.0, 3, "ignore", True)
    p.group, p.timeout_seconds, p.trace = group, timeout_seconds, trace
    return p


def test_the_blobs_sizes_makes_are_those_warm_items_would_make():
    trace = orjson.dumps({"traceparent": f"00-{'a' * 32}-{'b' * 16}-01"})
    batch = [task(0, {"i": 0}), task(1, '"q"', key='k"1'), task(2, 2, timeout_seconds=30),
             task(3, [3], trace=trace), task(4, {"g": 4}, group="g"),
             task(5, "other", tenant="globex"), task(6, {"i": 6})]
    fresh = [task(p.index, orjson.loads(p.payload_json), tenant=p.tenant, key=p.key,
                  group=p.group, timeout_seconds=p.timeout_seconds, trace=p.trace)
             for p in batch]
    for p, q in zip(batch, fresh, strict=True):
        q.id = p.id
        p.state = q.state = "warm"
    seqs = {p.id: 1000 + 512 * p.index for p in batch}
    sizes = _sizes("q", batch, CREATED_MS)
    assert [p.blob is not None for p in batch] == [p.group is None for p in batch]
    made = _warm_items("q", batch, seqs, CREATED_MS)  # (the blobs _sizes made)
    assert made == _warm_items("q", fresh, seqs, CREATED_MS)  # (every blob made here)
    assert list(made) == [("q", "acme"), ("q", "globex")]
    for pair, items in made.items():
        first, count, total = sizes[pair]
        assert count == len(items)
        assert first >= len(items[0][2])
        assert total >= sum(len(blob) for _, _, blob in items)
    acme = made[("q", "acme")]
    # without a group, a task is sized at its blob's exact bytes
    plain = [p for p in batch if p.tenant == "acme" and p.group is None]
    blobs = [len(blob) for task_id, _, blob in acme if task_id in {p.id for p in plain}]
    assert _sizes("q", plain, CREATED_MS)[("q", "acme")] == (blobs[0], len(blobs), sum(blobs))
    for p in batch:
        if p.tenant == "acme":
            _, at, blob = acme[[a[0] for a in acme].index(p.id)]
            assert at == place(p.priority, seqs[p.id], p.id)
            assert blob == task_blob(0, p.payload_json, p.key, p.priority, p.max_attempts,
                                     CREATED_MS, group=p.group,
                                     seq=seqs[p.id] if p.group else None,
                                     timeout_seconds=p.timeout_seconds, trace_json=p.trace)


def test_a_tasks_name_in_errors():
    p = task(3, 1)
    assert p.where == "tasks[3]"
    p.label = "task"
    assert p.where == "task"
    p.label = "tasks[7]"
    assert p.where == "tasks[7]"
