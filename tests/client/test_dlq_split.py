"""Replaying or purging more dead letters than one request may name (the API takes at most
1000 ids): the client sends them 1000 at a time, each replay request with its own
idempotency key reused on its retries, and merges the answers."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from tests.client.scripted_server import Reply, ScriptedServer
from tests.support.local_api import QueueNames
from tierq.aws.http.models import MAX_IDS as API_MAX_IDS
from tierq.client import Client, RetryPolicy
from tierq.client.http import MAX_IDS


def seed_dead(pg: psycopg.Connection[Any], queue: str, count: int) -> list[str]:
    """``count`` dead letters of (queue, '_'), written by SQL; their ids."""
    ids = [str(uuid.uuid4()) for _ in range(count)]
    pg.execute("INSERT INTO tierq_queue_tenants (queue, tenant) VALUES (%s, '_') "
               "ON CONFLICT DO NOTHING", (queue,))
    pg.execute(
        """
        INSERT INTO tierq_tasks (id, queue, tenant, priority, payload, state, run_at,
                                 run_at_initially, attempts, max_attempts, seq, created_at,
                                 state_since, finished_at, last_error)
        SELECT id, %s, '_', 0, '{}'::jsonb, 'dead', now(), now(), 1, 1,
               nextval('tierq_task_seq'), now(), now(), now(), 'boom'
        FROM unnest(%s::uuid[]) AS id
        """, (queue, ids))
    pg.commit()
    return ids


def states(pg: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    rows = pg.execute("SELECT state, count(*) FROM tierq_tasks WHERE queue = %s "
                      "GROUP BY state", (queue,)).fetchall()
    pg.commit()
    return {state: count for state, count in rows}


def test_the_client_limit_is_the_apis() -> None:
    assert MAX_IDS == API_MAX_IDS == 1000


def test_replaying_2500_dead_letters_by_id_replays_them_all(
        api: Client, pg: psycopg.Connection[Any], names: QueueNames) -> None:
    queue = names["dlq"]
    ids = seed_dead(pg, queue, 2_500)
    result = api.dlq_replay(queue, ids)
    assert sorted(map(str, result.replayed)) == sorted(ids) and result.skipped == []
    assert states(pg, queue).get("dead", 0) == 0
    assert sum(states(pg, queue).values()) == 2_500


def test_purging_2100_dead_letters_by_id_purges_them_all(
        api: Client, pg: psycopg.Connection[Any], names: QueueNames) -> None:
    queue = names["dlq"]
    ids = seed_dead(pg, queue, 2_100)
    kept = seed_dead(pg, queue, 3)
    result = api.dlq_purge(queue, ids)
    assert sorted(map(str, result.purged)) == sorted(ids)
    assert states(pg, queue) == {"dead": len(kept)}


def test_each_slice_has_its_own_key_reused_on_its_retries(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    ids = [str(uuid.uuid4()) for _ in range(2_001)]
    slices = [ids[:1000], ids[1000:2000], ids[2000:]]
    scripted.script(
        Reply(200, {"replayed": slices[0], "skipped": [], "more": False}),
        Reply(503, {"error": {"code": "unavailable", "message": "busy", "details": []}},
              headers={"Retry-After": "0"}),
        Reply(200, {"replayed": slices[1][:-1], "skipped": slices[1][-1:], "more": False}),
        Reply(200, {"replayed": slices[2], "skipped": [], "more": False}),
    )
    client = client_class(scripted.url, retry=RetryPolicy(max_retries=2), timeout=5)
    client._sleep = lambda seconds: None
    with client:
        result = client.dlq_replay("jobs", ids)
    assert [str(i) for i in result.replayed] == ids[:1999] + ids[2000:]
    assert [str(i) for i in result.skipped] == [ids[1999]]
    sent = scripted.received
    assert [r.json()["ids"] for r in sent] == [slices[0], slices[1], slices[1], slices[2]]
    keys = [r.headers["idempotency-key"] for r in sent]
    assert keys[1] == keys[2]  # the retry of the second slice
    assert len({keys[0], keys[1], keys[3]}) == 3  # each slice its own


def test_purge_slices_are_at_most_1000_ids(
        scripted: ScriptedServer, client_class: type[Client]) -> None:
    ids = [str(uuid.uuid4()) for _ in range(1_001)]
    scripted.script(Reply(200, {"purged": ids[:1000], "more": False}),
                    Reply(200, {"purged": ids[1000:], "more": False}))
    with client_class(scripted.url, retry=RetryPolicy(max_retries=0), timeout=5) as client:
        result = client.dlq_purge("jobs", ids)
    assert [str(i) for i in result.purged] == ids
    assert [len(r.json()["ids"]) for r in scripted.received] == [1000, 1]
    assert all((r.method, r.path) == ("POST", "/v1/queues/jobs/dlq/purge")
               for r in scripted.received)
