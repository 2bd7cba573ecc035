"""The operations of the engines' contract (tierq.contract) that the sharded engine lacked,
run the same way on one database and over three shards, with the same answers: dead-letter
replays and purges, a queue's purge, throughput, running leases, counts per pair, the list
of schedules and the maintenance runs (one result type: each shard's summary and their
total)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.shards.conftest import ShardedFactory
from tests.support.stores import TierqFactory
from tierq.contract import Deployment
from tierq.logic.context import OffsetClock
from tierq.maintenance.cold_to_warm import ColdToWarmSummary
from tierq.maintenance.cron_tick import CronTickSummary
from tierq.maintenance.delayed_mover import DelayedMoverSummary
from tierq.maintenance.reaper import ReaperSummary

TENANTS = [f"t{i}" for i in range(12)]
Make = Callable[..., Deployment]


@pytest.fixture(params=["one database", "three shards"])
def make(request: pytest.FixtureRequest) -> Make:
    """An engine of either kind (keyword arguments: settings by field name)."""
    if request.param == "one database":
        make_tq: TierqFactory = request.getfixturevalue("make_tq")
        return make_tq
    make_sharded: ShardedFactory = request.getfixturevalue("make_sharded")
    return make_sharded


def spread(tq: Deployment, queue: str) -> None:
    """Every shard holds some of TENANTS' pairs of ``queue`` (so each operation below works
    over every shard)."""
    homes = {id(tq.engine_of(queue, tenant, create=False)) for tenant in TENANTS}
    assert homes == {id(engine) for engine in tq.engines.values()}


def enqueue_each(tq: Deployment, queue: str, **fields: object) -> list[str]:
    outcomes = tq.enqueue(queue, [{"payload": t, "tenant": t, **fields} for t in TENANTS])
    assert [o.outcome for o in outcomes] == ["created"] * len(TENANTS)
    return [str(o.id) for o in outcomes]


def kill_all(tq: Deployment, queue: str) -> None:
    claimed = tq.claim(queue, max=len(TENANTS))
    assert len(claimed) == len(TENANTS)
    result = tq.nack(queue, [{"id": c.id, "lease_token": c.lease_token, "dead": True}
                             for c in claimed])
    assert len(result.dead) == len(TENANTS)


def test_dead_letters_are_replayed_and_purged_by_id_and_all(make: Make) -> None:
    tq = make()
    ids = enqueue_each(tq, "q")
    spread(tq, "q")
    kill_all(tq, "q")
    assert len(tq.dlq_list("q")) == len(TENANTS)
    unknown = str(uuid.uuid4())
    some = [ids[0], ids[5], ids[10]]
    replayed, skipped = tq.dlq_replay("q", ids=[*some, unknown])
    assert sorted(map(str, replayed)) == sorted(some)
    assert [str(i) for i in skipped] == [unknown]
    replayed, skipped = tq.dlq_replay("q", all_dead=True)
    assert sorted(map(str, replayed)) == sorted(set(ids) - set(some)) and skipped == []
    assert tq.dlq_list("q") == []

    kill_all(tq, "q")
    purged = tq.dlq_purge("q", ids=[ids[1], ids[7], unknown])
    assert sorted(map(str, purged)) == sorted([ids[1], ids[7]])
    rest = tq.dlq_purge("q", all_dead=True)
    assert sorted(map(str, rest)) == sorted(set(ids) - {ids[1], ids[7]})
    assert tq.dlq_list("q") == [] and tq.dlq_purge("q", all_dead=True) == []


def test_a_queue_is_purged_on_every_shard(make: Make) -> None:
    tq = make()
    enqueue_each(tq, "q")
    enqueue_each(tq, "q", delay_seconds=60)
    enqueue_each(tq, "other")
    spread(tq, "q")
    assert len(tq.claim("q", max=5)) == 5
    assert tq.purge_queue("q") == 2 * len(TENANTS)
    assert tq.get_queue("q").counts.model_dump() == {
        "warm": 0, "waiting": 0, "held": 0, "cold": 0, "delayed": 0, "leased": 0, "dead": 0}
    assert tq.claim("q", max=50) == []
    assert tq.get_queue("other").counts.warm + tq.get_queue("other").counts.cold \
        == len(TENANTS)


def test_throughput_counts_every_tenant_once(make: Make) -> None:
    tq = make()
    enqueue_each(tq, "q")
    spread(tq, "q")
    claimed = tq.claim("q", max=4)
    assert not tq.ack("q", claimed).rejected
    whole = tq.throughput("q")
    assert (whole.enqueued_total, whole.acked_total) == (len(TENANTS), 4)
    one = tq.throughput("q", claimed[0].tenant)
    assert (one.tenant, one.enqueued_total, one.acked_total) == (claimed[0].tenant, 1, 1)


def test_running_lists_every_lease_oldest_first(make: Make) -> None:
    clock = OffsetClock()
    tq = make(clock=clock)
    enqueue_each(tq, "q")
    enqueue_each(tq, "other")
    spread(tq, "q")
    order = [TENANTS[i] for i in (7, 2, 11, 0, 5, 9)]
    claimed = []
    for tenant in order:  # each a second after the one before
        claimed += tq.claim("q", tenant=tenant, max=1, worker=f"w-{tenant}")
        clock.advance(1)
    claimed += tq.claim("other", tenant=TENANTS[3], max=1)
    running = tq.running("q")
    assert [lease.tenant for lease in running] == order
    assert [lease.id for lease in running] == [c.id for c in claimed[:len(order)]]
    assert running[0].worker == f"w-{order[0]}"
    assert len(tq.running()) == len(order) + 1


def test_detailed_counts_are_one_row_per_pair_in_order(make: Make) -> None:
    tq = make()
    enqueue_each(tq, "q")
    enqueue_each(tq, "q")
    enqueue_each(tq, "a")
    spread(tq, "q")
    leased = tq.claim("q", tenant=TENANTS[4], max=1)
    assert leased
    rows = tq.detailed_counts()
    assert [(r.queue, r.tenant) for r in rows] == \
        [("a", t) for t in sorted(TENANTS)] + [("q", t) for t in sorted(TENANTS)]
    by_pair = {(r.queue, r.tenant): r for r in rows}
    assert all(r.warm + r.cold == 1 for r in rows if r.queue == "a")
    four = by_pair[("q", TENANTS[4])]
    assert (four.warm + four.cold, four.leased) == (1, 1)


def test_schedules_are_listed_in_tenant_and_name_order(make: Make) -> None:
    tq = make()
    for tenant in TENANTS:
        tq.put_schedule("nightly", {"queue": "cron", "tenant": tenant, "cron": "0 3 * * *",
                                    "payload": {}})
    tq.put_schedule("hourly", {"queue": "cron", "tenant": TENANTS[2], "cron": "@hourly",
                               "payload": {}})
    spread(tq, "cron")  # (a schedule lives on its pair's home)
    listed = [(s.tenant, s.name) for s in tq.list_schedules()]
    assert listed == sorted([(t, "nightly") for t in TENANTS] + [(TENANTS[2], "hourly")])
    assert [s.name for s in tq.list_schedules(TENANTS[2])] == ["hourly", "nightly"]
    assert tq.list_schedules("nobody") == []


def test_a_maintenance_run_is_each_shards_summary_and_their_total(make: Make) -> None:
    clock = OffsetClock()
    tq = make(clock=clock)
    enqueue_each(tq, "q", delay_seconds=30)
    spread(tq, "q")
    clock.advance(31)
    run = tq.run_job("delayed_mover")
    assert set(run.by_shard) == set(tq.engines) and not run.down
    assert isinstance(run.total, DelayedMoverSummary)
    assert run.total.moved == len(TENANTS) == sum(s.moved for s in run.answered.values())
    assert run.summary() == run.total
    assert isinstance(tq.run_delayed_mover(), DelayedMoverSummary)
    assert tq.run_delayed_mover().moved == 0
    assert isinstance(tq.run_cold_to_warm(), ColdToWarmSummary)
    assert isinstance(tq.run_reaper(), ReaperSummary)
    tq.put_schedule("s", {"queue": "cron", "tenant": TENANTS[1], "every_seconds": 60,
                          "payload": {}})
    assert isinstance(tq.run_cron_tick(), CronTickSummary)
    claimed = tq.claim("q", max=len(TENANTS))
    assert len(claimed) == len(TENANTS)


def test_an_ack_that_claims_the_next_tasks(make: Make):
    """``ack_and_claim``: on one database in one call (logic/ack_claim.py), over shards the
    ack on the items' homes and then the claim over the shards; the same answer."""
    tq = make()
    tq.put_queue("ac", {})
    tq.enqueue("ac", [{"payload": i, "tenant": t} for t in TENANTS[:4] for i in range(2)])
    got = tq.claim("ac", max=4)
    answer = tq.ack_and_claim("ac", got, max=4)
    assert sorted(answer.acked) == sorted(t.id for t in got)
    assert answer.rejected == [] and answer.claim_error is None
    assert len(answer.tasks) == 4 and not {t.id for t in answer.tasks} & set(answer.acked)
    last = tq.ack_and_claim("ac", answer.tasks, max=4)
    assert len(last.acked) == 4 and last.tasks == []
