"""A schedule nobody claims from (workers down, queue paused) gains occurrences every tick:
its view lists only the soonest of them, bounded in SQL, with the count of all of them, so
every schedule route stays inside Lambda's 6 MB response limit as the runtime encodes it."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.handlers.support import Invoke
from tierq.core import sizing
from tierq.models.schedules import MIN_INSTALLED_SHOWN

LIMIT = sizing.LAMBDA_PAYLOAD_LIMIT  # 6,000,000
PILED_UP = 45_000


def pile_up_occurrences(pg: psycopg.Connection[Any], tenant: str, name: str, queue: str,
                        count: int) -> list[str]:
    """``count`` live occurrences of schedule (tenant, name), as ticks with nobody claiming
    would have left them: delayed keyed tasks and their ledger rows, an hour apart from a
    day ahead. Returns their keys, soonest first."""
    config_hash = pg.execute("SELECT config_hash FROM tierq_schedules "
                             "WHERE tenant = %s AND name = %s", (tenant, name)).fetchone()[0]
    start_ms = 4_102_444_800_000  # 2100-01-01, after anything the PUT installed
    pg.execute(
        """
        WITH v AS (
            SELECT gen_random_uuid() AS id, %(start)s::bigint + g::bigint * 3600000 AS fire_at_ms
            FROM generate_series(0, %(count)s - 1) AS g
        ), tasks AS (
            INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,
                                     run_at_initially, max_attempts, seq, created_at,
                                     state_since)
            SELECT id, %(queue)s, %(tenant)s,
                   %(name)s || '/' || %(hash)s || '/' || fire_at_ms, 0, '{}'::jsonb,
                   'delayed', to_timestamp(fire_at_ms / 1000.0),
                   to_timestamp(fire_at_ms / 1000.0), 3, nextval('tierq_task_seq'), now(),
                   now()
            FROM v
        )
        INSERT INTO tierq_schedule_occurrences (schedule, config_hash, fire_at_ms, task_id,
                                                queue, tenant)
        SELECT %(name)s, %(hash)s, fire_at_ms, id, %(queue)s, %(tenant)s FROM v
        """,
        {"start": start_ms, "count": count, "queue": queue, "tenant": tenant, "name": name,
         "hash": config_hash})
    pg.commit()
    return [f"{name}/{config_hash}/{start_ms + i * 3_600_000}" for i in range(count)]


def test_a_schedule_with_tens_of_thousands_of_live_occurrences_fits_every_route(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    body = {"queue": "reports", "payload": {"report": "daily"}, "every_seconds": 3600,
            "horizon": 4}
    created = call("PUT", "/v1/schedules/nightly", {**body, "tenant": "acme"})
    assert created.status == 200, created.body
    already = created.body["installed_count"]
    assert already == len(created.body["installed"]) >= 4
    piled = pile_up_occurrences(pg, "acme", "nightly", "reports", PILED_UP)
    total = already + PILED_UP
    shown = max(4, MIN_INSTALLED_SHOWN)

    pinned = {"sub": "worker", "tenant": "acme"}
    one = call("GET", "/v1/schedules/nightly", query={"tenant": "acme"})
    one_pinned = call("GET", "/v1/schedules/nightly", claims=pinned)
    listed = call("GET", "/v1/schedules", query={"tenant": "acme"})
    listed_all = call("GET", "/v1/schedules")
    listed_pinned = call("GET", "/v1/schedules", claims=pinned)
    replaced = call("PUT", "/v1/schedules/nightly", {**body, "tenant": "acme"})
    views = [one.body, one_pinned.body, listed.body["schedules"][0],
             listed_all.body["schedules"][0], listed_pinned.body["schedules"][0],
             replaced.body]
    for reply in (one, one_pinned, listed, listed_all, listed_pinned, replaced):
        assert reply.status == 200, reply.body
        assert sizing.runtime_encoded_size(reply.raw) <= LIMIT
    for view in views:
        assert view["installed_count"] == total
        # the soonest ones, in order: those the PUT installed, then the piled-up ones
        keys = [o["key"] for o in view["installed"]]
        assert len(keys) == shown
        assert keys[already:] == piled[:shown - already]
        assert [o["at"] for o in view["installed"]] == sorted(o["at"] for o in view["installed"])

    removed = call("DELETE", "/v1/schedules/nightly", query={"tenant": "acme"})
    assert removed.status == 200, removed.body
    assert sizing.runtime_encoded_size(removed.raw) <= LIMIT
    assert removed.body["removed_occurrences"] == total


def test_installed_count_is_per_schedule_and_zero_without_occurrences(
        call: Invoke, pg: psycopg.Connection[Any]) -> None:
    common = {"queue": "reports", "payload": {}, "every_seconds": 3600, "horizon": 30}
    assert call("PUT", "/v1/schedules/a", common).status == 200
    assert call("PUT", "/v1/schedules/b", common).status == 200
    assert call("PUT", "/v1/schedules/off", {**common, "enabled": False}).status == 200
    pile_up_occurrences(pg, "_", "a", "reports", 500)
    views = {v["name"]: v for v in call("GET", "/v1/schedules").body["schedules"]}
    installed_b = views["b"]["installed_count"]
    assert installed_b >= 30 and len(views["b"]["installed"]) == min(installed_b, 30)
    assert views["a"]["installed_count"] == installed_b + 500
    assert len(views["a"]["installed"]) == 30  # the horizon, above the minimum shown
    assert views["off"]["installed_count"] == 0 and views["off"]["installed"] == []
