"""Errors show no internals: with PostgreSQL or Valkey unreachable (or a pooled connection
cut under the handler), the 503 body names the store and says when to retry, and nothing
else — no host, port, URL or driver text. The driver's words reach the function's log."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
import redis
from redis.exceptions import ClusterDownError, MasterDownError, RedisClusterException

from tests.handlers.support import Invoke
from tierq.aws.http.errors import UNAVAILABLE_FALLBACK, error_response, public_unavailable
from tierq.aws.runtime import engine, logger, reset_engine
from tierq.dal import warm_tier
from tierq.errors import Unavailable, WarmTierUnavailable
from tierq.local.services.process import free_port

# Anything a 503 body must not say.
INTERNALS = re.compile(
    r"127\.0\.0\.1|localhost|://|:\d{2,5}\b|\bport\b|\bhost\b|socket|refused|connecting"
    r"|connection (to|failed|closed|refused)|server|errno|error \d+|psycopg|redis"
    r"|timeout reading|terminat",
    re.IGNORECASE)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(f"{r.getMessage()} {r.__dict__.get('detail')} {r.__dict__.get('cause')}"
                         for r in self.records)


@pytest.fixture
def function_log() -> Iterator[Records]:
    handler = Records()
    inner = logger._logger  # Powertools' Logger wraps a standard logger that does not propagate
    inner.addHandler(handler)
    try:
        yield handler
    finally:
        inner.removeHandler(handler)


def assert_clean_503(status: int, headers: dict[str, str], body: Any) -> None:
    assert status == 503, body
    assert headers.get("retry-after", headers.get("Retry-After")), headers
    assert body["error"]["code"] == "unavailable"
    text = str(body)
    assert INTERNALS.search(text) is None, text


def test_postgresql_unreachable(call: Invoke, monkeypatch: pytest.MonkeyPatch,
                                function_log: Records) -> None:
    port = free_port()
    monkeypatch.setenv("DATABASE_URL", f"postgresql://tierq:secret@127.0.0.1:{port}/tierq")
    monkeypatch.setenv("TIERQ_DB_POOL_TIMEOUT", "1")
    reset_engine()
    for method, path, body in (("POST", "/v1/queues/jobs/tasks", {"payload": 1}),
                               ("GET", "/v1/schedules", None),
                               ("GET", "/v1/queues/jobs/dlq", None)):
        reply = call(method, path, body)
        assert_clean_503(reply.status, reply.headers, reply.body)
        assert "PostgreSQL" in reply.body["error"]["message"]
    assert "store unavailable" in function_log.text()
    reset_engine()


def test_a_connection_cut_under_the_handler(call: Invoke, pg: psycopg.Connection[Any],
                                            function_log: Records) -> None:
    """The driver's own error (the server closed the connection) goes to the log only."""
    assert call("GET", "/v1/schedules").status == 200  # the pool holds a connection now
    pg.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    replies = [call("GET", "/v1/schedules") for _ in range(3)]
    failed = [r for r in replies if r.status != 200]
    assert failed, "no request met the cut connection"
    for reply in failed:
        assert_clean_503(reply.status, reply.headers, reply.body)
    logged = function_log.text()
    assert "store unavailable" in logged
    assert re.search(r"terminat|closed|server", logged, re.IGNORECASE), logged


def test_valkey_unreachable(call: Invoke, monkeypatch: pytest.MonkeyPatch,
                            pg: psycopg.Connection[Any], function_log: Records) -> None:
    # a cold task (written as the database has it), so the claim has a tenant to pop from
    pg.execute("INSERT INTO tierq_tasks (id, queue, tenant, payload, state, run_at, "
               "run_at_initially, max_attempts, seq, created_at, state_since) VALUES "
               "(gen_random_uuid(), 'jobs', '_', '1', 'cold', now(), now(), 5, "
               "nextval('tierq_task_seq'), now(), now())")
    port = free_port()
    monkeypatch.setenv("VALKEY_URL", f"redis://127.0.0.1:{port}/0")
    reset_engine()
    reply = call("POST", "/v1/queues/jobs/claims", {"max": 1, "tenant": "_"})
    assert_clean_503(reply.status, reply.headers, reply.body)
    assert "Valkey" in reply.body["error"]["message"]
    logged = function_log.text()
    assert "store unavailable" in logged
    assert str(port) in logged  # the detail, with where it failed, is in the log
    reset_engine()
    assert engine() is not None


def test_a_lock_wait_over_the_lock_timeout_is_a_timeout_not_an_outage(
        call: Invoke, monkeypatch: pytest.MonkeyPatch, pg: psycopg.Connection[Any],
        function_log: Records) -> None:
    """PostgreSQL is up and answered: the 503 says the work did not finish in time (retry),
    not that PostgreSQL is not answering."""
    monkeypatch.setenv("TIERQ_LOCK_TIMEOUT_MS", "200")
    reset_engine()
    assert call("PUT", "/v1/queues/held", {"warm_max": 10}).status == 200
    with pg.transaction():
        pg.execute("SELECT 1 FROM tierq_queues WHERE queue = 'held' FOR UPDATE")
        reply = call("PUT", "/v1/queues/held", {"warm_max": 20})
    assert_clean_503(reply.status, reply.headers, reply.body)
    message = reply.body["error"]["message"]
    assert "did not finish in time" in message and "not answering" not in message
    assert reply.headers.get("retry-after", reply.headers.get("Retry-After")) == "1"
    logged = function_log.text()
    assert "store timed out" in logged and "lock timeout" in logged, logged
    assert call("PUT", "/v1/queues/held", {"warm_max": 20}).status == 200
    reset_engine()


def test_a_message_that_gives_internals_away_is_replaced() -> None:
    leaky = Unavailable("Valkey is not answering: Error 111 connecting to 10.0.3.7:6379.")
    assert public_unavailable(leaky).message == UNAVAILABLE_FALLBACK
    clean = Unavailable("PostgreSQL is not answering", detail="host=db.internal port=5432")
    assert public_unavailable(clean) is clean
    assert "db.internal" not in str(clean.to_body())


def test_valkey_cluster_unreachable(call: Invoke, monkeypatch: pytest.MonkeyPatch,
                                    function_log: Records) -> None:
    """A cluster client that reaches no node raises redis-py's RedisClusterException
    ("Redis Cluster cannot be connected"), not a connection error: still a 503 naming
    Valkey, the driver's words in the log only."""
    port = free_port()
    monkeypatch.setenv("VALKEY_URL", f"redis://127.0.0.1:{port}/0")
    monkeypatch.setenv("VALKEY_CLUSTER", "true")
    reset_engine()
    for method, path, body in (("POST", "/v1/queues/jobs/claims", {"max": 1, "tenant": "_"}),
                               ("POST", "/v1/queues/jobs/tasks", {"payload": 1})):
        reply = call(method, path, body)
        assert_clean_503(reply.status, reply.headers, reply.body)
        assert "Valkey" in reply.body["error"]["message"]
    logged = function_log.text()
    assert "store unavailable" in logged
    assert "RedisClusterException" in logged or "Cluster" in logged, logged
    reset_engine()


@pytest.mark.parametrize("raised", [
    RedisClusterException("Redis Cluster cannot be connected. Please provide at least one "
                          "reachable node: Error 111 connecting to 10.0.3.7:6379."),
    RedisClusterException("All slots are not covered after query all startup_nodes."),
    ClusterDownError("CLUSTERDOWN The cluster is down"),
    MasterDownError("MASTERDOWN Link with MASTER is down"),
    redis.ConnectionError("Error 111 connecting to 10.0.3.7:6379. Connection refused."),
])
def test_every_cluster_outage_is_a_503_naming_valkey_only(raised: Exception) -> None:
    """What redis-py raises when a cluster cannot serve, as the warm tier maps it and the
    HTTP API answers it."""
    with pytest.raises(WarmTierUnavailable) as mapped, warm_tier._available():
        raise raised
    assert mapped.value.__cause__ is raised  # the driver's words, for the log
    response = error_response(mapped.value)
    body = orjson.loads(response.body)
    assert_clean_503(response.status_code, response.headers, body)
    assert body["error"]["message"] == "Valkey is not answering"
