"""``Client.get_queue`` / ``list_queues`` for a caller pinned to a tenant, against the local
API: they answer tenant views (the settings workers read, the tenant's own counts), for any
queue name; an admin's client gets admin views; a ``Worker`` with a tenant's token takes its
lease from the tenant view."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.support.local_api import QueueNames
from tierq.client import Client, NotFoundError
from tierq.client.worker import Worker
from tierq.models import ClaimedTask, QueueView, TenantQueueView


def pinned(api_url: str, tenant: str) -> Client:
    """A client whose requests the local gateway judges with a tenant's claims."""
    return Client(api_url, headers={"x-tierq-jwt-claims": json.dumps(
        {"sub": f"{tenant}-worker", "tenant": tenant})})


def test_a_pinned_client_reads_tenant_views(api: Client, api_url: str,
                                            names: QueueNames) -> None:
    jobs = names["jobs"]
    api.put_queue(jobs, {"lease_seconds": 17, "max_attempts": 4, "max_leased": 9})
    api.enqueue(jobs, [{"payload": i, "tenant": "acme"} for i in range(3)])
    api.enqueue(jobs, [{"payload": i, "tenant": "beta"} for i in range(5)])

    admin = api.get_queue(jobs)
    assert isinstance(admin, QueueView) and admin.settings.max_leased == 9
    assert admin.counts.warm + admin.counts.cold == 8
    with pinned(api_url, "acme") as acme:
        view = acme.get_queue(jobs)
        assert isinstance(view, TenantQueueView)
        assert (view.tenant, view.settings.lease_seconds, view.settings.max_attempts) == \
            ("acme", 17, 4)
        assert view.counts.warm + view.counts.cold == 3
        unknown = acme.get_queue(names["never-used"])  # no 404: no oracle
        assert isinstance(unknown, TenantQueueView) and unknown.counts.warm == 0
        listed = acme.list_queues()
        assert [(type(q), q.queue) for q in listed] == [(TenantQueueView, jobs)]
    with pytest.raises(NotFoundError):
        api.get_queue(names["never-used"])


def test_a_worker_with_a_tenants_token_leases_with_the_queues_setting(
        api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["tenant-worker"]
    api.put_queue(queue, {"lease_seconds": 37})
    api.enqueue(queue, [{"payload": 1, "tenant": "acme"}])
    lease_left: list[float] = []

    def look(task: ClaimedTask) -> str:
        lease_left.append((task.lease_expires_at - datetime.now(UTC)).total_seconds())
        return "ok"

    with pinned(api_url, "acme") as acme:
        stats = Worker(acme, queue, look, concurrency=1, wait_seconds=0.2, burst=True,
                       install_signal_handlers=False).run()
    assert stats.acked == 1
    [left] = lease_left
    assert 30 < left <= 37  # the queue's lease, read from the tenant view
