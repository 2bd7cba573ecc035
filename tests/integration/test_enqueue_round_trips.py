"""Valkey round trips of an enqueue batch (issue 29), counted on the wire: the requests
this process's connections send to the real server. The tenant's entry in its queue's
ready-tenant index goes with the push (logic/ready_tenants.py), and a line that grows past
its allotment takes its grant before its push (logic/tenant_budget.py)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from tests.support.every_task import EVERY_TASK
from tierq.dal.warm_tier import PairKeys, QueueKeys
from tierq.engine import Tierq

MiB = 1 << 20
INDEX = QueueKeys.ready_tenants("q")


class Wire:
    """The requests this thread sent while counting: how many, and the scripts they ran by
    name (another thread's, a background job's or one a test left, are not the enqueue's)."""

    def __init__(self, tq: Tierq) -> None:
        self.thread = threading.get_ident()
        self.names = {script.sha.encode(): name for name, script in tq.ctx.warm.scripts.items()}
        self.sends = 0
        self.scripts: Counter[str] = Counter()

    def count(self, command: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        self.sends += 1
        data = command if isinstance(command, bytes) else b"".join(bytes(p) for p in command)
        for sha in data.split(b"EVALSHA\r\n$40\r\n")[1:]:
            self.scripts[self.names.get(sha[:40], "?")] += 1
        if b"EVALSHA" not in data:
            self.scripts[data.split(b"\r\n")[2].decode()] += 1


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Tierq], Wire]]:
    counting: list[Wire] = []
    send = AbstractConnection.send_packed_command

    def counted(conn: Any, command: Any, check_health: bool = True) -> None:
        for w in counting:
            w.count(command)
        send(conn, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)

    def start(tq: Tierq) -> Wire:
        counting.clear()
        counting.append(Wire(tq))
        return counting[0]

    yield start
    counting.clear()


def batch(n: int, tenant: str = "a") -> list[dict[str, Any]]:
    return [{"payload": {"n": i, "pad": "x" * 40}, "tenant": tenant} for i in range(n)]


def test_the_index_note_costs_no_round_trip_of_its_own(
        tq: Tierq, valkey: redis.Redis, wire: Callable[[Tierq], Wire]) -> None:
    if tq.ctx.warm.calls is None:
        pytest.skip("a cluster keeps the index in another slot: its note is a call of its own")
    tq.enqueue("q", batch(10))  # scripts loaded, the pair's mode known
    assert tq.ack("q", tq.claim("q", max=10)).acked
    valkey.delete(INDEX)
    # into an empty line: the push and the tenant's entry, in one round trip
    into_empty = wire(tq)
    tq.enqueue("q", batch(500))
    # into a line with work: the same round trips
    into_work = wire(tq)
    tq.enqueue("q", batch(500))
    wire(tq)  # (the checks below are not counted)
    assert [t.decode() for t in valkey.zrange(INDEX, 0, -1)] == ["a"]
    assert into_empty.scripts["push_ready"] == into_empty.scripts["ready_tenants_note"] == 1
    # (the two went in one request; every other command in one of its own)
    assert into_empty.sends == sum(into_empty.scripts.values()) - 1
    assert into_work.sends == into_empty.sends
    assert into_work.scripts["push_ready"] == 1


def test_a_growing_line_takes_its_grant_before_its_push(
        make_tq: Callable[..., Tierq], wire: Callable[[Tierq], Wire]) -> None:
    """Nothing claims: every batch passes what the pair kept beyond its usage (``keep``,
    64 KiB under a bound of 1 MiB). After the first, each takes its grant first and pushes
    once, with no 'ask' that comes back short."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    for _ in range(2):  # the first pushes of the pair ask, into an empty line then not
        tq.enqueue("q", batch(100))
    for _ in range(3):
        counted = wire(tq)
        out = tq.enqueue("q", batch(100))
        wire(tq)
        assert {o.state for o in out} == {"warm"}
        assert counted.scripts["push_ready"] == 1
        assert counted.scripts["warm_ledger"] == 1
    stats = tq.ctx.warm.pair_usage("q", "a", charge=640)
    assert stats[0] <= stats[1] <= tq.ctx.warm.ledger_total("a") <= MiB


def test_the_pairs_of_a_batch_push_in_one_round_trip(
        tq: Tierq, valkey: redis.Redis, wire: Callable[[Tierq], Wire]) -> None:
    """A batch over several tenants sends its pairs' pushes (each with its tenant's note)
    in one request, as many as a batch of one tenant sends; each pair's tasks are pushed
    in order and its tenant entered in the index."""
    if tq.ctx.warm.calls is None:
        pytest.skip("a cluster sends each pair's push on its own")
    tenants = ["a", "b", "c"]
    tq.enqueue("q", batch(10, "z"))  # scripts loaded
    for tenant in tenants:  # the pairs' modes known
        tq.enqueue("q", batch(10, tenant))
    one = wire(tq)
    tq.enqueue("q", batch(30, "z"))
    several = wire(tq)
    out = tq.enqueue("q", [task for tenant in tenants for task in batch(30, tenant)])
    wire(tq)  # (the checks below are not counted)
    assert {o.state for o in out} == {"warm"}
    assert several.scripts["push_ready"] == several.scripts["ready_tenants_note"] == 3
    assert several.sends == one.sends
    assert sorted(t.decode() for t in valkey.zrange(INDEX, 0, -1)) == ["a", "b", "c", "z"]
    for tenant in tenants:
        got = tq.claim("q", max=100, tenant=tenant)
        assert [t.payload["n"] for t in got] == list(range(10)) + list(range(30))


def test_a_pair_whose_push_fails_leaves_the_others_pushed_or_cold(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: Any) -> None:
    """One pair's push fails (a key of the wrong type) after the batch's pushes were sent
    together: the error rises as before, and every other pair's outcome is still read,
    its refused rows marked cold, so none is left warm in PostgreSQL and absent from
    Valkey."""
    tq = make_tq(warm_max=5)
    if tq.ctx.warm.calls is None:
        pytest.skip("a cluster sends each pair's push on its own, and stops at the error")
    tq.enqueue("q", batch(1, "a"))
    tq.enqueue("q", batch(1, "b"))
    valkey.set(PairKeys.of("q", "a").gone, "not a sorted set")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        tq.enqueue("q", batch(3, "a") + batch(10, "b"))
    warm_b = pg.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = 'q'"
                        " AND tenant = 'b' AND state = 'warm'").fetchone()[0]
    assert warm_b == valkey.zcard(PairKeys.of("q", "b").ready) == 5
    assert pg.execute(f"SELECT count(*) FROM {EVERY_TASK} WHERE queue = 'q' AND tenant = 'b'"
                      " AND state = 'cold'").fetchone()[0] == 6
