"""What an enqueue tells the admission it will push (logic/enqueue.py ``_sizes``): each ready
task's blob at its actual bytes, whatever fields it carries (a key, a group, a time limit, a
trace), so a pair that cannot take the batch turns cold before the insert rather than after."""

from __future__ import annotations

import uuid

import orjson

from tierq.logic.admission import task_blob
from tierq.logic.enqueue import SEQ_BOUND, Prepared, _sizes

CREATED_MS = 1_795_883_663_545
TRACE = orjson.dumps({"traceparent": f"00-{'a' * 32}-{'b' * 16}-01",
                      "tracestate": 'vendor=x\\"y'})


def task(i: int, payload: object, *, tenant: str = "acme", key: str | None = None,
         priority: int = 0, max_attempts: int = 5, group: str | None = None,
         timeout_seconds: int | None = None, trace: bytes | None = None,
         after: list[str] | None = None) -> Prepared:
    p = Prepared(i, str(uuid.uuid4()), tenant, key, priority, orjson.dumps(payload), False,
                 0.0, max_attempts, "ignore", not after)
    p.group, p.timeout_seconds, p.trace = group, timeout_seconds, trace
    p.after = after or []
    return p


def blob_bytes(p: Prepared, seq: int = SEQ_BOUND) -> int:
    """The blob ``_warm_items`` makes of the task, once inserted with ``seq``."""
    return len(task_blob(0, p.payload_json, p.key, p.priority, p.max_attempts, CREATED_MS,
                         group=p.group, seq=seq if p.group is not None else None,
                         timeout_seconds=p.timeout_seconds, trace_json=p.trace))


def sized(p: Prepared) -> int:
    """What ``_sizes`` counts for the task alone."""
    return _sizes("q", [p], CREATED_MS)[("q", p.tenant)][2]


def test_each_ready_tasks_size_is_its_blobs_bytes_never_under() -> None:
    batch = [
        task(0, {"plain": 1}),
        task(1, {"q": '"' * 95, "b": "\\" * 7}, key='k"é', priority=-7, max_attempts=12),
        task(2, "grouped", group='g"1', timeout_seconds=604_800, trace=TRACE),
        task(3, {"traced": True}, trace=TRACE, timeout_seconds=2),
        task(4, "waits", after=[str(uuid.uuid4())]),  # not ready: its parents first
        task(5, ["other", "tenant"], tenant="globex", group="g", trace=TRACE),
        task(6, '"' * 990, key="k2", timeout_seconds=30),  # its escapes gain two digits
    ]
    for p in batch:
        if p.ready:
            # at most the digits of the count of escapes over (taken at its widest)
            assert blob_bytes(p) <= sized(p) <= blob_bytes(p) + 3, p.index
    assert sized(batch[6]) == blob_bytes(batch[6])  # (its payload is all escapes)
    sizes = _sizes("q", batch, CREATED_MS)
    acme = [p for p in batch if p.tenant == "acme" and p.ready]
    assert sizes[("q", "acme")] == (sized(acme[0]), len(acme), sum(sized(p) for p in acme))
    assert sizes[("q", "globex")] == (sized(batch[5]), 1, sized(batch[5]))
    # a group's seq, unknown before the insert, is sized at its widest: never under
    assert blob_bytes(batch[2], seq=12) < blob_bytes(batch[2])


def test_a_batch_without_ready_tasks_pushes_nothing() -> None:
    assert _sizes("q", [task(0, 1, after=[str(uuid.uuid4())])], CREATED_MS) == {}
