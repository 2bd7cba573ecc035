"""The client's idempotency keys and request splitting: against a scripted server (what is
sent, on which answers it retries) and against the real local API behind a proxy that
loses the first answer (a retried enqueue leaves one task)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.client.scripted_server import DroppingProxy, Reply, ScriptedServer
from tests.support.local_api import QueueNames
from tierq.client import Client, InvalidInputError, RetryPolicy
from tierq.client.errors import ApiError
from tierq.client.http import enqueue_batches
from tierq.core.sizing import REQUEST_BODY_LIMIT, body_cost

OUTCOME = {"id": "01a2010d-0000-7000-8000-000000000001", "outcome": "created", "state": "warm",
           "tenant": "_", "key": None}


def error(status: int, code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": "nope", "details": []}}


def client_for(client_class: type[Client], server: ScriptedServer,
               waits: list[float]) -> Client:
    client = client_class(server.url, retry=RetryPolicy(max_retries=3, base_seconds=0.1,
                                                  cap_seconds=0.2), timeout=5)
    client._sleep = waits.append
    return client


def sent_keys(server: ScriptedServer) -> list[str]:
    return [r.headers.get("idempotency-key", "") for r in server.received]


def test_one_key_per_call_reused_across_its_retries(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(
        Reply(503, error(503, "unavailable"), headers={"Retry-After": "0"}),
        Reply(409, error(409, "idempotency_in_progress")),
        Reply(200, {"tasks": [OUTCOME]}),
        Reply(200, {"tasks": [OUTCOME]}),
    )
    waits: list[float] = []
    with client_for(client_class, scripted, waits) as api:
        api.enqueue("emails", [{"payload": 1}])
        api.enqueue("emails", [{"payload": 1}])
    keys = sent_keys(scripted)
    assert len(keys) == 4 and all(uuid.UUID(k) for k in keys)
    assert keys[0] == keys[1] == keys[2]  # the retries of one call
    assert keys[3] != keys[0]  # the next logical call
    assert len(waits) == 2


def test_lease_calls_and_replays_carry_keys_purges_do_not(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    lease = {"id": OUTCOME["id"], "lease_token": "t"}
    scripted.script(
        Reply(200, {"acked": [], "rejected": []}),
        Reply(200, {"retried": [], "dead": [], "rejected": []}),
        Reply(200, {"released": [], "rejected": []}),
        Reply(200, {"extended": [], "rejected": []}),
        Reply(200, {"replayed": [], "skipped": []}),
        Reply(200, {"purged": []}),
    )
    with client_for(client_class, scripted, []) as api:
        api.ack("q", [lease])
        api.nack("q", [{**lease, "error": "x"}])
        api.release("q", [lease])
        api.heartbeat("q", [lease])
        api.dlq_replay("q", [OUTCOME["id"]])
        api.dlq_purge("q", [OUTCOME["id"]])
    keys = sent_keys(scripted)
    assert all(keys[:5]) and len(set(keys[:5])) == 5
    assert keys[5] == ""


def test_a_409_of_another_kind_is_not_retried(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(Reply(409, error(409, "quota_exceeded")))
    waits: list[float] = []
    with client_for(client_class, scripted, waits) as api, pytest.raises(ApiError) as raised:
        api.enqueue("emails", [{"payload": 1}])
    assert raised.value.code == "quota_exceeded" and waits == []
    assert len(scripted.received) == 1


def test_replay_and_purge_all_repeat_while_more(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    ids = [str(uuid.uuid4()) for _ in range(5)]
    scripted.script(
        Reply(200, {"replayed": ids[:2], "skipped": [], "more": True}),
        Reply(200, {"replayed": ids[2:4], "skipped": [], "more": True}),
        Reply(200, {"replayed": ids[4:], "skipped": [], "more": False}),
        Reply(200, {"purged": ids[:3], "more": True}),
        Reply(200, {"purged": ids[3:], "more": False}),
    )
    with client_for(client_class, scripted, []) as api:
        replayed = api.dlq_replay("q", all=True)
        purged = api.dlq_purge("q", all=True)
    assert [str(i) for i in replayed.replayed] == ids and not replayed.more
    assert [str(i) for i in purged.purged] == ids
    keys = sent_keys(scripted)
    assert len(set(keys[:3])) == 3  # each slice is its own request
    assert all(r.json() == {"all": True} for r in scripted.received)


def test_enqueue_batches_split_by_count_and_by_bytes() -> None:
    small = [b'{"payload":1}'] * 1200
    assert list(enqueue_batches(small)) == [(0, 500), (500, 1000), (1000, 1200)]
    # 240 KB of emoji with quotes and backslashes: the escapes count too
    payload = ("😀" * 60_000) + '"\\' * 1000
    big = [orjson.dumps({"payload": payload})] * 30
    ranges = list(enqueue_batches(big))
    assert ranges[0][0] == 0 and ranges[-1][1] == 30
    for start, stop in ranges:
        body = b'{"tasks":[' + b",".join(big[start:stop]) + b"]}"
        assert body_cost(body) <= REQUEST_BODY_LIMIT
        assert stop - start <= 500
    assert len(ranges) == 2  # about 3.5 MB of escaped bytes per request at most
    with pytest.raises(InvalidInputError) as raised:
        list(enqueue_batches([b"x" * 100, b"y" * 200], max_bytes=150))
    assert raised.value.details[0]["field"] == "tasks[1]"


def test_a_large_enqueue_is_sent_in_requests_that_fit(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    payload = "€" * 80_000 + "\\" * 5_000  # 245 KB once serialised
    scripted.script(*[Reply(200, {"tasks": [OUTCOME]}) for _ in range(10)])
    with client_for(client_class, scripted, []) as api:
        api.enqueue("q", [{"payload": payload} for _ in range(40)])
    sizes = [body_cost(r.body) for r in scripted.received]
    assert len(sizes) >= 2 and all(size <= REQUEST_BODY_LIMIT for size in sizes)
    assert sum(len(r.json()["tasks"]) for r in scripted.received) == 40
    assert len(set(sent_keys(scripted))) == len(sizes)


# ----------------------------------------------------------------------- the real API


@pytest.fixture
def dropping_proxy(api_url: str, clean_stores: None) -> Iterator[DroppingProxy]:
    proxy = DroppingProxy(api_url)
    yield proxy
    proxy.close()


def test_an_enqueue_whose_answer_was_lost_is_retried_into_one_task(
        dropping_proxy: DroppingProxy, api: Client, names: QueueNames,
        client_class: type[Client]) -> None:
    queue = names["lost"]
    with client_class(dropping_proxy.url, retry=RetryPolicy(max_retries=2, base_seconds=0.01,
                                                      cap_seconds=0.02)) as flaky:
        [outcome] = flaky.enqueue(queue, [{"payload": {"to": "a@example.com"}}])
    assert dropping_proxy.dropped == 1
    first, retried = dropping_proxy.forwarded[:2]
    assert first["idempotency-key"] == retried["idempotency-key"]
    assert outcome.outcome == "created"
    claimed = api.claim(queue, max=10)
    assert [t.id for t in claimed] == [outcome.id]  # one task, the one answered
