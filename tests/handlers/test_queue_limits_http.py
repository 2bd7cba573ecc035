"""PUT / GET /v1/queues/{queue}: the limits on claims and the consumer, stored in PostgreSQL
and returned; null clears, a field left out keeps; bad shapes are refused naming the field,
writing nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.handlers.support import Invoke

LIMITS = {
    "max_leased": 5,
    "rate": {"per_second": 20, "burst": 5},
    "tenant_max_leased": 2,
    "tenant_rate": {"per_second": 0.5, "burst": 1},
}


def stored(pg: psycopg.Connection[Any], queue: str) -> tuple[Any, ...]:
    row = pg.execute(
        "SELECT l.max_leased, l.rate_per_second, l.rate_burst, l.tenant_max_leased,"
        " l.tenant_rate_per_second, l.tenant_rate_burst, q.consumer::text"
        " FROM tierq_queues q LEFT JOIN tierq_queue_limits l USING (queue)"
        " WHERE q.queue = %s", (queue,)).fetchone()
    assert row is not None
    return tuple(row)


def test_limits_are_stored_returned_kept_and_cleared(call: Invoke,
                                                     pg: psycopg.Connection[Any]) -> None:
    reply = call("PUT", "/v1/queues/jobs", LIMITS)
    assert reply.status == 200, reply.body
    settings = reply.body["settings"]
    assert {k: settings[k] for k in LIMITS} == {
        "max_leased": 5, "rate": {"per_second": 20.0, "burst": 5},
        "tenant_max_leased": 2, "tenant_rate": {"per_second": 0.5, "burst": 1}}
    assert settings["consumer"] is None
    assert stored(pg, "jobs") == (5, 20.0, 5, 2, 0.5, 1, None)

    # another field changes; the limits stay
    assert call("PUT", "/v1/queues/jobs", {"lease_seconds": 30}).status == 200
    got = call("GET", "/v1/queues/jobs").body["settings"]
    assert got["lease_seconds"] == 30 and got["max_leased"] == 5
    assert got["rate"] == {"per_second": 20.0, "burst": 5}

    # null clears only what it names
    cleared = call("PUT", "/v1/queues/jobs", {"rate": None, "tenant_max_leased": None})
    assert cleared.status == 200, cleared.body
    got = call("GET", "/v1/queues/jobs").body["settings"]
    assert got["rate"] is None and got["tenant_max_leased"] is None
    assert got["max_leased"] == 5 and got["tenant_rate"] == {"per_second": 0.5, "burst": 1}
    assert stored(pg, "jobs") == (5, None, None, None, 0.5, 1, None)


def test_a_rate_without_burst_gets_per_second_rounded_up(call: Invoke) -> None:
    reply = call("PUT", "/v1/queues/jobs", {"rate": {"per_second": 2.5},
                                            "tenant_rate": {"per_second": 0.2}})
    assert reply.status == 200, reply.body
    assert reply.body["settings"]["rate"] == {"per_second": 2.5, "burst": 3}
    assert reply.body["settings"]["tenant_rate"] == {"per_second": 0.2, "burst": 1}


def test_consumer_is_stored_with_defaults_and_removed_by_null(
        call: Invoke, pg: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # the stack's allow-list of consumer functions (tierq.logic.dispatch.AllowList)
    monkeypatch.setenv("TIERQ_CONSUMER_FUNCTIONS", "worker-fn,worker:live")
    monkeypatch.setenv("TIERQ_CONSUMER_ARN_PREFIX",
                       "arn:aws:lambda:eu-west-1:123456789012:function:")
    reply = call("PUT", "/v1/queues/jobs", {"consumer": {"function": "worker-fn"}})
    assert reply.status == 200, reply.body
    assert reply.body["settings"]["consumer"] == {
        "function": "worker-fn", "batch_size": 10, "max_concurrency": None,
        "max_batching_window_ms": 0}
    full = {"function": "arn:aws:lambda:eu-west-1:123456789012:function:worker:live",
            "batch_size": 100, "max_concurrency": 4, "max_batching_window_ms": 300000}
    reply = call("PUT", "/v1/queues/jobs", {"consumer": full})
    assert reply.status == 200, reply.body
    assert call("GET", "/v1/queues/jobs").body["settings"]["consumer"] == full
    assert call("PUT", "/v1/queues/jobs", {"paused": False}).status == 200
    assert call("GET", "/v1/queues/jobs").body["settings"]["consumer"] == full
    assert call("PUT", "/v1/queues/jobs", {"consumer": None}).status == 200
    assert call("GET", "/v1/queues/jobs").body["settings"]["consumer"] is None
    assert stored(pg, "jobs")[-1] is None


@pytest.mark.parametrize(("body", "field"), [
    ({"max_leased": 0}, "max_leased"),
    ({"max_leased": True}, "max_leased"),
    ({"max_leased": 2_000_000}, "max_leased"),
    ({"tenant_max_leased": -1}, "tenant_max_leased"),
    ({"rate": {"per_second": 0, "burst": 5}}, "rate.per_second"),
    ({"rate": {"per_second": 1e-9, "burst": 5}}, "rate.per_second"),
    ({"rate": {"burst": 5}}, "rate.per_second"),
    ({"rate": {"per_second": 5, "burst": -1}}, "rate.burst"),
    ({"rate": {"per_second": 5, "extra": 1}}, "rate.extra"),
    ({"tenant_rate": 5}, "tenant_rate"),
    ({"consumer": {}}, "consumer.function"),
    ({"consumer": {"function": ""}}, "consumer.function"),
    ({"consumer": {"function": "has space"}}, "consumer.function"),
    ({"consumer": {"function": "f", "batch_size": 0}}, "consumer.batch_size"),
    ({"consumer": {"function": "f", "batch_size": 101}}, "consumer.batch_size"),
    ({"consumer": {"function": "f", "max_concurrency": 0}}, "consumer.max_concurrency"),
    ({"consumer": {"function": "f", "max_batching_window_ms": 300001}},
     "consumer.max_batching_window_ms"),
    ({"consumer": {"function": "f", "max_batching_window_ms": -1}},
     "consumer.max_batching_window_ms"),
    ({"consumer": {"function": "f", "timeout": 3}}, "consumer.timeout"),
])
def test_bad_limits_and_consumers_are_refused_writing_nothing(
        call: Invoke, pg: psycopg.Connection[Any], body: dict[str, Any], field: str) -> None:
    reply = call("PUT", "/v1/queues/jobs", body)
    assert reply.status == 422, reply.body
    assert reply.body["error"]["details"][0]["field"] == field, reply.body
    assert pg.execute("SELECT count(*) FROM tierq_queues").fetchone() == (0,)
    assert pg.execute("SELECT count(*) FROM tierq_queue_limits").fetchone() == (0,)


def test_a_pinned_tenant_cannot_set_limits(call: Invoke) -> None:
    reply = call("PUT", "/v1/queues/jobs", {"max_leased": 3}, claims={"tenant": "acme"})
    assert reply.status == 403
