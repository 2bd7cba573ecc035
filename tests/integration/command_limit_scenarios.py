"""ElastiCache Serverless refuses a command of more than 3,999 arguments; the local Redis
takes any. The engine's client refuses such a command before sending it
(dal/command_limit.py), on every way a command leaves it — so every test of the suite runs
under the check — and every call that grows with its input is chunked to stay under it.
Run on a single Valkey (tests/integration/test_command_limit.py) and on a cluster
(tests/cluster/test_command_limit_on_cluster.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tierq.core.ordering import place
from tierq.dal.command_limit import MAX_COMMAND_ARGS, CommandTooLong
from tierq.dal.warm_tier import lease_member
from tierq.engine import Tierq
from tierq.logic import admission, limits
from tierq.logic.admission import Ticket
from tierq.logic.context import to_datetime

MANY = 5000  # items in one call, more than one command may carry


def members(n: int) -> list[str]:
    return [f"m{i}" for i in range(n)]


def client_refuses_long_commands(tq: Tierq, valkey: Any) -> None:
    """At the limit a command goes; one argument more is refused, nothing sent, whether as
    a command, in a pipeline, through the warm tier's own calls or as a script."""
    warm = tq.ctx.warm
    at_limit = members(MAX_COMMAND_ARGS - 2)  # SADD, the key, the members
    assert warm.client.execute_command("SADD", "tq:{limit}:ok", *at_limit) == len(at_limit)
    over = members(MAX_COMMAND_ARGS - 1)
    with pytest.raises(CommandTooLong, match="3999"):
        warm.client.execute_command("SADD", "tq:{limit}:over", *over)
    pipe = warm.client.pipeline(transaction=False)
    pipe.execute_command("SADD", "tq:{limit}:over", *over)
    with pytest.raises(CommandTooLong):
        pipe.execute()
    with pytest.raises(CommandTooLong):
        warm.pipeline([("SADD", "tq:{limit}:over", *over)])
    with pytest.raises(CommandTooLong):
        warm.run_script(warm.scripts["admission_end"], ["tq:{limit}:over"], over)
    assert valkey.exists("tq:{limit}:over") == 0


def large_calls_stay_under_the_limit(make_tq: Any, pg: Any) -> None:
    """Calls of the warm tier that take many ids, members, tokens or tenants: each is sent
    in parts within the limit (a part too long would raise CommandTooLong here)."""
    tq = make_tq(warm_max=2 * MANY, lease_seconds=600)
    tq.put_queue("big", {"max_leased": 4 * MANY})
    warm = tq.ctx.warm
    for start in range(0, MANY, 500):
        tq.enqueue("big", [{"payload": start + i} for i in range(500)])
    held = []
    while len(held) < MANY:
        got = tq.claim("big", max=500)
        assert got
        held += got
    ids = [str(t.id) for t in held]
    # each task's place in line: its row's, or its batch row's while it is a member there
    line = {str(i): (p, s) for i, p, s in pg.execute(
        "SELECT id, priority, seq FROM tierq_tasks WHERE queue = 'big'").fetchall()}
    line.update((m.id, (m.priority, m.seq))
                for m in tq.ctx.store.batch_members(ids, None) if m.ended is None)
    places = [place(*line[i], i) for i in ids]  # their ready-set members
    tokens = [t.lease_token for t in held]
    member_list = [lease_member(i, t) for i, t in zip(ids, tokens, strict=True)]
    now_ms = int(tq.ctx.now() * 1000)
    assert all(warm.verify("big", "_", now_ms=now_ms, members=member_list))
    assert warm.index_leases("big", "_")  # (what a reconciler's first visit does)
    assert warm.missing("big", "_", ids, fence_ms=0) == []
    assert len(tq.heartbeat("big", [{"id": t.id, "lease_token": t.lease_token}
                                    for t in held]).extended) == MANY
    assert len(warm.take_back("big", "_", now_ms=now_ms, members=member_list[:MANY // 2])) \
        == MANY // 2
    rows = tq.ctx.store.release_leased("big", to_datetime(tq.ctx.now()), ids[:MANY // 2],
                                       ["_"] * (MANY // 2), [t.attempt for t in held[:MANY // 2]])
    items = [admission.row_push_item(r) for r in rows]
    ticket = Ticket(token="big-restore", since_ms=now_ms)
    assert admission.dispatch(tq.ctx, ticket, {("big", "_"): items}, kind="restore") == set()
    assert warm.update_ready("big", "_", items, warm_max_bytes=1 << 40).found == len(items)
    assert len(warm.remove_ready("big", "_", [at for _, at, _ in items])) == MANY // 2
    acked = tq.ack("big", held[MANY // 2:])
    assert len(acked.acked) == MANY - MANY // 2
    warm.return_capacity("big", limits.LEASES_POOL, tokens[:MANY // 2], tokens=True)
    assert warm.capacity_use("big", limits.LEASES_POOL, now_ms=now_ms)[0] == 0
    assert warm.remove("big", "_", places) == 0
    warm.throughput.record("big", {f"t{i}": (1, 0) for i in range(MANY)})
    assert {f"t{i}" for i in range(MANY)} <= set(warm.throughput.noted_tenants("big"))
