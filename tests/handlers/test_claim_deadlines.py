"""The claim function answers inside its time: the long poll, the inline refill and the pop
stop early enough for the function's remaining time (the Lambda context's
``get_remaining_time_in_millis``) and the HTTP API's 30 s, so no claim is cut off holding
leases. The contexts here are fake ones whose remaining time is short."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import redis

from tests.handlers.support import ApiEvent, Context, Reply, function_module, reply_of
from tierq.aws.http.claim_bounds import answer_margin
from tierq.aws.runtime import engine, reset_engine
from tierq.dal.warm_tier import PairKeys
from tierq.local.gateway.template import Template

QUEUE = "deadlines"
# the test context's memory (512 MB, the template's default) gives this margin
MARGIN = answer_margin(Context())


@pytest.fixture
def claim(lambda_env: None, api_event: ApiEvent, template: Template):
    """``claim(body, timeout_seconds=…, received_ago=…)``: invoke the claim function with a
    context that has ``timeout_seconds`` left, for a request the gateway received
    ``received_ago`` seconds ago."""
    route = next(r for r in template.routes
                 if r.method == "POST" and r.match(f"/v1/queues/{QUEUE}/claims") is not None)
    name = template.functions[route.function].name

    def invoke(body: dict[str, Any], *, timeout_seconds: float = 29.0,
               received_ago: float = 0.0) -> tuple[Reply, float]:
        event = api_event("POST", f"/v1/queues/{QUEUE}/claims", body)
        event["requestContext"]["timeEpoch"] = int((time.time() - received_ago) * 1000)
        context = Context(function_name=name, timeout_seconds=timeout_seconds)
        started = time.monotonic()
        result = function_module(name).lambda_handler(event, context)
        return reply_of(result), time.monotonic() - started

    return invoke


def leased(valkey: redis.Redis) -> list[bytes]:
    return valkey.zrange(PairKeys.of(QUEUE, "_").leased, 0, -1)


def cold_rows(pg: psycopg.Connection[Any]) -> int:
    return pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s AND state = 'cold'",
                      (QUEUE,)).fetchone()[0]


def test_a_long_poll_answers_before_the_function_times_out(claim):
    reply, took = claim({"max": 5, "wait_seconds": 20}, timeout_seconds=3.0)
    assert reply.status == 200 and reply.body == {"tasks": []}
    assert took < 3.0  # answered inside the function's time (polls until 3 s - the margin)


def test_a_long_poll_answers_before_the_http_api_gives_up(claim):
    # the gateway received the request 26 s ago: 4 s are left of its 30 s
    reply, took = claim({"max": 5, "wait_seconds": 20}, received_ago=26.0)
    assert reply.status == 200 and reply.body == {"tasks": []}
    assert took < 4.0


def test_a_claim_with_less_time_left_than_its_margin_leases_nothing(claim, valkey):
    engine().enqueue(QUEUE, [{"payload": i} for i in range(3)])
    reply, _ = claim({"max": 5}, timeout_seconds=MARGIN / 2)
    assert reply.status == 200 and reply.body == {"tasks": []}
    assert leased(valkey) == [] and valkey.zcard(PairKeys.of(QUEUE, "_").ready) == 3
    reply, _ = claim({"max": 5}, received_ago=30 - MARGIN / 2)
    assert reply.body == {"tasks": []} and leased(valkey) == []
    # with time enough, the same claim gets them
    reply, _ = claim({"max": 5})
    assert [t["payload"] for t in reply.body["tasks"]] == [0, 1, 2]


def test_no_inline_refill_starts_that_could_outlast_the_function(
        claim, valkey, pg, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TIERQ_WARM_MAX", "1")
    monkeypatch.setenv("TIERQ_DB_POOL_TIMEOUT", "3")
    reset_engine()
    settings = engine().settings
    engine().enqueue(QUEUE, [{"payload": i} for i in range(3)])  # 1 warm, 2 cold
    assert cold_rows(pg) == 2
    # Holding a popped task, a refill could last the pool timeout plus the statement
    # timeout: with less time than that left, the claim answers with what it holds.
    holding_reserve = settings.db_pool_timeout + settings.statement_timeout_ms / 1000
    reply, _ = claim({"max": 5}, timeout_seconds=MARGIN + holding_reserve - 0.5)
    assert [t["payload"] for t in reply.body["tasks"]] == [0]
    assert cold_rows(pg) == 2  # no refill ran
    # Holding nothing, a refill needs the pool timeout and its allowance: not there either.
    reply, _ = claim({"max": 5}, timeout_seconds=MARGIN + settings.db_pool_timeout)
    assert reply.body == {"tasks": []} and cold_rows(pg) == 2
    # With the time for it, the claim that finds the warm set dry refills and takes.
    reply, _ = claim({"max": 5}, timeout_seconds=MARGIN + holding_reserve + 5)
    assert [t["payload"] for t in reply.body["tasks"]] == [1]
    assert cold_rows(pg) == 1
    # what was handed out is exactly what is leased
    assert len(leased(valkey)) == 2
