"""Claims carry an Idempotency-Key: one per call, reused by its retries (scripted server),
and against the real local API behind a proxy that loses the first answer, the client ends
up holding the claimed tasks once, none stranded."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.client.scripted_server import DroppingProxy, Reply, ScriptedServer
from tests.support.local_api import QueueNames
from tierq.client import Client, RetryPolicy
from tierq.dal.warm_tier import PairKeys


@pytest.fixture
def losing_proxy(api_url: str, clean_stores: None) -> Iterator[DroppingProxy]:
    proxy = DroppingProxy(api_url)
    yield proxy
    proxy.close()


def test_a_claim_call_sends_one_key_reused_by_its_retries(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    scripted.script(
        Reply(503, {"error": {"code": "unavailable", "message": "x", "details": []}},
              headers={"Retry-After": "0"}),
        Reply(200, {"tasks": []}),
        Reply(200, {"tasks": []}),
    )
    with client_class(scripted.url, retry=RetryPolicy(max_retries=2, base_seconds=0.01,
                                                cap_seconds=0.02)) as api:
        api._sleep = lambda seconds: None
        assert api.claim("q", max=2) == []
        assert api.claim("q", max=2) == []
    keys = [r.headers.get("idempotency-key", "") for r in scripted.received]
    assert all(uuid.UUID(k) for k in keys)
    assert keys[0] == keys[1] != keys[2]


def test_a_claim_whose_answer_was_lost_hands_out_its_tasks_once(
        losing_proxy: DroppingProxy, api: Client, names: QueueNames,
        valkey: redis.Redis, client_class: type[Client]) -> None:
    queue = names["lost-claim"]
    ids = {o.id for o in api.enqueue(queue, [{"payload": {"n": i}} for i in range(5)])}
    with client_class(losing_proxy.url, retry=RetryPolicy(max_retries=2, base_seconds=0.01,
                                                    cap_seconds=0.02)) as flaky:
        claimed = flaky.claim(queue, max=3)
    assert losing_proxy.dropped == 1
    first, retried = losing_proxy.forwarded[:2]
    assert first["idempotency-key"] == retried["idempotency-key"]
    assert len(claimed) == 3 and {t.id for t in claimed} <= ids
    # the first (lost) claim leased these three and nothing else: none stranded
    leased = {m.decode() for m in valkey.zrange(PairKeys.of(queue, "_").leased, 0, -1)}
    assert leased == {f"{t.id}|{t.lease_token}" for t in claimed}
    rest = api.claim(queue, max=10)
    assert {t.id for t in rest} == ids - {t.id for t in claimed}
    acked = api.ack(queue, [{"id": t.id, "lease_token": t.lease_token}
                            for t in [*claimed, *rest]])
    assert len(acked.acked) == 5 and acked.rejected == []
    assert all(t.attempt == 1 and not t.redelivered for t in claimed)
