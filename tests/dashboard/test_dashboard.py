"""The /dashboard page in headless Chromium against the local API: it loads, shows what was
enqueued, groups by queue, highlights long-running tasks, sends a bearer token, and its
replay buttons empty the dead letters."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from tests.support.local_api import QueueNames
from tierq.client import Client
from tierq.dal.warm_tier import PairKeys, claim_prefix

pytestmark = pytest.mark.browser
NO_VALUE = "\u2013"  # what the page shows for "none" (an en dash)


def open_dashboard(page: Any, api_url: str) -> None:
    page.goto(f"{api_url}/dashboard")
    page.wait_for_function(
        "document.getElementById('status').textContent.startsWith('updated')")


def row(page: Any, queue: str, tenant: str | None = None) -> Any:
    selector = f'tr[data-testid="count-row"][data-queue="{queue}"]'
    if tenant is not None:
        selector += f'[data-tenant="{tenant}"]'
    return page.locator(selector)


def cells(locator: Any) -> dict[str, str]:
    return locator.evaluate(
        "tr => Object.fromEntries([...tr.querySelectorAll('td[data-col]')]"
        ".map(td => [td.dataset.col, td.textContent.trim()]))")


def make_dead(api: Client, queue: str, n: int) -> list[str]:
    ids = [str(o.id) for o in api.enqueue(queue, [{"payload": {"n": i}} for i in range(n)])]
    claimed = api.claim(queue, max=n)
    api.nack(queue, [{"id": t.id, "lease_token": t.lease_token, "error": f"boom {t.id}",
                      "dead": True} for t in claimed])
    return ids


def test_the_page_shows_the_counts_and_groups_by_queue(page: Any, api: Client, api_url: str,
                                                       names: QueueNames) -> None:
    emails, reports = names["emails"], names["reports"]
    api.enqueue(emails, [{"payload": i, "tenant": "acme"} for i in range(3)])
    api.enqueue(emails, [{"payload": i, "tenant": "globex", "delay_seconds": 600}
                         for i in range(2)])
    api.put_queue(reports, {"warm_max": 2})
    api.enqueue(reports, [{"payload": i} for i in range(5)])
    open_dashboard(page, api_url)

    acme = cells(row(page, emails, "acme"))
    assert {k: acme[k] for k in ("tenant", "mode", "warm", "cold", "delayed", "leased",
                                 "dead", "total")} == {
        "tenant": "acme", "mode": "warm", "warm": "3", "cold": "0", "delayed": "0",
        "leased": "0", "dead": "0", "total": "3"}
    assert acme["oldest"] != NO_VALUE
    globex = cells(row(page, emails, "globex"))
    assert (globex["warm"], globex["delayed"], globex["oldest"]) == ("0", "2", NO_VALUE)
    overflow = cells(row(page, reports, "_"))
    assert (overflow["mode"], overflow["warm"], overflow["cold"]) == ("cold", "2", "3")

    page.get_by_test_id("group-by-queue").check()
    assert row(page, emails).count() == 1
    grouped = cells(row(page, emails))
    assert (grouped["tenant"], grouped["warm"], grouped["delayed"], grouped["total"]) == (
        "2 tenants", "3", "2", "5")
    assert cells(row(page, reports))["mode"] == "cold"
    page.reload()
    page.wait_for_function(
        "document.getElementById('status').textContent.startsWith('updated')")
    assert page.get_by_test_id("group-by-queue").is_checked()  # remembered
    assert row(page, emails).count() == 1
    page.get_by_test_id("group-by-queue").uncheck()
    assert row(page, emails).count() == 2


def test_the_page_follows_new_work_on_its_own(page: Any, api: Client, api_url: str,
                                              names: QueueNames) -> None:
    queue = names["later"]
    api.enqueue_one(queue, 1)
    open_dashboard(page, api_url)
    assert cells(row(page, queue, "_"))["warm"] == "1"
    api.enqueue(queue, [{"payload": i} for i in range(4)])
    # the page polls every 5 seconds
    page.wait_for_function(
        f"""() => {{
            const td = document.querySelector(
                'tr[data-queue="{queue}"][data-tenant="_"] td[data-col="warm"]');
            return td && td.textContent.trim() === "5";
        }}""", timeout=12_000)


def test_running_tasks_panel_highlights_tasks_over_five_minutes(
        page: Any, api: Client, api_url: str, names: QueueNames, valkey_url: str) -> None:
    queue = names["busy"]
    api.enqueue(queue, [{"payload": i} for i in range(2)])
    [long_task] = api.claim(queue, max=1, worker="worker-7", lease_seconds=3600)
    [short_task] = api.claim(queue, max=1, worker="worker-7", lease_seconds=3600)
    # the long one's claim was made six minutes ago, as its claim record and the pair's
    # index of lease starts say
    store = redis.Redis.from_url(valkey_url)
    try:
        keys = PairKeys.of(queue, "_")
        prefix = claim_prefix(long_task.lease_token)
        started, worker = store.hget(keys.claims, prefix).decode().split("|", 1)
        earlier = int(started) - 6 * 60 * 1000
        store.hset(keys.claims, prefix, f"{earlier}|{worker}")
        store.zadd(keys.started, {str(long_task.id): earlier})
    finally:
        store.close()
    open_dashboard(page, api_url)
    panel = page.get_by_test_id("running-panel")
    assert panel.get_attribute("open") is None  # collapsed by default
    assert page.get_by_test_id("running-summary").text_content() == (
        "Running tasks (2) · 1 over 5 min")
    page.get_by_test_id("running-summary").click()
    assert panel.get_attribute("open") is not None
    long_row = page.locator(f'tr[data-testid="running-row"][data-task="{long_task.id}"]')
    short_row = page.locator(f'tr[data-testid="running-row"][data-task="{short_task.id}"]')
    assert long_row.get_attribute("class") == "long-running"
    assert short_row.get_attribute("class") is None
    assert "worker-7" in long_row.text_content()
    assert "6m" in long_row.text_content()


def test_replay_empties_the_dead_letters(page: Any, api: Client, api_url: str,
                                         names: QueueNames) -> None:
    queue = names["payments"]
    api.enqueue_one(names["other"], 1)  # another queue, without dead letters
    ids = make_dead(api, queue, 3)
    open_dashboard(page, api_url)
    select = page.get_by_test_id("dlq-queue")
    assert select.input_value() == queue  # the queue with dead letters is chosen
    rows = page.get_by_test_id("dlq-row")
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.task)")) == sorted(ids)
    assert f"boom {ids[0]}" in page.locator(f'tr[data-task="{ids[0]}"]').text_content()
    link = page.locator(f'tr[data-task="{ids[0]}"] a').get_attribute("href")
    shown = page.request.get(f"{api_url}{link}" if link.startswith("/") else link)
    assert (shown.status, shown.json()["id"], shown.json()["state"]) == (200, ids[0], "dead")

    page.locator(f'tr[data-task="{ids[0]}"]').get_by_test_id("dlq-replay").click()
    page.wait_for_function("document.querySelectorAll('[data-testid=dlq-row]').length === 2")
    assert "replayed 1" in page.get_by_test_id("dlq-message").text_content()
    assert api.get_task(queue, ids[0]).state == "warm"

    page.get_by_test_id("dlq-replay-all").click()
    page.get_by_test_id("dlq-empty").wait_for(state="visible")
    assert page.get_by_test_id("dlq-row").count() == 0
    assert page.get_by_test_id("dlq-replay-all").is_disabled()
    assert api.dlq_list(queue).tasks == []
    assert {api.get_task(queue, i).state for i in ids} == {"warm"}
    assert cells(row(page, queue, "_"))["dead"] == "0"


def test_a_bearer_token_is_kept_and_sent(page: Any, api: Client, api_url: str) -> None:
    seen: list[str | None] = []
    page.on("request", lambda request: seen.append(request.headers.get("authorization"))
            if "/v1/" in request.url else None)
    open_dashboard(page, api_url)
    assert seen and all(header is None for header in seen)
    page.get_by_test_id("token").fill("eyJ.test.token")
    page.get_by_test_id("token").dispatch_event("change")
    seen.clear()
    page.reload()
    open_dashboard(page, api_url)
    assert page.get_by_test_id("token").input_value() == "eyJ.test.token"
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert seen and all(header == "Bearer eyJ.test.token" for header in seen)


def test_a_waiting_task_shows_what_it_waits_for(page: Any, api: Client, api_url: str,
                                                 names: QueueNames) -> None:
    queue = names["flow"]
    first, second = api.enqueue(queue, [{"payload": 1}, {"payload": 2}])
    [child] = api.enqueue(queue, [{"payload": 3, "after": [first.id, second.id]}])
    [task] = api.claim(queue)
    assert task.id == first.id
    api.ack(queue, [{"id": task.id, "lease_token": task.lease_token}])  # kept: a child waits
    open_dashboard(page, api_url)
    counted = cells(row(page, queue, "_"))
    assert (counted["warm"], counted["waiting"], counted["total"]) == ("1", "1", "2")
    page.get_by_test_id("task-queue").fill(queue)
    page.get_by_test_id("task-id").fill(str(child.id))
    page.get_by_test_id("task-id").press("Enter")
    page.wait_for_function(
        "document.querySelectorAll('[data-testid=task-parent]').length === 2")
    assert page.get_by_test_id("task-summary").text_content() == "waiting for 1 of 2 parent(s)"
    states = page.get_by_test_id("task-parent").evaluate_all(
        "rs => rs.map(r => [r.dataset.task, r.querySelector('[data-col=state]').textContent])")
    assert states == [[str(first.id), "done"], [str(second.id), "not finished"]]


def test_groups_show_in_counts_running_tasks_dead_letters_and_lookup(
        page: Any, api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["grouped"]
    made = api.enqueue(queue, [{"payload": i, "group": g} for g in ("x", "y") for i in range(3)]
                       + [{"payload": "free"}])
    [leased] = api.claim(queue)  # x's head
    assert leased.group == "x"
    dead_queue = names["grouped-dead"]
    [dead_id] = make_dead_in_group(api, dead_queue, "g")
    open_dashboard(page, api_url)
    counted = cells(row(page, queue, "_"))
    assert (counted["warm"], counted["leased"], counted["held"], counted["groups"],
            counted["total"]) == ("2", "1", "4", "2", "7")
    assert counted["oldest-head"] != "\u2013"  # (an age, not the en dash of none)
    page.get_by_test_id("running-panel").locator("summary").click()
    running = page.locator(f'tr[data-testid="running-row"][data-task="{leased.id}"]')
    assert running.locator('[data-col="group"]').text_content() == "x"
    assert page.get_by_test_id("dlq-queue").input_value() == dead_queue
    dead_row = page.locator(f'tr[data-testid="dlq-row"][data-task="{dead_id}"]')
    assert dead_row.locator('[data-col="group"]').text_content() == "g"
    page.get_by_test_id("task-queue").fill(queue)
    page.get_by_test_id("task-id").fill(str(made[1].id))
    page.get_by_test_id("task-id").press("Enter")
    page.wait_for_function(
        "document.getElementById('task-summary').textContent.includes('group')")
    assert page.get_by_test_id("task-summary").text_content() == "held · group x"


def make_dead_in_group(api: Client, queue: str, group: str) -> list[str]:
    """One task of ``group`` dead-lettered; its id."""
    [made] = api.enqueue(queue, [{"payload": 1, "group": group}])
    [claimed] = api.claim(queue)
    api.nack(queue, [{"id": claimed.id, "lease_token": claimed.lease_token, "dead": True}])
    return [str(made.id)]


def test_progress_shows_in_running_tasks_and_lookup(page: Any, api: Client, api_url: str,
                                                    names: QueueNames) -> None:
    queue = names["progress"]
    [made] = api.enqueue(queue, [{"payload": 1}])
    [task] = api.claim(queue)
    api.heartbeat(queue, [{"id": task.id, "lease_token": task.lease_token,
                           "progress": {"rows": 1200}}])
    open_dashboard(page, api_url)
    page.get_by_test_id("running-panel").locator("summary").click()
    running = page.locator(f'tr[data-testid="running-row"][data-task="{made.id}"]')
    cell = running.locator('[data-col="progress"]')
    assert cell.text_content().startswith('{"rows":1200} (')
    assert cell.get_attribute("title").startswith("at ")
    page.get_by_test_id("task-queue").fill(queue)
    page.get_by_test_id("task-id").fill(str(made.id))
    page.get_by_test_id("task-id").press("Enter")
    page.wait_for_function(
        "document.getElementById('task-summary').textContent.includes('progress')")
    assert page.get_by_test_id("task-summary").text_content().startswith(
        'leased · progress {"rows":1200} (')


def test_a_task_is_cancelled_from_the_running_panel_and_the_lookup(
        page: Any, api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["cancelled"]
    running, waiting = api.enqueue(queue, [{"payload": 1}, {"payload": 2,
                                                            "timeout_seconds": 30}])
    [leased] = api.claim(queue)
    assert leased.id == running.id
    open_dashboard(page, api_url)
    page.get_by_test_id("running-panel").locator("summary").click()
    row = page.locator(f'tr[data-testid="running-row"][data-task="{leased.id}"]')
    row.get_by_test_id("running-cancel").click()
    page.wait_for_function(
        "document.querySelectorAll('[data-testid=running-row]').length === 0")
    assert api.get_task(queue, running.id).state == "cancelled"
    page.get_by_test_id("task-queue").fill(queue)
    page.get_by_test_id("task-id").fill(str(waiting.id))
    page.get_by_test_id("task-id").press("Enter")
    page.wait_for_function(
        "document.getElementById('task-summary').textContent.includes('limit')")
    assert page.get_by_test_id("task-summary").text_content() == "warm · limit 30s"
    page.get_by_test_id("task-cancel").click()
    page.wait_for_function(
        "document.getElementById('task-summary').textContent.startsWith('cancelled')")
    assert page.get_by_test_id("task-cancel").is_hidden()
    assert api.get_task(queue, waiting.id).state == "cancelled"


def test_the_lookup_shows_the_trace_a_task_was_enqueued_in(
        page: Any, api: Client, api_url: str, names: QueueNames) -> None:
    queue = names["traced"]
    traceparent = "00-" + "4bf92f3577b34da6a3ce929d0e0e4736" + "-00f067aa0ba902b7-01"
    [traced] = api.enqueue(queue, [{"payload": 1, "trace": {"traceparent": traceparent}}],
                           propagate=False)
    [plain] = api.enqueue(queue, [{"payload": 2}], propagate=False)
    open_dashboard(page, api_url)
    page.get_by_test_id("task-queue").fill(queue)
    page.get_by_test_id("task-id").fill(str(traced.id))
    page.get_by_test_id("task-id").press("Enter")
    page.wait_for_function(
        "document.getElementById('task-summary').textContent.includes('trace')")
    assert page.get_by_test_id("task-summary").text_content() == (
        "warm · trace 4bf92f3577b34da6a3ce929d0e0e4736")
    page.get_by_test_id("task-id").fill(str(plain.id))
    page.get_by_test_id("task-id").press("Enter")
    page.wait_for_function(
        "document.getElementById('task-summary').textContent === 'warm'")
