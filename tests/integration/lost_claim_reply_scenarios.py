"""A claim whose reply is lost after Valkey ran its script: the connection resets after the
send, and the call layer sends the pop again (dal/direct_calls.py on a single server,
redis-py's cluster client and pipeline on a cluster). The repeat answers the first run's
leases, which the claim gives back through the release path (lua/claim.lua,
logic/claim.py): no lease is left held by nobody, no attempt is counted, each task is
handed out once, and under ``max_leased`` the queue's capacity held is that of the leases
held. Run on a single Valkey (tests/integration/test_lost_claim_reply.py) and on
a three-master cluster (tests/cluster/test_lost_claim_reply_on_cluster.py).

The loss is real: ``LostReplies`` lets the claim's command reach the server, reads its
reply off the wire (so the script has run), then shuts the socket down, and the client's
own read fails as on a reset. Nothing of Valkey or PostgreSQL is replaced."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import drain
from tierq.dal.command_limit import LimitedConnection
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.logic import claim as claim_logic
from tierq.logic import limits
from tierq.models import ClaimedTask

Factory = Callable[..., Tierq]
TENANTS = ("a", "b", "c")


class LostReplies:
    """The replies of some sends that carry the claim script, lost: ``sends`` counts them
    from 1. Each such send reaches the server; at the first read after it, the replies of
    every claim it carried are read and dropped, the socket is shut down, and the read goes
    on (and fails) as the client's own."""

    def __init__(self, sha: str, sends: frozenset[int] = frozenset({1})) -> None:
        self.sha = sha.encode()
        self.sends = sends
        self.sent = 0  # sends that carried the claim script
        self.lost = 0  # sends whose replies were dropped
        self.refused = 0  # of their replies, errors (the script did not run)

    @contextmanager
    def on(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[LostReplies]:
        """Every connection of tierq's engines (``LimitedConnection``) loses the replies
        while the context lasts; the test's own client is another class."""
        real_send = LimitedConnection.send_packed_command
        real_read = LimitedConnection.read_response
        losses = self

        def send(conn: Any, command: Any, check_health: bool = True) -> None:
            packed = command if isinstance(command, bytes) else b"".join(
                part.encode() if isinstance(part, str) else bytes(part) for part in command)
            real_send(conn, command, check_health)
            if losses.sha in packed:
                losses.sent += 1
                if losses.sent in losses.sends:
                    conn.tierq_lose = packed.count(losses.sha)

        def read(conn: Any, *args: Any, **kwargs: Any) -> Any:
            lose = getattr(conn, "tierq_lose", 0)
            if lose:
                conn.tierq_lose = 0
                for _ in range(lose):  # the scripts ran: their replies are on the wire
                    try:
                        real_read(conn, *args, **kwargs)
                    except redis.ResponseError:
                        losses.refused += 1
                conn._sock.shutdown(socket.SHUT_RDWR)
                losses.lost += 1
            return real_read(conn, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(LimitedConnection, "send_packed_command", send)
            patch.setattr(LimitedConnection, "read_response", read)
            yield self


def leased_members(valkey: redis.Redis, queue: str, tenant: str) -> set[str]:
    return {m.decode() for m in valkey.zrange(PairKeys.of(queue, tenant).leased, 0, -1)}


def held(valkey: redis.Redis, queue: str, tenants: tuple[str, ...]) -> set[str]:
    """The leases the pairs of ``tenants`` hold."""
    return set().union(*(leased_members(valkey, queue, t) for t in tenants))


def members_of(tasks: list[ClaimedTask]) -> set[str]:
    return {f"{t.id}|{t.lease_token}" for t in tasks}


def in_line(valkey: redis.Redis, queue: str, tenants: tuple[str, ...]) -> dict[str, int]:
    """The tasks ready in the pairs of ``tenants``, each with the attempts its data in
    Valkey counts (``<attempts>|<json>``)."""
    out: dict[str, int] = {}
    for tenant in tenants:
        k = PairKeys.of(queue, tenant)
        members = [m.decode().rpartition("|")[2] for m in valkey.zrange(k.ready, 0, -1)]
        blobs = valkey.hmget(k.data, members) if members else []
        for task_id, blob in zip(members, blobs, strict=True):
            out[task_id] = int(blob.split(b"|", 1)[0])
    return out


def capacity_held(tq: Tierq, queue: str) -> int:
    """The units of the queue's ``max_leased`` held now."""
    return limits.in_use(tq.ctx, queue, limits.LEASES_POOL)


def enqueued(tq: Tierq, queue: str, tenants: tuple[str, ...], per_tenant: int
             ) -> list[str]:
    """``per_tenant`` tasks of each tenant, at their last attempt (max_attempts 1), with the
    claim script loaded on every master (so a lost reply is of a script that ran)."""
    tq.warm.client.script_load(tq.warm.scripts["claim"].script)
    return [str(o.id) for o in tq.enqueue(queue, [
        {"payload": i, "tenant": tenant, "max_attempts": 1}
        for tenant in tenants for i in range(per_tenant)])]


def assert_none_stranded(tq: Tierq, valkey: redis.Redis, queue: str,
                         tenants: tuple[str, ...], ids: list[str],
                         got: list[ClaimedTask]) -> None:
    """Every lease Valkey holds is one the claim answered (none held by nobody), every other
    task is back in line with no attempt counted, and each task comes once, at its first
    attempt, the claimed first; with the leases' time passed, nothing expires into the
    dead letters."""
    assert held(valkey, queue, tenants) == members_of(got)
    claimed = {str(t.id) for t in got}
    assert in_line(valkey, queue, tenants) == {i: 0 for i in ids if i not in claimed}
    rest = drain(tq, queue, batch=len(ids))
    if got:
        assert tq.ack(queue, got).rejected == []
    every = got + rest
    assert sorted(str(t.id) for t in every) == sorted(ids)
    assert {t.attempt for t in every} == {1} and not any(t.redelivered for t in every)
    tq.ctx.clock.advance(3600)
    tq.run_reaper()
    assert tq.dlq_list(queue) == []


# -- the scenarios --------------------------------------------------------------------------


def one_tenant(tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
               monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim of one tenant (one pop, the single call path): the first run's leases go
    back, and the pop made once more hands the same tasks out, in order."""
    ids = enqueued(tq, "q", ("_",), 3)
    with LostReplies(tq.warm.scripts["claim"].sha).on(monkeypatch) as losses:
        got = tq.claim("q", max=3, tenant="_")
    assert (losses.lost, losses.refused) == (1, 0)
    assert held(valkey, "q", ("_",)) == members_of(got)
    assert [str(t.id) for t in got] == ids
    assert_none_stranded(tq, valkey, "q", ("_",), ids, got)


def several_tenants(tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim over several tenants sends their pops in one pipeline, and the pipeline is
    what is sent again: every pair's first run goes back, each pair is popped once more."""
    ids = enqueued(tq, "q", TENANTS, 2)
    with LostReplies(tq.warm.scripts["claim"].sha).on(monkeypatch) as losses:
        got = tq.claim("q", max=6)
    assert (losses.lost, losses.refused) == (1, 0)
    assert held(valkey, "q", TENANTS) == members_of(got)
    assert sorted(str(t.id) for t in got) == sorted(ids)
    assert_none_stranded(tq, valkey, "q", TENANTS, ids, got)


def under_max_leased(make_tq: Factory, valkey: redis.Redis, pg: psycopg.Connection[Any],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue with ``max_leased`` as big as the claim's three tasks: the lost pop leased
    the claim's whole grant, so the claim answers nothing; the leases go back with their
    units (the release frees them), and the next claim gets every task within the limit."""
    tq = make_tq()
    tq.put_queue("q", {"max_leased": 3})
    ids = enqueued(tq, "q", ("_",), 3)
    with LostReplies(tq.warm.scripts["claim"].sha).on(monkeypatch) as losses:
        got = tq.claim("q", max=3, tenant="_")
    assert (losses.lost, losses.refused) == (1, 0)
    # (the first run leased the claim's whole grant: no unit is left to pop within)
    assert got == [] and held(valkey, "q", ("_",)) == set()
    assert capacity_held(tq, "q") == 0
    got = tq.claim("q", max=3, tenant="_")
    assert [str(t.id) for t in got] == ids
    assert capacity_held(tq, "q") == 3
    assert_none_stranded(tq, valkey, "q", ("_",), ids, got)


def grant_past_the_leases(make_tq: Factory, valkey: redis.Redis,
                          pg: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
                          ) -> None:
    """The claim's grant is bigger than what its lost pop leased (``max_leased`` 10, three
    tasks): the pop made once more leases them within the grant, and the units no lease
    holds go back with the claim's end, so the capacity held is that of the three leases,
    as without the loss."""
    tq = make_tq()
    tq.put_queue("q", {"max_leased": 10})
    ids = enqueued(tq, "q", ("_",), 3)
    with LostReplies(tq.warm.scripts["claim"].sha).on(monkeypatch) as losses:
        got = tq.claim("q", max=10, tenant="_")
    assert (losses.lost, losses.refused) == (1, 0)
    assert [str(t.id) for t in got] == ids
    assert capacity_held(tq, "q") == 3
    assert_none_stranded(tq, valkey, "q", ("_",), ids, got)
    assert capacity_held(tq, "q") == 0


def later_pair_lost(make_tq: Factory, valkey: redis.Redis, pg: psycopg.Connection[Any],
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``max_leased`` the reply of a claim's second pair is lost (tenants a, one task,
    and b, two; the grant of 10 made before it or with the first pair's pop): the pop made
    once more numbers its leases on from the first run's, not past every unit the lost pop
    could have taken, so the capacity held is that of the three leases."""
    tq = make_tq()
    tq.put_queue("q", {"max_leased": 10})
    tq.warm.client.script_load(tq.warm.scripts["claim"].script)
    ids = [str(o.id) for o in tq.enqueue("q", [
        {"payload": i, "tenant": tenant, "max_attempts": 1}
        for i, tenant in enumerate(("a", "b", "b"))])]
    with LostReplies(tq.warm.scripts["claim"].sha, frozenset({2})).on(
            monkeypatch) as losses:
        got = tq.claim("q", max=10)
    assert (losses.lost, losses.refused) == (1, 0)
    assert sorted(str(t.id) for t in got) == sorted(ids)
    assert capacity_held(tq, "q") == 3
    assert_none_stranded(tq, valkey, "q", ("a", "b"), ids, got)
    assert capacity_held(tq, "q") == 0


def past_answer_by(tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The time of a claim with ``answer_by`` runs out while it gives the first run's leases
    back: it pops no more, answers nothing, and the tasks are in line for the next claim."""
    ids = enqueued(tq, "q", ("_",), 3)
    answer_by = time.monotonic() + 1.5
    real_give_back = claim_logic.give_back

    def slow_give_back(*args: Any) -> None:
        real_give_back(*args)
        time.sleep(max(0.0, answer_by - time.monotonic()) + 0.01)

    monkeypatch.setattr(claim_logic, "give_back", slow_give_back)
    with LostReplies(tq.warm.scripts["claim"].sha).on(monkeypatch) as losses:
        got = tq.claim("q", max=3, tenant="_", answer_by=answer_by)
    # (the first send and the call layer's second: no pop after the time ran out)
    assert (losses.sent, losses.lost, losses.refused, got) == (2, 1, 0, [])
    assert_none_stranded(tq, valkey, "q", ("_",), ids, [])


def pipelined_lost_twice(tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """In a claim over several tenants, the pipeline's reply is lost, then that of the first
    pair's pop made once more: that pair answers nothing, as a pop lost twice in a row
    does (no third pop), and the other pairs answer theirs."""
    ids = enqueued(tq, "q", TENANTS, 2)
    with LostReplies(tq.warm.scripts["claim"].sha, frozenset({1, 3})).on(
            monkeypatch) as losses:
        got = tq.claim("q", max=6)
    assert (losses.lost, losses.refused) == (2, 0)
    assert held(valkey, "q", TENANTS) == members_of(got)
    # (the two other pairs' tasks; the first pair's, in line, are claimed next)
    assert len(got) == 4 and len({t.tenant for t in got}) == 2
    assert_none_stranded(tq, valkey, "q", TENANTS, ids, got)


def lost_twice(tq: Tierq, valkey: redis.Redis, pg: psycopg.Connection[Any],
               monkeypatch: pytest.MonkeyPatch) -> None:
    """The pop made once more loses its reply too (the first send of each pop is lost, the
    call layer's second answers the repeat): both runs' leases go back and the claim
    answers nothing; the tasks are in line for the next claim."""
    ids = enqueued(tq, "q", ("_",), 3)
    with LostReplies(tq.warm.scripts["claim"].sha, frozenset({1, 3})).on(
            monkeypatch) as losses:
        got = tq.claim("q", max=3, tenant="_")
    assert (losses.lost, losses.refused, got) == (2, 0, [])
    assert held(valkey, "q", ("_",)) == set()
    assert_none_stranded(tq, valkey, "q", ("_",), ids, [])
