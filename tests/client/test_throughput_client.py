"""``Client.throughput`` against the local API (real HTTP, real PostgreSQL and Redis): the
queue's counts, one tenant's, and a pinned caller refused another tenant's."""

from __future__ import annotations

import json

import pytest

from tests.support.local_api import QueueNames
from tierq.client import Client, ForbiddenError, NotFoundError
from tierq.models.throughput import QueueThroughput


def pinned(client_class: type[Client], api_url: str, tenant: str) -> Client:
    """A client whose requests the local gateway judges with a tenant's claims."""
    return client_class(api_url, headers={"x-tierq-jwt-claims": json.dumps({"tenant": tenant})})


def test_throughput_of_a_queue_and_of_one_tenant(api: Client, api_url: str,
                                                 names: QueueNames,
                                                 client_class: type[Client]) -> None:
    jobs = names["jobs"]
    api.enqueue(jobs, [{"payload": i, "tenant": "acme"} for i in range(6)])
    api.enqueue(jobs, [{"payload": i, "tenant": "beta"} for i in range(4)])
    claimed = api.claim(jobs, max=3, tenant="acme")
    assert len(api.ack(jobs, [{"id": t.id, "lease_token": t.lease_token}
                              for t in claimed]).acked) == 3

    queue = api.throughput(jobs)
    assert isinstance(queue, QueueThroughput)
    assert (queue.enqueued_total, queue.acked_total, queue.tenant) == (10, 3, None)
    assert len(queue.enqueued) == len(queue.acked) == 900
    assert sum(queue.enqueued[-30:]) == 10
    beta = api.throughput(jobs, tenant="beta")
    assert (beta.enqueued_total, beta.acked_total) == (4, 0)

    with pinned(client_class, api_url, "acme") as acme:
        own = acme.throughput(jobs)
        assert (own.tenant, own.enqueued_total, own.acked_total) == ("acme", 6, 3)
        with pytest.raises(ForbiddenError):
            acme.throughput(jobs, tenant="beta")
    with pytest.raises(NotFoundError):
        api.throughput(names["never-used"])
