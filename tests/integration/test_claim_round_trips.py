"""A claim's Valkey round trips, counted on the wire (bench/enqueue_round_trips.py's
``Wire``): a claim naming no tenant reads a window of the ready-tenant index, then sends the
first pass's pops of every tenant in one pipeline (logic/claim.py ``_claim_pairs``), with
the shares, the byte cap and the queue-wide limits as a pop at a time gives them."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.enqueue_round_trips import Wire
from tests.integration.helpers import counted_sends
from tierq.core.sizing import body_cost
from tierq.engine import Tierq
from tierq.logic.claim_budget import TASK_FIELDS_COST

QUEUE = "rt"
TENANTS = [f"t{i}" for i in range(10)]


def ready(tq: Tierq, per_tenant: int, payload: object = 1) -> None:
    tq.put_queue(QUEUE, {})
    tq.enqueue(QUEUE, [{"payload": payload, "tenant": t} for t in TENANTS
                       for _ in range(per_tenant)])


def counted(tq: Tierq, **claim: object) -> tuple[list, Wire]:
    with counted_sends(tq) as wire:
        got = tq.claim(QUEUE, **claim)
    return got, wire


def test_a_claim_of_ten_tenants_is_two_round_trips(tq: Tierq):
    """The index's window, then the ten pops in one pipeline (eleven round trips a pop at
    a time); each tenant gets its share of ten. The next claim rotates over the window it
    kept (logic/ready_tenants.py ``claim_window``): the pipeline alone. A byte cap adds one
    round trip."""
    ready(tq, 40)
    tq.claim(QUEUE, max=10, tenant=TENANTS[0])  # (not counted: it loads the script)
    got, wire = counted(tq, max=100)
    assert len(got) == 100
    assert Counter(t.tenant for t in got) == dict.fromkeys(TENANTS, 10)
    assert wire.commands["claim"] == 10
    assert wire.sends == 2, (wire.sends, dict(wire.commands))
    assert wire.commands["ZRANGE"] >= 1
    assert len({t.lease_token for t in got}) == 100
    assert len(tq.running(QUEUE)) == 110
    got, wire = counted(tq, max=100)
    assert len(got) == 100 and Counter(t.tenant for t in got) == dict.fromkeys(TENANTS, 10)
    assert wire.sends == 1 and wire.commands["ZRANGE"] == 0, (wire.sends, dict(wire.commands))
    # under a byte cap the rotation's first tenant pops alone first: one round trip more
    got, wire = counted(tq, max=100, max_bytes=10**7)
    assert len(got) == 100 and Counter(t.tenant for t in got) == dict.fromkeys(TENANTS, 10)
    assert wire.sends == 2, (wire.sends, dict(wire.commands))


def test_the_tenants_short_of_their_share_leave_the_rest_to_those_with_more(tq: Tierq):
    """Tenants with fewer tasks than their share give what they have; the second pass takes
    the rest from the others, a pop at a time, as without the pipeline."""
    tq.put_queue(QUEUE, {})
    tq.enqueue(QUEUE, [{"payload": 1, "tenant": t} for i, t in enumerate(TENANTS)
                       for _ in range(3 if i % 2 else 30)])
    tq.warm.client.script_load(tq.warm.scripts["claim"].script)  # (run alone: not counted)
    got, wire = counted(tq, max=100)
    assert len(got) == 100
    shares = Counter(t.tenant for t in got)
    assert all(shares[t] == 3 for t in TENANTS[1::2])
    assert sum(shares[t] for t in TENANTS[::2]) == 85
    assert all(shares[t] >= 10 for t in TENANTS[::2])
    assert wire.sends <= 2 + 5 + 5  # (the window, the pipeline, then a pass a tenant)


def test_a_byte_cap_holds_over_the_pipelined_pops(tq: Tierq):
    """Each pipelined pop costs at most its part of the cap; the claim as a whole stays
    within it and the second pass fills what the parts left."""
    ready(tq, 20, payload="x" * 1000)
    one = tq.claim(QUEUE, max=1, tenant=TENANTS[0])[0]
    cost = body_cost(one.model_dump_json().encode()) + 1
    assert cost <= TASK_FIELDS_COST + 1100
    cap = 37 * (TASK_FIELDS_COST + 1100)
    got, _ = counted(tq, max=100, max_bytes=cap)
    spent = sum(body_cost(t.model_dump_json().encode()) + 1 for t in got)
    assert 30 <= len(got) <= 37 and spent <= cap
    shares = Counter(t.tenant for t in got)
    assert len(shares) == 10 and min(shares.values()) >= 3


def test_a_task_over_every_part_still_comes_first(tq: Tierq):
    """Tasks each over its part of the cap: no pipelined pop takes one, and the second
    pass's first pop brings the first task whatever it costs, as a claim always does."""
    ready(tq, 2, payload="y" * 20_000)
    got, _ = counted(tq, max=20, max_bytes=30_000)
    assert len(got) == 1
    assert len(tq.claim(QUEUE, max=20)) == 19


def test_a_tenant_whose_tasks_pass_every_part_is_not_starved_under_a_byte_cap(tq: Tierq):
    """Under a byte cap the rotation's first tenant pops alone, its first task whatever it
    costs: a tenant whose tasks each cost more than a pipelined pop's part (half the cap
    here) gets one when its turn comes, though another's smaller tasks would fill the cap."""
    cap = 100_000
    tq.put_queue(QUEUE, {})
    small = "x" * (9_000 - TASK_FIELDS_COST - 200)  # five fit a half, ten the cap
    tq.enqueue(QUEUE, [{"payload": "y" * 60_000, "tenant": "big"} for _ in range(3)]
               + [{"payload": small, "tenant": "small"} for _ in range(100)])
    got: Counter[str] = Counter()
    for _ in range(6):  # (the turn alternates between the two tenants)
        tasks, _ = counted(tq, max=10, max_bytes=cap)
        assert sum(body_cost(t.model_dump_json().encode()) + 1 for t in tasks) <= cap
        got.update(t.tenant for t in tasks)
    assert got["big"] == 3, got


def test_the_first_tenant_refilled_inline_stays_within_its_part(make_tq):
    """The rotation's first tenant, popped alone under a byte cap, refills inline when its
    warm set is dry while cold work waits; its pop after the refill stays within its part
    of the cap, so the others still get theirs in the same claim."""
    tq = make_tq(warm_max=10)
    tq.put_queue(QUEUE, {})
    task = "x" * (9_000 - TASK_FIELDS_COST - 200)  # ten fit the cap
    first = tq.enqueue(QUEUE, [{"payload": task, "tenant": "a"} for _ in range(20)])
    for done in first[:10]:
        tq.cancel(QUEUE, done.id)  # a: its warm set empty, ten cold behind it
    tq.enqueue(QUEUE, [{"payload": task, "tenant": t} for t in ("b", "c") for _ in range(10)])
    for _ in range(3):  # (each tenant first once)
        got = tq.claim(QUEUE, max=30, max_bytes=90_000)
        assert sum(body_cost(t.model_dump_json().encode()) + 1 for t in got) <= 90_000
        assert len({t.tenant for t in got}) > 1, Counter(t.tenant for t in got)


def test_a_queue_wide_limit_pops_a_pair_at_a_time_within_its_grant(tq: Tierq):
    """Under ``max_leased`` the take rides with the first pop, and each pop stays within
    what the pops before it left: no pipeline, and never more than the limit."""
    tq.put_queue(QUEUE, {"max_leased": 25})
    tq.enqueue(QUEUE, [{"payload": 1, "tenant": t} for t in TENANTS for _ in range(30)])
    tq.warm.client.script_load(tq.warm.scripts["claim"].script)  # (run alone: not counted)
    got, wire = counted(tq, max=100)
    assert len(got) == 25
    # (shares of three: eight pops of three, one of one, each its own round trip)
    assert wire.commands["claim"] == 9 and wire.sends >= 1 + 9, dict(wire.commands)
    assert tq.claim(QUEUE, max=100) == []


def test_the_tenant_limits_cut_each_pipelined_pop_in_its_script(tq: Tierq):
    """``tenant_max_leased`` is checked by each pair's script in the pipeline: three each,
    still two round trips, and the claim says when more may be had."""
    tq.put_queue(QUEUE, {"tenant_max_leased": 3})
    tq.enqueue(QUEUE, [{"payload": 1, "tenant": t} for t in TENANTS for _ in range(30)])
    tq.claim(QUEUE, max=1, tenant=TENANTS[0])  # (not counted: it loads the script)
    with counted_sends(tq) as wire:
        outcome = tq.claim_outcome(QUEUE, max=100)
    assert Counter(t.tenant for t in outcome.tasks) == {
        t: 2 if t == TENANTS[0] else 3 for t in TENANTS}
    assert outcome.retry_after_ms is not None and outcome.retry_after_ms > 0
    assert wire.sends == 2, (wire.sends, dict(wire.commands))


def test_a_script_valkey_lost_is_loaded_and_every_pop_made(tq: Tierq, valkey):
    ready(tq, 10)
    tq.claim(QUEUE, max=1, tenant=TENANTS[0])
    valkey.script_flush()
    got = tq.claim(QUEUE, max=100)
    assert len(got) == 99 and len({t.id for t in got}) == 99
    assert len(tq.running(QUEUE)) == 100


def test_a_claim_with_time_limits_costs_no_round_trip_more(tq: Tierq):
    """Tasks with a time limit (the queue's ``timeout_seconds``, or their own) get it in the
    claim script itself: one round trip for one pair, two for ten tenants, as without
    limits; every lease ends at its limit, as the claim reports it."""
    tq.put_queue(QUEUE, {"timeout_seconds": 30})
    tq.enqueue(QUEUE, [{"payload": 1, "tenant": t, "timeout_seconds": 5 if i % 2 else None}
                       for t in TENANTS for i in range(30)])
    tq.claim(QUEUE, max=1, tenant=TENANTS[0])  # (not counted: it loads the script)
    got, wire = counted(tq, max=10, tenant=TENANTS[1], lease_seconds=600)
    assert len(got) == 10 and wire.sends == 1, (wire.sends, dict(wire.commands))
    got, wire = counted(tq, max=100, lease_seconds=600)
    assert len(got) == 100 and wire.sends == 2, (wire.sends, dict(wire.commands))
    assert wire.commands["claim"] == 10
    for task in got:
        limit = task.timeout_seconds
        assert limit in (5, 30)
        held = tq.ctx.warm.lease_limits(QUEUE, task.tenant,
                                        [f"{task.id}|{task.lease_token}"])[0]
        assert held is not None
        assert task.lease_expires_at.timestamp() * 1000 == pytest.approx(held, abs=1)
