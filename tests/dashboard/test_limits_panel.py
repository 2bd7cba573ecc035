"""The dashboard's limits panel in headless Chromium against the local API: each limit of a
queue beside its use now, following claims and acks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dashboard.test_dashboard import open_dashboard
from tests.support.local_api import QueueNames
from tierq.client import Client

pytestmark = pytest.mark.browser


def cell(page: Any, queue: str, column: str) -> Any:
    return page.locator(f'tr[data-testid="limits-row"][data-queue="{queue}"] '
                        f'td[data-col="{column}"]')


def test_each_limit_is_shown_with_its_use(page: Any, api: Client, api_url: str,
                                          names: QueueNames) -> None:
    limited, free = names["limited"], names["free"]
    api.put_queue(limited, {"max_leased": 5, "rate": {"per_second": 0.001, "burst": 10},
                            "tenant_max_leased": 4})
    api.enqueue(limited, [{"payload": i, "tenant": t} for i in range(4) for t in ("a", "b")])
    api.enqueue(free, [{"payload": 1}])
    held = api.claim(limited, max=3, tenant="a")
    assert len(held) == 3
    open_dashboard(page, api_url)
    page.wait_for_function(
        "q => { const c = document.querySelector("
        "`tr[data-testid=\"limits-row\"][data-queue=\"${q}\"] td[data-col=\"max_leased\"]`);"
        " return c && c.textContent === '3 / 5'; }", arg=limited)
    assert cell(page, limited, "rate").inner_text() == "0.001/s · 7 of 10 tokens"
    assert cell(page, limited, "tenant_max_leased").inner_text() == "busiest 3 / 4"
    assert cell(page, limited, "tenant_rate").inner_text() == "\u2013"  # unset
    assert page.locator(f'tr[data-testid="limits-row"][data-queue="{free}"]').count() == 0

    more = api.claim(limited, max=5)
    assert len(more) == 2  # max_leased 5
    api.ack(limited, [{"id": t.id, "lease_token": t.lease_token} for t in held])
    page.get_by_test_id("refresh").click()
    page.wait_for_function(
        "q => { const c = document.querySelector("
        "`tr[data-testid=\"limits-row\"][data-queue=\"${q}\"] td[data-col=\"max_leased\"]`);"
        " return c && c.textContent === '2 / 5'; }", arg=limited)
