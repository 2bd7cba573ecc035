"""A queue's view names only its first tenants (a queue may have hundreds of thousands), with
how many there are and whether the list is cut; its totals still count every tenant's tasks.
The detailed metrics page through all of them."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.handlers.support import Invoke
from tierq.core import sizing
from tierq.logic.queues import TENANTS_SHOWN

TENANTS = 3_000


def tenant_name(i: int) -> str:
    return f"t{i:05d}-" + "x" * 57  # 64 characters, the longest a tenant name may be


def seed_tenants(pg: psycopg.Connection[Any], queue: str, count: int) -> None:
    pg.execute("INSERT INTO tierq_queue_tenants (queue, tenant) "
               "SELECT %s, 't' || lpad(g::text, 5, '0') || '-' || repeat('x', 57) "
               "FROM generate_series(0, %s - 1) AS g", (queue, count))
    pg.commit()


def seed_tasks(pg: psycopg.Connection[Any], queue: str, tenant: str, state: str,
               count: int) -> None:
    """``count`` tasks of one pair in ``state`` (cold, delayed or dead), written by SQL."""
    pg.execute(
        """
        INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,
                                 run_at_initially, max_attempts, seq, created_at, state_since,
                                 finished_at)
        SELECT gen_random_uuid(), %(queue)s, %(tenant)s, 0, '{}'::jsonb, %(state)s,
               now() + CASE WHEN %(state)s = 'delayed' THEN interval '1 day'
                            ELSE interval '0' END,
               now(), 3, nextval('tierq_task_seq'), now(), now(),
               CASE WHEN %(state)s = 'dead' THEN now() END
        FROM generate_series(1, %(count)s)
        """, {"queue": queue, "tenant": tenant, "state": state, "count": count})
    pg.commit()


def test_a_queue_with_thousands_of_tenants_names_the_first_and_counts_all(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    seed_tenants(pg, "jobs", TENANTS)
    first, late, last = tenant_name(0), tenant_name(2_000), tenant_name(TENANTS - 1)
    seed_tasks(pg, "jobs", first, "cold", 3)
    seed_tasks(pg, "jobs", late, "delayed", 5)
    seed_tasks(pg, "jobs", last, "dead", 7)
    enqueued = call("POST", "/v1/queues/jobs/tasks", {"tasks": [
        {"payload": {"n": i}, "tenant": last} for i in range(2)]})
    assert enqueued.status in (200, 201), enqueued.body
    claimed = call("POST", "/v1/queues/jobs/claims", {"max": 1, "tenant": last})
    assert claimed.status == 200 and len(claimed.body["tasks"]) == 1

    one = call("GET", "/v1/queues/jobs")
    listed = call("GET", "/v1/queues")
    for reply in (one, listed):
        assert reply.status == 200, reply.body
    views = [one.body, *[q for q in listed.body["queues"] if q["queue"] == "jobs"]]
    assert len(views) == 2
    for view in views:
        assert view["tenants"] == [tenant_name(i) for i in range(TENANTS_SHOWN)]
        assert view["tenants_total"] == TENANTS and view["tenants_truncated"] is True
        counts = view["counts"]
        # every tenant's tasks are counted, not only the named ones'
        assert (counts["cold"] + counts["warm"], counts["leased"], counts["delayed"],
                counts["dead"]) == (4, 1, 5, 7)
        # the view no longer grows with the tenants: 100 names of 64 characters and the rest
        assert sizing.runtime_encoded_size(one.raw) < 20_000

    # a pinned caller sees its own part alone (its tenant view)
    mine = call("GET", "/v1/queues/jobs", claims={"sub": "w", "tenant": last}).body
    assert (mine["view"], mine["tenant"]) == ("tenant", last)
    assert "tenants" not in mine
    assert mine["counts"]["dead"] == 7

    # the detailed metrics page through every tenant of the queue
    rows: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        query = {"queue": "jobs", "limit": "1000", **({"after": after} if after else {})}
        page = call("GET", "/v1/metrics/queues/detailed", query=query)
        assert page.status == 200, page.body
        rows.extend(page.body["queues"])
        after = page.body["next"]
        if after is None:
            break
    assert [r["tenant"] for r in rows] == [tenant_name(i) for i in range(TENANTS)]
    # the view's totals are those of every tenant's counts
    for field in ("warm", "cold", "delayed", "leased", "dead"):
        assert one.body["counts"][field] == sum(r[field] for r in rows), field


def test_a_queue_with_few_tenants_names_them_all(call: Invoke) -> None:
    for tenant in ("b", "a", "c"):
        assert call("POST", "/v1/queues/few/tasks", {"tasks": [
            {"payload": {}, "tenant": tenant}]}).status in (200, 201)
    view = call("GET", "/v1/queues/few").body
    assert view["tenants"] == ["a", "b", "c"]
    assert view["tenants_total"] == 3 and view["tenants_truncated"] is False
    assert view["counts"]["warm"] + view["counts"]["cold"] == 3
