"""``tierq-http``: the same calls as ``tierq-engine`` over HTTP to ``tierq dev --no-services
--quiet`` (the local stack: one process serving the Lambda handlers on a threaded HTTP
server, its own schedules), with keep-alive ``httpx`` clients. The server's CPU counts as
the client's."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.phases import Sync, Target
from bench.systems import (
    TIERQ_CLAIM_BATCH,
    TIERQ_ENQUEUE_BATCH,
    Prepared,
    System,
    batches,
    claim_and_ack_loop,
    produced,
    quiet_logs,
)
from bench.systems.tierq_engine import (
    TIERQ_PRELOAD,
    TierqEngine,
    tierq_remaining,
)

if TYPE_CHECKING:
    import httpx

    from bench.stores import Stores


def answered(response: httpx.Response, what: str) -> httpx.Response:
    """The response of a call that must succeed; the phase fails with its body otherwise."""
    if response.status_code >= 300:
        raise RuntimeError(f"{what} answered {response.status_code}: {response.text[:300]}")
    return response


def http_produce(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import httpx

    quiet_logs()
    path = f"/v1/queues/{spec['queue']}/tasks"
    latencies: list[float] = []
    with httpx.Client(base_url=spec["base_url"], timeout=60) as client:
        client.get(f"/v1/queues/{spec['queue']}")  # open the keep-alive connection
        sync.ready_and_wait(spec["index"])
        for batch in batches(spec, sync, spec.get("batch", TIERQ_ENQUEUE_BATCH)):
            body = {"tasks": [{"payload": {"i": i}} for i in batch]}
            began = time.perf_counter()
            response = client.post(path, json=body)
            latencies.append(time.perf_counter() - began)
            answered(response, "enqueue")
            sync.add_enqueued(len(body["tasks"]))
    return produced(spec, time.time(), latencies)


def http_consume(spec: dict[str, Any], sync: Sync) -> dict[str, Any]:
    import httpx

    quiet_logs()
    queue = spec["queue"]
    claim_body = {"max": spec.get("claim_batch", TIERQ_CLAIM_BATCH), "lease_seconds": 300}
    with httpx.Client(base_url=spec["base_url"], timeout=60) as client:

        # acks that claim the next batch (TierqHttp(ack_and_claim=True)): the tasks an ack
        # claimed are the next claim's, which then sends nothing
        fused = spec.get("ack_and_claim", False)
        claimed_along: list[dict[str, Any]] = []

        def claim() -> list[dict[str, Any]]:
            if claimed_along:
                got = list(claimed_along)
                claimed_along.clear()
                return got
            response = client.post(f"/v1/queues/{queue}/claims", json=claim_body)
            tasks: list[dict[str, Any]] = answered(response, "claim").json()["tasks"]
            return tasks

        def ack(tasks: Sequence[dict[str, Any]]) -> tuple[int, int]:
            acks: dict[str, Any] = {"acks": [
                {"id": t["id"], "lease_token": t["lease_token"]} for t in tasks]}
            if fused:
                acks["claim"] = claim_body
            response = client.post(f"/v1/queues/{queue}/acks", json=acks)
            body = answered(response, "ack").json()
            claimed_along.extend(body.get("tasks", ()))
            return len(body["acked"]), len(body["rejected"])

        client.get(f"/v1/queues/{queue}")  # open the keep-alive connection
        sync.ready_and_wait(spec["index"])
        return claim_and_ack_loop(sync, claim, ack)


def tierq_dev_available() -> bool:
    """Whether this environment's ``tierq`` command has ``dev`` (the cli and local extras)."""
    from tierq.local.gateway.child import tierq_command

    probe = subprocess.run([*tierq_command(), "dev", "--help"], capture_output=True,
                           text=True, check=False, timeout=60)
    return probe.returncode == 0


class TierqHttp(System):
    """tierq through its HTTP API: ``tierq dev --no-services`` serving the Lambda handlers
    locally over the same PostgreSQL and Valkey."""

    name = "tierq-http"
    uses_valkey = True
    preload = TIERQ_PRELOAD

    def __init__(self, server_args: list[str] | None = None,
                 ack_and_claim: bool = False) -> None:
        """``ack_and_claim``: each consumer's ack claims its next batch (``POST …/acks``
        with ``claim``), one request a loop; named ``tierq-http+ack-and-claim``."""
        self.server_args = server_args or []
        self.engine = TierqEngine(maintenance=False)  # the local stack runs the schedules
        self.server_pid: int | None = None
        self.ack_and_claim = ack_and_claim
        if ack_and_claim:
            self.name = "tierq-http+ack-and-claim"

    def prepare(self, stores: Stores) -> Prepared:
        prepared = self.engine.prepare(stores)
        spec = dict(prepared.spec)
        if self.ack_and_claim:
            spec["ack_and_claim"] = True
        return Prepared(self.name, spec, prepared.database_url)

    def producer(self) -> Target:
        return http_produce

    def consumer(self) -> Target:
        return http_consume

    def client_pids(self, prepared: Prepared) -> list[int]:
        return [] if self.server_pid is None else [self.server_pid]

    @contextlib.contextmanager
    def running(self, prepared: Prepared) -> Iterator[None]:
        from tierq.local.gateway.child import start_gateway_child

        env = {**os.environ, "DATABASE_URL": prepared.spec["database_url"],
               "VALKEY_URL": prepared.spec["valkey_url"]}
        log = Path(f"/tmp/tierq-bench-{os.getuid()}/tierq-dev-{os.getpid()}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        child = start_gateway_child(env, log, cwd=Path.cwd(),
                                    args=["--quiet", *self.server_args])
        try:
            prepared.spec["base_url"] = child.url
            self.server_pid = child.process.pid
            yield
        finally:
            self.server_pid = None
            child.stop()

    def remaining(self, prepared: Prepared) -> int:
        return tierq_remaining(prepared.database_url)
