"""A task fed in bulk and the same task enqueued one by one end up identical: every column
but the id, the place in line, the queue and the timestamps, and the same claim result —
through the engine (what the HTTP handler calls) and over HTTP against the local stack."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.spark.data import write_json
from tests.support.dev_server import DevServer, start_dev_server
from tierq.engine import Tierq

pytestmark = pytest.mark.spark

TASK = {"id": "order-42", "tenant": "acme", "prio": 6, "customer": "c-7", "amount": 12.5,
        "tags": ["a", "b"], "address": {"city": "Oslo", "zip": "0150"}, "note": None}
PAYLOAD_COLUMNS = ["customer", "amount", "tags", "address", "note"]
PAYLOAD = {c: TASK[c] for c in PAYLOAD_COLUMNS}
# columns that differ by nature between two tasks: identity, place in line, time
VARYING = {"id", "seq", "queue", "created_at", "run_at", "run_at_initially", "ready_since",
           "state_since"}
CLAIM_VARYING = {"id", "queue", "lease_token", "lease_expires_at", "enqueued_at"}


def stored(database_url: str, queue: str) -> dict[str, Any]:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT * FROM tierq_tasks WHERE queue = %s", (queue,)).fetchall()
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["run_at"] == row["run_at_initially"]
    assert row["ready_since"] is not None and row["run_at"] <= row["ready_since"]
    return {k: v for k, v in row.items() if k not in VARYING}


def wait_warm(database_url: str, *queues: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(database_url) as conn:
            states = conn.execute("SELECT state FROM tierq_tasks WHERE queue = ANY(%s)",
                                  (list(queues),)).fetchall()
        if len(states) == len(queues) and all(s == ("warm",) for s in states):
            return
        time.sleep(0.2)
    raise AssertionError(f"tasks of {queues} did not warm up within {timeout}s: {states}")


def feed_task(feed: Any, tmp_path: Path, queue: str) -> None:
    path = write_json(tmp_path / f"{queue}.json", [TASK])
    result = feed("--queue", queue, "--source", f"orders={path}", "--key-column", "id",
                  "--tenant-column", "tenant", "--priority-column", "prio",
                  "--payload-columns", ",".join(PAYLOAD_COLUMNS))
    assert result.line() == "created=1 ignored=0 deferred=0 rejected=0"


def test_bulk_equals_engine_enqueue(feed: Any, tmp_path: Path, database_url: str,
                                    engine: Tierq) -> None:
    feed_task(feed, tmp_path, "bulk")
    outcome = engine.enqueue("direct", [{"payload": PAYLOAD, "key": TASK["id"],
                                         "tenant": TASK["tenant"], "priority": TASK["prio"]}])
    assert outcome[0].outcome == "created"
    wait_warm(database_url, "bulk", "direct")
    bulk, direct = stored(database_url, "bulk"), stored(database_url, "direct")
    assert bulk == direct
    assert bulk["state"] == "warm" and bulk["payload"] == PAYLOAD

    (claimed_bulk,) = engine.claim("bulk", max=5)
    (claimed_direct,) = engine.claim("direct", max=5)
    assert claimed_bulk.model_dump(exclude=CLAIM_VARYING) == \
        claimed_direct.model_dump(exclude=CLAIM_VARYING)
    assert claimed_bulk.payload == PAYLOAD


@pytest.fixture(scope="module")
def local_api(database_url: str, valkey_url: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """``tierq dev`` over this session's stores, for this module only (its scheduled
    maintenance must not run under the other feeder tests)."""
    server = start_dev_server(database_url, valkey_url,
                              tmp_path_factory.mktemp("tierq-dev") / "tierq-dev.log")
    yield server
    server.stop()


def test_bulk_equals_http_enqueue(feed: Any, tmp_path: Path, database_url: str,
                                  local_api: DevServer) -> None:
    suffix = str(time.monotonic_ns())  # the server caches (queue, tenant) pairs it has seen
    bulk_queue, http_queue = f"bulk-{suffix}", f"http-{suffix}"
    feed_task(feed, tmp_path, bulk_queue)
    with httpx.Client(base_url=local_api.url, timeout=30) as http:
        response = http.post(f"/v1/queues/{http_queue}/tasks", json={
            "payload": PAYLOAD, "key": TASK["id"], "tenant": TASK["tenant"],
            "priority": TASK["prio"]})
        assert response.status_code in (200, 201), response.text
        wait_warm(database_url, bulk_queue, http_queue)
        assert stored(database_url, bulk_queue) == stored(database_url, http_queue)

        claims = []
        for queue in (bulk_queue, http_queue):
            response = http.post(f"/v1/queues/{queue}/claims", json={"max": 5})
            assert response.status_code == 200, response.text
            (task,) = response.json()["tasks"]
            claims.append({k: v for k, v in task.items() if k not in CLAIM_VARYING})
    assert claims[0] == claims[1]
    assert claims[0]["payload"] == PAYLOAD and claims[0]["key"] == TASK["id"]
