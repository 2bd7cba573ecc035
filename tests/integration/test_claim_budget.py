"""How claim.lua charges a task against a claim's byte budget: its JSON text, one more byte
per quote and backslash (counted when the blob is built: its "e"; counted by the script for
a blob written without it), and a bound on the response's fields around it."""

from __future__ import annotations

import orjson
import redis

from tierq.core.ordering import place
from tierq.core.sizing import body_cost
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.logic.claim_budget import TASK_FIELDS_COST

ODD = ['quote " and \\ backslash', "non-ascii é ✓ \U0001F600", "del\u007f and / \n\t\x01", ""]


def blobs(valkey: redis.Redis, queue: str, tenant: str = "_") -> dict[str, bytes]:
    data = valkey.hgetall(PairKeys.of(queue, tenant).data)
    return {k.decode(): v for k, v in data.items() if not k.startswith(b"~")}


def test_each_blob_carries_the_count_of_its_quotes_and_backslashes(tq: Tierq, valkey):
    tq.enqueue("q", [{"payload": {"text": ODD[i % 4], 'k"\\': [ODD[(i + 1) % 4]]},
                      "key": f"{ODD[i % 2]}-{i}" if i % 3 else None} for i in range(12)])
    found = blobs(valkey, "q")
    assert len(found) == 12
    for blob in found.values():
        json_text = blob.partition(b"|")[2]
        escapes = orjson.loads(json_text)["e"]
        assert escapes == json_text.count(b'"') + json_text.count(b"\\"), blob
        assert body_cost(json_text) == len(json_text) + escapes


def test_a_task_is_charged_its_escapes_and_its_fields(tq: Tierq, valkey):
    quotes = '"' * 100_000  # 200,002 bytes of JSON, 400,004 in the response
    tq.enqueue("q", [{"payload": quotes} for _ in range(3)])
    [cost] = {body_cost(blob.partition(b"|")[2]) + TASK_FIELDS_COST
              for blob in blobs(valkey, "q").values()}
    assert cost > 400_004 + TASK_FIELDS_COST
    assert len(tq.claim("q", max=3, max_bytes=2 * cost - 1)) == 1  # stored bytes: ~400 kB
    assert len(tq.claim("q", max=3, max_bytes=2 * cost)) == 2


def test_a_blob_without_its_count_is_counted_by_the_script(tq: Tierq, valkey):
    """A warm tier written by a tierq that did not store the count: the script counts."""
    tq.enqueue("q", [{"payload": 0}])  # creates the pair (mode warm)
    assert len(tq.claim("q")) == 1
    quotes = orjson.dumps('"' * 100_000)
    old_blob = b'0|{"p":%b,"k":null,"pr":0,"m":5,"c":1700000000000}' % quotes
    ids = [f"01000000-0000-7000-8000-00000000000{i}" for i in range(3)]
    tq.warm.push("q", "_", warm_max=100, warm_max_bytes=10**9, kind="restore", now_ms=0,
                 since_ms=0,
                 token="t", items=[(task_id, place(0, i + 1, task_id), old_blob)
                                   for i, task_id in enumerate(ids)])
    cost = body_cost(old_blob.partition(b"|")[2]) + TASK_FIELDS_COST
    claimed = tq.ctx.warm.claim("q", "_", n=3, now_ms=1, lease_ms=60_000, token_prefix="_~x~",
                                worker="", max_bytes=2 * cost - 1,
                                per_task_bytes=TASK_FIELDS_COST)[2]
    assert [c[0].decode() for c in claimed] == ids[:1]  # a second would not fit
    claimed = tq.ctx.warm.claim("q", "_", n=3, now_ms=1, lease_ms=60_000, token_prefix="_~y~",
                                worker="", max_bytes=2 * cost, per_task_bytes=TASK_FIELDS_COST)[2]
    assert [c[0].decode() for c in claimed] == ids[1:3]


def test_a_traced_task_is_answered_within_its_charge(tq: Tierq, valkey):
    """The trace context is in the blob as the answer carries it ("tr", answered as
    "trace"): what the answer weighs stays within the blob and TASK_FIELDS_COST, escapes
    and all; a task without one answers no trace."""
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traces = [None, {"traceparent": parent},
              {"traceparent": parent, "tracestate": 'q="\\' * 128,
               "aws_trace_header": '\\"' * 128}]
    tq.enqueue("q", [{"payload": ODD[i % 4], "key": f"{i}" + "k" * 500 if i % 2 else None,
                      **({"trace": traces[i % 3]} if traces[i % 3] else {})}
                     for i in range(9)])
    charged = {task_id: body_cost(blob.partition(b"|")[2]) + TASK_FIELDS_COST
               for task_id, blob in blobs(valkey, "q").items()}
    for blob in blobs(valkey, "q").values():
        json_text = blob.partition(b"|")[2]
        assert orjson.loads(json_text)["e"] == json_text.count(b'"') + json_text.count(b"\\")
    claimed = tq.claim("q", max=9)
    assert len(claimed) == 9
    for task in claimed:
        answered = body_cost(orjson.dumps(task.model_dump(mode="json"))) + 1
        assert answered <= charged[str(task.id)], task
        assert ("trace" in task.model_dump(mode="json")) == (task.trace is not None)


def test_a_claim_stops_at_its_budget_to_the_byte_far_from_the_worst_case(tq: Tierq, valkey):
    """Tasks of few escapes cost about half what claim.lua bounds them at (two bytes a JSON
    byte) while far from the budget: near it, it counts exactly, so the claim stops where
    the exact costs say, to the byte, wherever in the claim that is."""
    for cut in (1, 2, 7, 25):
        for over in (0, 1):
            queue = f"q{cut}x{over}"
            tq.enqueue(queue, [{"payload": "x" * (500 + 37 * i) + '"' * (i % 3)}
                               for i in range(30)])
            found = blobs(valkey, queue)
            in_line = [m.decode() for m in valkey.zrange(PairKeys.of(queue, "_").ready, 0, -1)]
            costs = [body_cost(found[task_id].partition(b"|")[2]) + TASK_FIELDS_COST
                     for task_id in in_line]
            budget = sum(costs[:cut]) - over
            got = tq.claim(queue, max=30, max_bytes=budget)
            assert [str(t.id) for t in got] == in_line[:max(1, cut - over)], (cut, over)
