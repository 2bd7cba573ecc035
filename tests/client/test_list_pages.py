"""The client's list methods follow the routes' ``next`` cursors to the last page."""

from __future__ import annotations

from tests.support.local_api import QueueNames
from tierq.client import Client


def test_list_methods_follow_every_page(api: Client, names: QueueNames) -> None:
    queues = [names[f"pages{i}"] for i in range(5)]
    for queue in queues:
        api.enqueue(queue, [{"payload": 1, "tenant": "acme"}, {"payload": 2, "tenant": "globex"}])
    first = api.list_queues_page(limit=2)
    assert len(first.queues) == 2 and first.next
    assert [q.queue for q in api.list_queues(page_size=2)] == sorted(queues)
    assert [q.queue for q in api.list_queues()] == sorted(queues)

    rows = [(r.queue, r.tenant) for r in api.metrics_detailed(page_size=3)]
    assert rows == sorted((q, t) for q in queues for t in ("acme", "globex"))
    assert [(r.queue, r.tenant) for r in api.metrics_detailed(queues[0], page_size=1)] == \
        [(queues[0], "acme"), (queues[0], "globex")]
    page = api.metrics_detailed_page(limit=4)
    assert len(page.queues) == 4 and page.next and page.timestamp is not None

    claimed = [t.id for q in queues for t in api.claim(q, max=2, lease_seconds=300)]
    assert len(claimed) == 10
    running = api.running(page_size=3)
    assert sorted(r.id for r in running) == sorted(claimed)
    assert [r.started_at for r in running] == sorted(r.started_at for r in running)
    assert {r.id for r in api.running(queues[1], page_size=1)} == set(claimed[2:4])
    assert api.running_page(limit=1).next is not None
