"""The dashboard's throughput charts in headless Chromium against the local API: one chart
per queue of enqueued and acked per second over 15 minutes (plain SVG), following new work,
and only the caller's tenant for a pinned caller."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.dashboard.test_dashboard import open_dashboard
from tests.support.local_api import QueueNames
from tierq.client import Client

pytestmark = pytest.mark.browser


def chart(page: Any, queue: str) -> Any:
    return page.locator(f'div[data-testid="throughput-chart"][data-queue="{queue}"]')


def totals(page: Any, queue: str, enqueued: int, acked: int) -> None:
    """Wait until the queue's chart shows these 15-minute totals."""
    page.wait_for_function(
        "([q, e, a]) => { const c = document.querySelector("
        "`div[data-testid=\"throughput-chart\"][data-queue=\"${q}\"]`);"
        " return c && c.dataset.enqueuedTotal === String(e)"
        " && c.dataset.ackedTotal === String(a); }", arg=[queue, enqueued, acked])


def points(page: Any, queue: str, series: str) -> list[tuple[float, float]]:
    raw = chart(page, queue).locator(f'[data-testid="throughput-{series}"]').get_attribute(
        "points")
    return [(float(x), float(y)) for x, y in (p.split(",") for p in raw.split())]


def ack(api: Client, queue: str, n: int, **claim: Any) -> None:
    tasks = api.claim(queue, max=n, **claim)
    assert len(api.ack(queue, [{"id": t.id, "lease_token": t.lease_token}
                               for t in tasks]).acked) == n


def test_a_chart_per_queue_of_enqueued_and_acked_per_second(
        page: Any, api: Client, api_url: str, names: QueueNames) -> None:
    emails, reports = names["emails"], names["reports"]
    api.enqueue(emails, [{"payload": i, "tenant": t} for i in range(6) for t in ("a", "b")])
    ack(api, emails, 5, tenant="a")
    api.enqueue(reports, [{"payload": 1}])
    open_dashboard(page, api_url)
    totals(page, emails, 12, 5)
    totals(page, reports, 1, 0)
    assert page.get_by_test_id("throughput-chart").count() == 2

    enqueued, acked = points(page, emails, "enqueued"), points(page, emails, "acked")
    assert len(enqueued) == len(acked) == 900
    # the peak is at the top of the chart, in the last seconds; the past is flat at 0
    top = min(y for _, y in enqueued)
    assert next(x for x, y in enqueued if y == top) >= 870
    assert {y for x, y in enqueued if x < 850} == {100.0}
    assert "2 tenants" in chart(page, emails).locator("h3").inner_text()
    assert page.locator('script[src], link[rel="stylesheet"]').count() == 0  # no CDN

    api.enqueue(reports, [{"payload": i} for i in range(4)])
    ack(api, reports, 2)
    page.get_by_test_id("refresh").click()
    totals(page, reports, 5, 2)


def test_a_pinned_caller_sees_its_own_tenant(page: Any, api: Client, api_url: str,
                                             names: QueueNames) -> None:
    emails = names["emails"]
    api.enqueue(emails, [{"payload": i, "tenant": "acme"} for i in range(3)])
    api.enqueue(emails, [{"payload": i, "tenant": "globex"} for i in range(9)])
    ack(api, emails, 4, tenant="globex")
    page.set_extra_http_headers({"x-tierq-jwt-claims": json.dumps({"tenant": "acme"})})
    open_dashboard(page, api_url)
    totals(page, emails, 3, 0)
    assert "tenant acme" in chart(page, emails).locator("h3").inner_text()
