"""Big payloads through the local stack (``tierq dev``: the payload store is a folder under
``.local/``, served by the local gateway): a 5 MB payload goes up through the Client (and the
AsyncClient), the task carries a pointer, the Worker (and the AsyncWorker) hands its handler
the payload itself, and the object is gone once the task's retention has ended. A pointer
into another tenant's prefix is refused over HTTP, nothing written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tests.worker.test_async_worker import run_worker
from tierq.client import AsyncClient, Client, ForbiddenError, NotFoundError
from tierq.client.worker import Worker
from tierq.core.pointers import INLINE_LIMIT, Pointer, looks_like_pointer
from tierq.dal.payload_store import LOCAL_BUCKET
from tierq.models import ClaimedTask

REPO = Path(__file__).resolve().parents[2]
PAYLOADS = REPO / ".local" / "payloads"  # `tierq dev`'s folder (run from the repository)
FIVE_MB = 5 * 1024 * 1024


def big_payload(tag: str) -> dict[str, Any]:
    """About 5 MB of JSON, not only ASCII (a character of 2 bytes in UTF-8 every 64)."""
    return {"tag": tag, "blob": ("é" + "x" * 63) * (FIVE_MB // 64)}


def object_of(api: Client, queue: str, task_id: Any) -> Path:
    """The file of a task's object: the task carries a pointer to the local store."""
    view = api.get_task(queue, task_id)
    assert looks_like_pointer(view.payload), str(view.payload)[:200]
    assert view.payload[1]["s3BucketName"] == LOCAL_BUCKET
    key = view.payload[1]["s3Key"]
    assert key.startswith("tenants/_/")
    return PAYLOADS / key


def check_gone_after_retention(path: Path) -> None:
    # the queue keeps a finished task 1 s; the reaper purges it and then deletes its object
    eventually(lambda: not path.exists(), timeout=30, what=f"{path} deleted")


def test_a_5_mb_payload_round_trips_through_the_worker(api: Client,
                                                       names: QueueNames) -> None:
    queue = names["big"]
    api.put_queue(queue, {"retention_seconds": 1})
    payload = big_payload("sync")
    outcome = api.enqueue_one(queue, payload)
    path = object_of(api, queue, outcome.id)
    assert path.stat().st_size >= FIVE_MB
    small = api.enqueue_one(queue, {"tag": "small"})  # under the limit: inline
    assert api.get_task(queue, small.id).payload == {"tag": "small"}

    seen: list[Any] = []

    def handler(task: ClaimedTask) -> dict[str, Any]:
        seen.append(task.payload)
        return {"tag": task.payload["tag"]}

    stats = Worker(api, queue, handler, burst=True, install_signal_handlers=False).run()
    assert (stats.acked, stats.retried, stats.dead) == (2, 0, 0)
    assert sorted(seen, key=lambda p: p["tag"]) == [{"tag": "small"}, payload]
    check_gone_after_retention(path)


def test_a_5_mb_payload_round_trips_through_the_async_client_and_worker(
        api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["big-async"]
    api.put_queue(queue, {"retention_seconds": 1})
    payload = big_payload("async")

    async def enqueue() -> Any:
        async with AsyncClient(api_url) as client:
            return await client.enqueue_one(queue, payload)

    outcome = asyncio.run(enqueue())
    path = object_of(api, queue, outcome.id)
    seen: list[Any] = []

    async def handler(task: ClaimedTask) -> None:
        seen.append(task.payload)

    stats = run_worker(api_url, queue, handler, burst=True)
    assert (stats.acked, stats.retried, stats.dead) == (1, 0, 0)
    assert seen == [payload]
    check_gone_after_retention(path)


def test_a_pointer_outside_the_callers_prefix_is_refused_over_http(
        api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["stolen"]
    pointer = api.upload_payload(queue, {"secret": 1}, tenant="other")
    assert pointer[1]["s3Key"].startswith("tenants/other/")
    headers = {"x-tierq-jwt-claims": '{"tenant": "acme"}'}
    with Client(api_url, headers=headers) as acme:
        with pytest.raises(ForbiddenError, match="outside tenant 'acme'"):
            acme.enqueue_one(queue, pointer)
        with pytest.raises(ForbiddenError):  # nor may it read another tenant's object
            acme.fetch_payload(queue, pointer)
        forged = Pointer("another-bucket", "tenants/acme/x").payload()
        with pytest.raises(ForbiddenError, match="bucket"):
            acme.enqueue_one(queue, forged)
    with pytest.raises(NotFoundError):  # nothing written: the queue never had a task
        api.get_queue(queue)


def test_the_local_store_refuses_a_bad_signature_or_another_size(
        api: Client, names: QueueNames) -> None:
    queue = names["urls"]
    answer = api.request("POST", f"/v1/queues/{queue}/payloads", body={"size": 5})
    url = answer["upload"]["url"]
    assert httpx.put(url, content=b"123456").status_code == 403  # signed for 5 bytes
    assert httpx.put(url.replace("signature=", "signature=0"),
                     content=b"12345").status_code == 403
    assert httpx.put(url, content=b"12345").status_code == 200
    fetched = api.fetch_payload(queue, answer["pointer"])
    assert fetched == 12345  # the object is the payload's JSON


def test_offloading_follows_the_clients_threshold(api: Client, api_url: str,
                                                  names: QueueNames) -> None:
    queue = names["threshold"]
    with Client(api_url, offload_over=100) as eager:
        eager_id = eager.enqueue_one(queue, "y" * 200).id
    assert looks_like_pointer(api.get_task(queue, eager_id).payload)
    assert INLINE_LIMIT == 256 * 1024


def test_a_flows_big_payload_is_uploaded_too(api: Client, names: QueueNames) -> None:
    queue = names["flow"]
    payload = {"blob": "z" * (INLINE_LIMIT + 1)}
    made = api.flow([{"queue": queue, "ref": "a", "payload": payload}])
    task_id = made.tasks["a"].id
    assert object_of(api, queue, task_id).exists()
    [task] = api.claim(queue, max=1)
    assert api.with_payload(task).payload == payload
