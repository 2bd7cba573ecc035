"""``AsyncClient`` used natively, on an event loop (the other client tests run it through a
blocking facade): many requests at once on one client, async iterators, and a retry's wait
that leaves the loop free."""

from __future__ import annotations

import asyncio
import time

from tests.client.scripted_server import Reply, ScriptedServer
from tests.support.local_api import QueueNames
from tierq.client import AsyncClient, Client, RetryPolicy
from tierq.models import ClaimedTask

ONE_CLIENT = True  # native: no facade to run through


def test_many_requests_at_once_on_one_client(api: Client, api_url: str,
                                             names: QueueNames) -> None:
    queue = names["gathered"]
    api.put_queue(queue, {"max_attempts": 1})

    async def main() -> tuple[set[str], list[str], list[str]]:
        async with AsyncClient(api_url) as client:
            made = await asyncio.gather(*(client.enqueue_one(queue, {"n": i})
                                          for i in range(40)))
            # Claimed until all 40 came: a new pair's first enqueues may land cold, and a
            # claim whose inline refill meets another mover at work on the pair (the local
            # API's scheduled cold_to_warm) answers with what it popped; that mover's batch
            # is claimable once its push lands (docs/architecture.md §4, "Claim").
            claimed: list[ClaimedTask] = []
            deadline = time.monotonic() + 10
            while len(claimed) < 40 and time.monotonic() < deadline:
                claimed += await client.claim(queue, max=40 - len(claimed), wait_seconds=1)
            await client.nack(queue, [{"id": t.id, "lease_token": t.lease_token,
                                       "error": "boom"} for t in claimed])
            dead = [str(t.id) async for t in client.dlq_iter(queue, page_size=7)]
            return {str(o.id) for o in made}, [str(t.id) for t in claimed], dead

    made, claimed, dead = asyncio.run(main())
    assert (len(made), len(claimed), len(dead)) == (40, 40, 40)
    assert set(claimed) == made and set(dead) == made


def test_a_retry_waits_without_blocking_the_loop(scripted: ScriptedServer) -> None:
    scripted.script(Reply(503, {"error": {"code": "unavailable", "message": "x",
                                          "details": []}}, headers={"Retry-After": "0.5"}),
                    Reply(200, {"queues": []}))
    ticks: list[float] = []

    async def ticker(until: asyncio.Event) -> None:
        while not until.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    async def main() -> float:
        done = asyncio.Event()
        tick = asyncio.create_task(ticker(done))
        async with AsyncClient(scripted.url, retry=RetryPolicy(max_retries=1)) as client:
            started = time.monotonic()
            assert await client.list_queues() == []
            took = time.monotonic() - started
        done.set()
        await tick
        return took

    took = asyncio.run(main())
    assert took >= 0.5 and len(scripted.received) == 2
    assert len(ticks) >= 5  # the loop ran other tasks while the retry waited
