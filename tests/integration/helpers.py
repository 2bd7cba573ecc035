"""Small helpers shared by the engine's integration tests."""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl

import orjson
import psycopg
import redis

from bench.enqueue_round_trips import Wire
from tests.support.every_task import EVERY_TASK
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.models import ClaimedTask


def drain(tq: Tierq, queue: str, *, batch: int = 50, **claim: Any) -> list[ClaimedTask]:
    """Claim and ack until nothing is left; returns the tasks in claim order."""
    out: list[ClaimedTask] = []
    while True:
        got = tq.claim(queue, max=batch, **claim)
        if not got:
            return out
        out.extend(got)
        result = tq.ack(queue, [{"id": t.id, "lease_token": t.lease_token} for t in got])
        assert not result.rejected, result.rejected


def ready_size(valkey: redis.Redis, queue: str, tenant: str = "_") -> int:
    return int(valkey.zcard(PairKeys.of(queue, tenant).ready))


def mode_of(valkey: redis.Redis, queue: str, tenant: str = "_") -> str | None:
    raw = valkey.hget(PairKeys.of(queue, tenant).meta, "mode")
    return None if raw is None else raw.decode()


def count_state(pg: psycopg.Connection[Any], queue: str, state: str) -> int:
    """Tasks of ``queue`` in ``state``, rows and batch members alike (``EVERY_TASK``)."""
    row = pg.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = %s AND state = %s",
                     (queue, state)).fetchone()
    assert row is not None
    return int(row[0])


def count_rows(pg: psycopg.Connection[Any], queue: str | None = None) -> int:
    """Tasks PostgreSQL holds (of ``queue``), rows and batch members alike."""
    if queue is None:
        row = pg.execute(f"SELECT count(*) FROM {EVERY_TASK}").fetchone()
    else:
        row = pg.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = %s",
                         (queue,)).fetchone()
    assert row is not None
    return int(row[0])


# One delivery as a claimer process records it: (task id, attempt, claimed at, lease expiry)
Delivery = tuple[str, int, float, float]


def assert_each_delivered_once(deliveries: Sequence[Delivery], acked: Sequence[str],
                               ids: Sequence[str]) -> None:
    """No task handed to two workers while its lease was valid, none handed out twice at
    all (the claimers' leases are long), and every task acked exactly once."""
    per_task = Counter(d[0] for d in deliveries)
    doubles = [i for i, n in per_task.items() if n > 1]
    for task_id in doubles:  # a second delivery is only allowed after the first lease ended
        times = sorted((d[2], d[3]) for d in deliveries if d[0] == task_id)
        for (_, first_expiry), (second_at, _) in itertools.pairwise(times):
            assert second_at >= first_expiry, f"{task_id} handed out twice within a lease"
    assert doubles == []
    assert Counter(acked) == Counter(ids)


def http_event(method: str, target: str, body: Any = None,
               claims: dict[str, str] | None = None) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event for ``target`` (a path with its query)."""
    path, _, query = target.partition("?")
    context: dict[str, Any] = {
        "accountId": "123456789012", "apiId": "local", "domainName": "localhost",
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                 "sourceIp": "127.0.0.1", "userAgent": "pytest"},
        "requestId": "test", "routeKey": "$default", "stage": "$default",
        "time": "01/May/2026:09:00:00 +0000", "timeEpoch": 0,
    }
    # without claims given: an admin's token (see tierq.aws.http.access)
    context["authorizer"] = {"jwt": {"claims": claims if claims is not None
                                     else {"scope": "tierq/admin"}, "scopes": []}}
    event = {
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": query,
        "headers": {"content-type": "application/json"}, "requestContext": context,
        "body": None if body is None else orjson.dumps(body).decode(),
        "isBase64Encoded": False,
    }
    if query:
        event["queryStringParameters"] = dict(parse_qsl(query))
    return event


@contextlib.contextmanager
def counted_sends(tq: Any) -> Iterator[Wire]:
    """Valkey's round trips and commands (scripts by name) while the block runs
    (``bench.enqueue_round_trips.Wire``)."""
    wire = Wire()
    wire.names = {s.sha.encode(): name for name, s in tq.ctx.warm.scripts.items()}
    with wire.installed():
        wire.on = True
        try:
            yield wire
        finally:
            wire.on = False
