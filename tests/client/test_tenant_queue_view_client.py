"""``Client.get_queue`` / ``list_queues`` for a caller pinned to a tenant, against the local
API: they answer tenant views (the settings workers read, the tenant's own counts), for any
queue name; an admin's client gets admin views; a ``Worker`` with a tenant's token takes its
lease from the tenant view, which shows the defaults until its tenant has tasks in the queue,
and then the queue's setting."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.local_api import QueueNames
from tests.support.polling import eventually
from tierq.client import Client, NotFoundError
from tierq.client.worker import Worker
from tierq.models import ClaimedTask, QueueView, TenantQueueView

# the Worker takes a blocking Client: its tests run once
ONE_CLIENT = ("test_a_worker_with_a_tenants_token_leases_with_the_queues_setting",
              "test_a_worker_of_a_fresh_pair_takes_the_queues_lease_once_it_has_tasks")


def pinned(api_url: str, tenant: str, client_class: type[Client] = Client) -> Client:
    """A client whose requests the local gateway judges with a tenant's claims."""
    return client_class(api_url, headers={"x-tierq-jwt-claims": json.dumps(
        {"sub": f"{tenant}-worker", "tenant": tenant})})


class ViewsSeen(Client):
    """A pinned client that keeps every queue view it read."""

    def __init__(self, api_url: str, tenant: str) -> None:
        super().__init__(api_url, headers={"x-tierq-jwt-claims": json.dumps(
            {"sub": f"{tenant}-worker", "tenant": tenant})})
        self.views: list[QueueView | TenantQueueView] = []

    def get_queue(self, queue: str) -> QueueView | TenantQueueView:
        view = super().get_queue(queue)
        self.views.append(view)
        return view


def test_a_pinned_client_reads_tenant_views(api: Client, api_url: str, names: QueueNames,
                                            client_class: type[Client]) -> None:
    jobs = names["jobs"]
    api.put_queue(jobs, {"lease_seconds": 17, "max_attempts": 4, "max_leased": 9})
    api.enqueue(jobs, [{"payload": i, "tenant": "acme"} for i in range(3)])
    api.enqueue(jobs, [{"payload": i, "tenant": "beta"} for i in range(5)])

    admin = api.get_queue(jobs)
    assert isinstance(admin, QueueView) and admin.settings.max_leased == 9
    assert admin.counts.warm + admin.counts.cold == 8
    with pinned(api_url, "acme", client_class) as acme:
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


def test_a_worker_of_a_fresh_pair_takes_the_queues_lease_once_it_has_tasks(
        api: Client, api_url: str, names: QueueNames) -> None:
    """Before its tenant has tasks in the queue the Worker is shown the deployment's default
    lease; its first tasks come with that lease, the view is read again, and from then on
    the queue's lease holds: for the next claims, and for the tasks already held from their
    first heartbeat."""
    queue = names["fresh-pair"]
    api.put_queue(queue, {"lease_seconds": 37})
    api.enqueue(queue, [{"payload": "theirs", "tenant": "beta"}])
    lease_left: dict[str, float] = {}
    leave = threading.Event()

    def look(task: ClaimedTask) -> Any:
        lease_left[task.payload] = (task.lease_expires_at - datetime.now(UTC)).total_seconds()
        if task.payload == "first":
            leave.wait(60)
        return "ok"

    with ViewsSeen(api_url, "acme") as acme:
        worker = Worker(acme, queue, look, concurrency=1, wait_seconds=0.2,
                        heartbeat_fraction=0.01, install_signal_handlers=False)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            eventually(lambda: acme.views, timeout=30, what="the worker read the view")
            default = acme.views[0].settings.lease_seconds
            assert default > 60  # the deployment's, not the queue's 37
            api.enqueue(queue, [{"payload": "first", "tenant": "acme"}])
            eventually(lambda: "first" in lease_left, timeout=30, what="the first task")
            assert 37 + 10 < lease_left["first"] <= default  # claimed with the default
            eventually(lambda: len(acme.views) == 2, timeout=30, what="the view read again")
            assert acme.views[1].settings.lease_seconds == 37

            def running_left() -> float:
                [lease] = api.running(queue)
                return (lease.lease_expires_at - datetime.now(UTC)).total_seconds()

            # its first heartbeat (a hundredth of the default lease) extends it by 37 s
            eventually(lambda: running_left() <= 37, timeout=30,
                       what="the held task's lease moved to the queue's")
            leave.set()
            api.enqueue(queue, [{"payload": "second", "tenant": "acme"}])
            eventually(lambda: "second" in lease_left, timeout=30, what="the second task")
            assert 30 < lease_left["second"] <= 37
        finally:
            leave.set()
            worker.stop()
            thread.join(timeout=30)
    assert not thread.is_alive()
    assert (worker.stats.acked, worker.stats.leases_lost) == (2, 0)
