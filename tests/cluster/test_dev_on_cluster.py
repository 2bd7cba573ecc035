"""``tierq dev --valkey-cluster`` over the session's cluster: the HTTP API and the scheduled
functions run with VALKEY_CLUSTER=true, tenants on every master are served, and a retried
ack with an Idempotency-Key (a record kept in Valkey) gets the first answer."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.cluster import tenants_on_every_node
from tests.support.dev_server import start_dev_server
from tierq.local.services.process import redact

pytestmark = pytest.mark.e2e


def test_tierq_dev_on_a_cluster_serves_tenants_on_every_master(database_url, cluster, valkey,
                                                                clean_stores, tmp_path: Path):
    queue = f"q-{uuid.uuid4().hex[:12]}"
    tenants = tenants_on_every_node(valkey, queue)
    server = start_dev_server(database_url, cluster.url, tmp_path / "dev.log",
                              args=("--valkey-cluster",))
    try:
        assert f"Valkey     {redact(cluster.url)} (cluster)" in server.log()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for tenant in tenants:
                claims = {"x-tierq-jwt-claims": orjson.dumps({"tenant": tenant}).decode()}
                sent = http.post(f"/v1/queues/{queue}/tasks", headers=claims, json={
                    "tasks": [{"payload": [tenant, i]} for i in range(5)]})
                assert sent.status_code == 200, sent.text
                assert {t["state"] for t in sent.json()["tasks"]} == {"warm"}
            got = http.post(f"/v1/queues/{queue}/claims", json={"max": 100})
            assert got.status_code == 200, got.text
            tasks = got.json()["tasks"]
            assert sorted(tuple(t["payload"]) for t in tasks) == sorted(
                (t, i) for t in tenants for i in range(5))
            body = {"acks": [{"id": t["id"], "lease_token": t["lease_token"]} for t in tasks]}
            key = {"Idempotency-Key": uuid.uuid4().hex}
            first = http.post(f"/v1/queues/{queue}/acks", json=body, headers=key)
            assert first.status_code == 200, first.text
            assert len(first.json()["acked"]) == len(tasks)
            again = http.post(f"/v1/queues/{queue}/acks", json=body, headers=key)
            assert again.status_code == 200 and again.json() == first.json()
            counts = http.get(f"/v1/queues/{queue}").json()["counts"]
            assert counts == {"warm": 0, "waiting": 0, "held": 0, "cold": 0, "delayed": 0,
                              "leased": 0, "dead": 0}
    finally:
        code = server.stop()
    assert code == 0, server.log()
