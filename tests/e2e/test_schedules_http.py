"""Cron schedules over real HTTP against ``tierq dev``: the local stack's own cron_tick and
delayed mover install and fire occurrences (keyed delayed tasks ``name/config_hash/epoch_ms``)
that workers claim like any task; a config change replaces the pending ones; bad input is a
422 naming the field and writes nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest

pytestmark = pytest.mark.e2e

ACME = {"x-tierq-jwt-claims": '{"tenant": "acme"}'}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


LEASE_SECONDS = 60


def claim_and_ack(http: httpx.Client, queue: str) -> list[dict[str, Any]]:
    response = http.post(f"/v1/queues/{queue}/claims",
                         json={"max": 10, "wait_seconds": 1, "lease_seconds": LEASE_SECONDS})
    assert response.status_code == 200, response.text
    tasks = response.json()["tasks"]
    if tasks:
        acked = http.post(f"/v1/queues/{queue}/acks", json={"acks": [
            {"id": t["id"], "lease_token": t["lease_token"]} for t in tasks]})
        assert acked.status_code == 200 and len(acked.json()["acked"]) == len(tasks)
    return tasks


def collect(http: httpx.Client, queue: str, until: Callable[[list[dict[str, Any]]], bool],
            what: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Claim and ack until ``until(everything claimed so far)`` holds."""
    claimed: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        claimed.extend(claim_and_ack(http, queue))
        if until(claimed):
            return claimed
    raise AssertionError(f"not within {timeout}s: {what}; claimed {claimed}")


def fired_at_ms(task: dict[str, Any]) -> int:
    return int(task["key"].rsplit("/", 1)[1])


def claimed_at_ms(task: dict[str, Any]) -> int:
    expires = datetime.fromisoformat(task["lease_expires_at"].replace("Z", "+00:00"))
    return int(expires.timestamp() * 1000) - LEASE_SECONDS * 1000


def future_occurrences(pg: psycopg.Connection[Any], queue: str, key_prefix: str) -> int:
    """Occurrences still waiting for a time more than a second ahead (one due right now may
    be in the delayed mover's hands at that moment; the next tick withdraws it)."""
    row = pg.execute(
        "SELECT count(*) FROM tierq_tasks WHERE queue = %s AND key LIKE %s "
        "AND state = 'delayed' AND run_at > now() + interval '1 second'",
        (queue, key_prefix + "%")).fetchone()
    assert row is not None
    return int(row[0])


def test_schedule_fires_through_the_local_stack(http: httpx.Client, queue: str,
                                                 pg: psycopg.Connection[Any]) -> None:
    name = unique("every-second")
    put = http.put(f"/v1/schedules/{name}",
                   json={"queue": queue, "payload": {"v": 1}, "every_seconds": 1})
    assert put.status_code == 200, put.text
    schedule = put.json()
    assert len(schedule["next_occurrences"]) == 4
    assert len(schedule["installed"]) >= 4  # the lookahead covers the next ticks too
    assert all(o["key"].startswith(f"{name}/{schedule['config_hash']}/")
               for o in schedule["installed"])

    # the stack's delayed mover makes each occurrence ready at its time; workers claim them
    fired = collect(http, queue, lambda got: len(got) >= 3, "three occurrences claimed")
    keys = [t["key"] for t in fired]
    assert len(keys) == len(set(keys))
    assert [fired_at_ms(t) for t in fired] == sorted(fired_at_ms(t) for t in fired)
    assert {t["payload"]["v"] for t in fired} == {1}
    assert all(claimed_at_ms(t) >= fired_at_ms(t) for t in fired)  # never before its time
    # the stack's cron_tick keeps installing ahead as time passes
    listed = http.get("/v1/schedules").json()["schedules"]
    assert [s["name"] for s in listed] == [name]
    assert listed[0]["next_occurrences"][0] > schedule["next_occurrences"][0]
    assert max(o["at"] for o in listed[0]["installed"]) > \
        max(o["at"] for o in schedule["installed"])

    # a new payload is a new config: pending old occurrences go, new ones fire
    changed = http.put(f"/v1/schedules/{name}",
                       json={"queue": queue, "payload": {"v": 2}, "every_seconds": 1})
    assert changed.status_code == 200
    new_hash = changed.json()["config_hash"]
    assert new_hash != schedule["config_hash"]
    assert future_occurrences(pg, queue, f"{name}/{schedule['config_hash']}/") == 0
    assert future_occurrences(pg, queue, f"{name}/{new_hash}/") >= 4
    later = collect(http, queue, lambda got: any(t["payload"]["v"] == 2 for t in got),
                    "an occurrence of the new config claimed")
    first_new = next(i for i, t in enumerate(later) if t["payload"]["v"] == 2)
    assert all(t["key"].split("/")[1] == new_hash for t in later[first_new:])

    removed = http.delete(f"/v1/schedules/{name}")
    assert removed.status_code == 200 and removed.json()["name"] == name
    assert http.get(f"/v1/schedules/{name}").status_code == 404
    assert future_occurrences(pg, queue, f"{name}/") == 0


def test_disabled_schedule_installs_nothing(http: httpx.Client, queue: str,
                                            pg: psycopg.Connection[Any]) -> None:
    name = unique("off")
    put = http.put(f"/v1/schedules/{name}", json={
        "queue": queue, "payload": None, "daily": ["02:30", "14:00"],
        "timezone": "Europe/Berlin", "enabled": False})
    assert put.status_code == 200, put.text
    assert (put.json()["next_occurrences"], put.json()["installed"]) == ([], [])
    time.sleep(1.5)  # a few of the stack's cron ticks
    assert pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s",
                      (queue,)).fetchone() == (0,)
    on = http.put(f"/v1/schedules/{name}", json={
        "queue": queue, "payload": None, "daily": ["02:30", "14:00"],
        "timezone": "Europe/Berlin"})
    assert [o["at"] for o in on.json()["installed"]] == on.json()["next_occurrences"]


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"cron": "61 * * * *"}, "cron", "'61 * * * *' is not a valid cron expression"),
    ({"cron": "0 0 30 2 *"}, "cron", "never matches"),
    ({"every_seconds": 0.5}, "every_seconds", "at least 1 second"),
    ({"daily": ["2:30"]}, "daily", "'2:30' is not a time of day"),
    ({"daily": ["02:30"], "timezone": "Mars/Olympus"}, "timezone", "IANA"),
    ({"cron": "* * * * *", "daily": ["02:30"]}, "body", "exactly one of"),
])
def test_bad_schedules_are_422_naming_the_field(http: httpx.Client, queue: str,
                                                 pg: psycopg.Connection[Any],
                                                 body: dict[str, Any], field: str,
                                                 words: str) -> None:
    name = unique("bad")
    response = http.put(f"/v1/schedules/{name}", json={"queue": queue, "payload": 1, **body})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert field in [d["field"] for d in error["details"]]
    assert words in error["message"]
    assert http.get(f"/v1/schedules/{name}").status_code == 404
    assert pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s",
                      (queue,)).fetchone() == (0,)


def test_schedule_routes_errors_and_tenant_pinning(http: httpx.Client, queue: str) -> None:
    assert http.get("/v1/schedules/no-such-schedule").status_code == 404
    assert http.delete("/v1/schedules/no-such-schedule").status_code == 404
    bad_name = http.put("/v1/schedules/" + "x" * 65,
                        json={"queue": queue, "payload": 1, "every_seconds": 60})
    assert bad_name.status_code == 422
    assert bad_name.json()["error"]["details"][0]["field"] == "name"
    not_json = http.put("/v1/schedules/plain", content=b"every minute",
                        headers={"content-type": "application/json"})
    assert not_json.status_code == 400

    mine, theirs = unique("mine"), unique("theirs")
    body = {"queue": queue, "payload": 1, "every_seconds": 3600}
    assert http.put(f"/v1/schedules/{mine}", json=body, headers=ACME).json()["tenant"] == "acme"
    assert http.put(f"/v1/schedules/{theirs}", json={**body, "tenant": "other"}) \
        .status_code == 200
    other = http.put(f"/v1/schedules/{unique('x')}", json={**body, "tenant": "other"},
                     headers=ACME)
    assert other.status_code == 403
    assert [s["name"] for s in http.get("/v1/schedules", headers=ACME).json()["schedules"]] \
        == [mine]
    assert http.get(f"/v1/schedules/{theirs}", headers=ACME).status_code == 404
    assert http.delete(f"/v1/schedules/{theirs}", headers=ACME).status_code == 404
    assert http.delete(f"/v1/schedules/{mine}", headers=ACME).status_code == 200
