"""A busy ``Worker``'s acks claim the slots they free (``claim_with_acks``), seen on the
wire through a recording proxy in front of the real local API.

| case                                   | what is shown                                |
| -------------------------------------- | -------------------------------------------- |
| a busy worker                          | acks carry claims; every task runs once; no  |
|                                        | more leases held than ``concurrency``        |
| ``claim_with_acks=False``              | no ack carries a claim                       |
| the stop comes while such an ack is    | the tasks it brought are released, never     |
| under way                              | started, no attempt counted                  |
| an API that refuses the claim (a 4xx)  | the acks again without it, results kept; the |
|                                        | worker claims apart from then on             |
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.client.scripted_server import DroppingProxy, Reply, ScriptedServer
from tests.client.test_worker_stop import recorded  # noqa: F401 (a fixture)
from tests.support.local_api import QueueNames
from tierq.client import Client
from tierq.client.core import Send
from tierq.client.worker import Worker
from tierq.client.worker.ledger import Ack, HeldLease, report
from tierq.models import ClaimedTask

ONE_CLIENT = True  # the Worker takes a blocking Client (the AsyncWorker: tests/worker)


def acks_with_claims(proxy: DroppingProxy) -> int:
    return sum(1 for r in proxy.requests if r.method == "POST" and r.path.endswith("/acks")
               and "claim" in json.loads(r.body))


def run_busy(url: str, api: Client, queue: str, **options: Any) -> tuple[Worker, list[Any]]:
    """A worker of 4 over 40 quick tasks, until the queue is empty; the leases it held each
    time a handler ran."""
    api.enqueue(queue, [{"payload": i} for i in range(40)])
    seen: list[int] = []
    with Client(url) as client:
        worker: Worker

        def handler(task: ClaimedTask) -> Any:
            seen.append(worker.held)
            return None

        worker = Worker(client, queue, handler, concurrency=4, burst=True, wait_seconds=1,
                        install_signal_handlers=False, **options)
        stats = worker.run()
    assert (stats.claimed, stats.acked, stats.rejected) == (40, 40, 0), stats
    assert api.get_queue(queue).counts.leased == 0
    return worker, seen


def test_a_busy_worker_s_acks_claim_the_slots_they_free(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:  # noqa: F811
    _, seen = run_busy(recorded.url, api, names["acks-claim"])
    assert acks_with_claims(recorded) >= 1
    assert max(seen) <= 4  # (a claim riding with acks never holds more than the slots)


def test_without_claim_with_acks_no_ack_claims(
        recorded: DroppingProxy, api: Client, names: QueueNames) -> None:  # noqa: F811
    run_busy(recorded.url, api, names["acks-alone"], claim_with_acks=False)
    assert acks_with_claims(recorded) == 0


class StopDuringAckClaim(Client):
    """A client that asks its worker to stop as it sends an ack with a claim: the stop
    comes while that request is under way."""

    worker: Worker

    async def _perform(self, step: Any) -> Any:
        if isinstance(step, Send) and step.path.endswith("/acks") and step.content \
                and b'"claim"' in step.content:
            self.worker.stop()
        return await super()._perform(step)


def test_tasks_an_ack_brings_after_the_stop_are_released_not_started(
        api: Client, names: QueueNames, api_url: str) -> None:
    queue = names["late-ack-claim"]
    api.enqueue(queue, [{"payload": i} for i in range(3)])
    ran: list[Any] = []
    with StopDuringAckClaim(api_url) as client:
        worker = Worker(client, queue, lambda task: ran.append(task.payload), concurrency=1,
                        lease_seconds=60, wait_seconds=1, grace_seconds=5,
                        install_signal_handlers=False)
        client.worker = worker
        thread = threading.Thread(target=worker.run)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive()
    stats = worker.stats
    assert ran == [0]  # (the first task only: the one its ack brought never started)
    assert (stats.claimed, stats.acked, stats.released) == (2, 1, 1), stats
    tasks = {t.payload: t for t in api.claim(queue, max=5)}
    assert sorted(tasks) == [1, 2] and tasks[1].attempt == 1  # (released: no attempt)


def test_an_ack_whose_claim_is_refused_goes_again_without_it(scripted: ScriptedServer) -> None:
    """An API that does not take ``claim`` (deployed before it) answers 422 naming it: the
    acks go again, with their results, without the claim, and the claim is marked refused
    (``Worker._reported`` then stops sending claims with acks)."""
    task = ClaimedTask.model_validate({
        "id": "018f0000-0000-7000-8000-000000000001", "queue": "q", "tenant": "t",
        "key": None, "priority": 0, "payload": 1, "attempt": 1, "max_attempts": 3,
        "lease_token": "t~abc~1~1", "lease_expires_at": "2026-11-30T00:00:00Z",
        "redelivered": False, "enqueued_at": "2026-11-30T00:00:00Z"})
    lease = HeldLease(task, 0.0, outcome=Ack({"kept": True}))
    scripted.script(
        Reply(422, {"error": {"code": "invalid_input", "message": "claim: not permitted",
                              "details": [{"field": "claim", "message": "not permitted"}]}}),
        Reply(200, {"acked": [str(task.id)], "rejected": []}))
    claim: dict[str, Any] = {"max": 1, "lease_seconds": 30, "tenant": None, "worker": "w"}
    with Client(scripted.url) as client:
        tally, claimed = client._run(report(client, "q", "w", [lease], claim))
    assert (tally.acked, claimed, claim.get("refused")) == (1, [], True)
    first, again = (json.loads(r.body) for r in scripted.received)
    assert "claim" in first and "claim" not in again
    assert again["acks"][0]["result"] == {"kept": True}
