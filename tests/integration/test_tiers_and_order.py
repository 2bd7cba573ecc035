"""Invariants 3 and 4: bounded warm set, hysteresis, and enqueue order across both tiers."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import orjson
import pytest

from tests.integration.helpers import count_state, drain, mode_of, ready_size
from tierq.core import hysteresis
from tierq.dal.warm_tier import PairKeys
from tierq.logic import tiering
from tierq.logic.context import to_ms


@pytest.mark.slow
def test_burst_above_warm_max_keeps_order_within_each_priority(make_tq, valkey, pg):
    """warm_max = 50, 5,000 tasks across priorities: the warm set never exceeds 50; within
    each priority, claims follow enqueue order across both tiers; the queue returns to warm
    mode only after the cold backlog drained."""
    tq = make_tq(warm_max=50)
    rng = random.Random(7)
    enqueued: dict[int, list[int]] = defaultdict(list)
    n = 0
    claimed: list[tuple[int, int]] = []
    returned_to_warm_with_cold = 0
    while n < 5000 or (claimed and len(claimed) < 5000):
        if n < 5000:
            batch = []
            for _ in range(100):
                p = rng.choice([0, 3, 9])
                batch.append({"payload": {"n": n, "p": p}, "priority": p})
                enqueued[p].append(n)
                n += 1
            tq.enqueue("burst", batch)
            assert ready_size(valkey, "burst") <= 50
        got = tq.claim("burst", max=rng.randint(1, 40))
        assert ready_size(valkey, "burst") <= 50
        claimed.extend((t.payload["p"], t.payload["n"]) for t in got)
        tq.ack("burst", [{"id": t.id, "lease_token": t.lease_token} for t in got])
        if rng.random() < 0.2:
            tq.run_cold_to_warm()
            assert ready_size(valkey, "burst") <= 50
        if mode_of(valkey, "burst") == "warm" and count_state(pg, "burst", "cold") > 0:
            returned_to_warm_with_cold += 1
        if not got and n >= 5000:
            break
    claimed.extend((t.payload["p"], t.payload["n"]) for t in drain(tq, "burst"))
    assert len(claimed) == 5000
    per_priority: dict[int, list[int]] = defaultdict(list)
    for p, i in claimed:
        per_priority[p].append(i)
    for p, order in per_priority.items():
        assert order == enqueued[p], f"priority {p} out of enqueue order"
    assert returned_to_warm_with_cold == 0
    assert count_state(pg, "burst", "cold") == 0
    tq.run_cold_to_warm()
    assert mode_of(valkey, "burst") == "warm"


def test_queue_goes_cold_at_100_percent_and_stays_cold_until_80_percent_and_drained(
        make_tq, valkey, pg):
    tq = make_tq(warm_max=10)
    out = tq.enqueue("h", [{"payload": i} for i in range(15)])
    assert [o.state for o in out] == ["warm"] * 10 + ["cold"] * 5
    assert mode_of(valkey, "h") == "cold"
    # new work while cold goes cold even once there is room (hysteresis)
    got = tq.claim("h", max=3)
    assert [t.payload for t in got] == [0, 1, 2]
    assert tq.enqueue_one("h", 15).state == "cold"
    # 7 ready (70%) < 90%: promotion fills up to warm_max with the oldest cold tasks
    summary = tq.run_cold_to_warm()
    assert summary.promoted == 3 and ready_size(valkey, "h") == 10
    assert mode_of(valkey, "h") == "cold"  # cold rows remain
    for _ in range(2):
        tq.ack("h", [{"id": t.id, "lease_token": t.lease_token} for t in tq.claim("h", max=2)])
    # 8 ready (80%), 3 cold: still cold, promotion tops up
    tq.run_cold_to_warm()
    assert count_state(pg, "h", "cold") == 0 and ready_size(valkey, "h") == 9
    # drained, but 9 ready = 90% > 80%: stays cold until the warm set drops to 80%
    assert not tq.run_cold_to_warm().returned_to_warm
    assert mode_of(valkey, "h") == "cold"
    tq.claim("h", max=1)
    assert tq.run_cold_to_warm().returned_to_warm
    assert mode_of(valkey, "h") == "warm"
    assert tq.enqueue_one("h", 16).state == "warm"


def test_claim_refills_inline_when_warm_is_empty_but_cold_work_waits(make_tq, valkey):
    tq = make_tq(warm_max=5)
    tq.enqueue("r", [{"payload": i} for i in range(12)])
    seen = []
    for _ in range(12):
        got = tq.claim("r", max=1)  # no scheduled tick in between
        assert len(got) == 1, "a claim must never stall while cold work exists"
        seen.append(got[0].payload)
        tq.ack("r", [{"id": got[0].id, "lease_token": got[0].lease_token}])
    assert seen == list(range(12))


@pytest.mark.slow
def test_concurrent_enqueuers_never_overfill_the_warm_set(make_tq, valkey, database_url,
                                                          valkey_url):
    warm_max = 40
    tq = make_tq(warm_max=warm_max)
    tq.enqueue_one("c", "prime")
    stop = threading.Event()
    peak = [0]

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], ready_size(valkey, "c"))

    def produce(k: int) -> None:
        local = make_tq(warm_max=warm_max)
        for b in range(20):
            local.enqueue("c", [{"payload": [k, b, i]} for i in range(10)])

    def consume() -> None:
        local = make_tq(warm_max=warm_max)
        for _ in range(60):
            got = local.claim("c", max=7)
            local.ack("c", [{"id": t.id, "lease_token": t.lease_token} for t in got])
            local.run_cold_to_warm()

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=consume) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    assert peak[0] <= warm_max
    drained = drain(tq, "c")
    # per producer, enqueue order is claim order
    from collections import defaultdict as dd

    by_producer = dd(list)
    for t in drained:
        if isinstance(t.payload, list):
            by_producer[t.payload[0]].append((t.payload[1], t.payload[2]))
    for order in by_producer.values():
        assert order == sorted(order)


def test_hysteresis_thresholds_match_the_pure_functions(make_tq, valkey):
    tq = make_tq(warm_max=20)
    tq.enqueue("t", [{"payload": i} for i in range(30)])
    for _ in range(30):
        ready = ready_size(valkey, "t")
        before = mode_of(valkey, "t")
        summary = tq.run_cold_to_warm()
        if summary.promoted:
            assert hysteresis.may_promote(ready, 20)
        if summary.returned_to_warm:
            assert before == "cold" and ready <= 16
        got = tq.claim("t", max=1)
        if not got:
            break
        tq.ack("t", [{"id": got[0].id, "lease_token": got[0].lease_token}])


@pytest.mark.slow
def test_a_claim_below_the_low_water_mark_refills_one_batch_before_the_set_runs_dry(
        make_tq, valkey):
    from tierq.logic.claim import LOW_WATER_REFILL, low_water

    tq = make_tq(warm_max=5000)
    for start in range(0, 12_000, 500):
        tq.enqueue("big", [{"payload": start + i} for i in range(500)])
    assert ready_size(valkey, "big") == 5000  # 7000 wait cold
    mark = low_water(5000)
    delivered: list[int] = []
    while ready_size(valkey, "big") - 500 >= mark:  # these claims stay above the mark
        got = tq.claim("big", max=500)
        delivered.extend(t.payload for t in got)
        tq.ack("big", [{"id": t.id, "lease_token": t.lease_token} for t in got])
    left_after = ready_size(valkey, "big") - 500
    got = tq.claim("big", max=500)  # leaves fewer than the mark: a small batch comes up now
    assert len(got) == 500
    delivered.extend(t.payload for t in got)
    assert ready_size(valkey, "big") == left_after + LOW_WATER_REFILL
    tq.run_cold_to_warm()  # the scheduled job fills the rest of the room
    assert ready_size(valkey, "big") == 5000
    tq.ack("big", [{"id": t.id, "lease_token": t.lease_token} for t in got])
    delivered.extend(t.payload for t in drain(tq, "big", batch=500))
    assert delivered == list(range(12_000))  # nothing jumped ahead, nothing lost


def test_a_claim_that_finds_the_set_dry_refills_and_takes_the_rest_of_its_batch(
        make_tq, valkey):
    tq = make_tq(warm_max=400)
    for start in (0, 500):  # 400 warm, 600 cold
        tq.enqueue("dry", [{"payload": start + i} for i in range(500)])
    got = tq.claim("dry", max=500)  # takes the 400, refills 400, takes 100 more
    assert [t.payload for t in got] == list(range(500))
    assert ready_size(valkey, "dry") == 300


def test_promotion_pushes_what_an_enqueue_would_have_pushed(make_tq, pg):
    """promote_cold builds each task's blob in SQL and returns its priority and seq; the
    push item made of them must be exactly what logic/admission builds from the same row
    (row_push_item): a claim decodes either."""
    import psycopg
    from psycopg.rows import dict_row

    from tierq.core.ordering import place
    from tierq.dal.store.rows import RestoreRow
    from tierq.logic.admission import row_push_item
    from tierq.logic.context import to_datetime

    tq = make_tq(warm_max=1)
    odd = ['quote " and \\ backslash', "non-ascii é ✓", "del\u007f and /", None, "k"]
    tq.enqueue("p", [{"payload": {"n": i, "text": odd[i % 4] or "", "nested": [1.5, None]},
                      "key": odd[i % len(odd)] and f"{odd[i % len(odd)]}-{i}",
                      "priority": i % 10, "max_attempts": 1 + i} for i in range(40)])
    assert count_state(pg, "p", "cold") == 39
    with pg.transaction(), pg.cursor(row_factory=dict_row) as cur:
        # tasks released from a wait carry their parents in the blob (logic/flows.py)
        cur.execute("""UPDATE tierq_tasks SET parents = %s::jsonb
                       WHERE state = 'cold' AND priority %% 3 = 0""",
                    ('[{"id": "a", "queue": "q", "state": "done", '
                     '"result": {"t": "quote \\" and \\\\ é"}}]',))
        # a grouped task carries its group (logic/groups.py)
        cur.execute("UPDATE tierq_tasks SET grp = %s WHERE state = 'cold' AND priority %% 2 = 0",
                    ('order "7" \\ é',))
        # a task with a time limit of its own carries it (logic/time_limits.py)
        cur.execute("UPDATE tierq_tasks SET timeout_seconds = 30 + priority "
                    "WHERE state = 'cold' AND priority % 4 < 2")
        # a traced task carries its trace context as stored (models/traces.py)
        cur.execute("UPDATE tierq_tasks SET trace = %s WHERE state = 'cold' AND priority %% 5 = 0",
                    (orjson.dumps({"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
                                   "tracestate": 'k=v "q" \\'}).decode(),))
        items = tq.ctx.store.promote_cold(pg, "p", "_", 100, to_datetime(tq.ctx.now()))
        promoted = {r["id"]: RestoreRow(**r) for r in cur.execute(
            "SELECT id::text AS id, key, seq, priority, payload::text AS payload, attempts, "
            "max_attempts, created_at, parents::text AS parents, grp, timeout_seconds, trace "
            "FROM tierq_tasks WHERE state = 'warm'").fetchall()}
        assert sum(1 for r in promoted.values() if r.parents) > 5
        assert sum(1 for r in promoted.values() if r.grp and r.parents) > 2
        assert sum(1 for r in promoted.values() if r.grp and r.trace) > 2
        raise psycopg.Rollback
    assert len(items) == 39
    for row in items:
        assert (row.id, place(row.priority, row.seq, row.id), row.blob.encode()) \
            == row_push_item(promoted[row.id])
    assert count_state(pg, "p", "cold") == 39  # rolled back


def test_promotion_gives_up_a_batch_whose_row_another_writer_holds(make_tq, valkey, pg):
    """promote_cold takes no row locks ahead of its update: while another transaction holds
    one of the oldest cold rows (a task being replaced), the batch gives up after
    PROMOTE_LOCK_TIMEOUT, never deadlocks the writer, and the next pass moves the rows,
    the held one with what the writer committed."""
    import time

    tq = make_tq(warm_max=10)
    tq.enqueue("held", [{"payload": i} for i in range(15)])  # 10 warm, 5 cold
    got = tq.claim("held", max=3)  # 7 left warm: room for 3, above the low-water mark
    assert [t.payload for t in got] == [0, 1, 2]
    tq.ack("held", got)
    oldest_cold = pg.execute("SELECT id FROM tierq_tasks WHERE queue = 'held' AND state = 'cold' "
                             "ORDER BY seq LIMIT 1").fetchone()[0]
    with pg.transaction():
        pg.execute("UPDATE tierq_tasks SET payload = '\"replaced\"' WHERE id = %s",
                   (oldest_cold,))
        began = time.monotonic()
        summary = tq.run_cold_to_warm()
        waited = time.monotonic() - began
        assert summary.promoted == 0 and summary.busy == 1
        assert waited < 1.0, "the promotion must give up well before deadlock_timeout"
    assert count_state(pg, "held", "cold") == 5  # the batch rolled back whole
    assert ready_size(valkey, "held") == 7
    assert tq.run_cold_to_warm().promoted == 3
    got = tq.claim("held", max=10)
    assert [t.payload for t in got] == [3, 4, 5, 6, 7, 8, 9, "replaced", 11, 12]


def test_a_new_queue_starts_warm_while_another_mover_holds_its_promotion_lock(make_tq, valkey,
                                                                               pg):
    """An enqueue's first sight of a (queue, tenant) returns it to warm mode when it has no
    cold work, even while a scheduled mover holds the pair's promotion lock: the first task
    of a new queue is dispatched at once, not a mover's pass later."""
    tq = make_tq()
    locked = pg.execute("SELECT pg_try_advisory_lock(hashtextextended('fresh|_', 7))"
                        ).fetchone()[0]
    assert locked
    try:
        [outcome] = tq.enqueue("fresh", [{"payload": 1}])
    finally:
        pg.execute("SELECT pg_advisory_unlock(hashtextextended('fresh|_', 7))")
    assert outcome.state == "warm"
    assert mode_of(valkey, "fresh") == "warm"
    assert ready_size(valkey, "fresh") == 1
    assert count_state(pg, "fresh", "cold") == 0


def test_a_refill_with_no_cold_row_registers_nothing_in_flight(make_tq, valkey, pg):
    """A refill whose pair has no cold row promotes nothing and so registers no batch in
    flight: the pair's epoch stays as it was, and a return to warm that another refill
    observed before it is not failed by it (an empty batch's moment in flight used to fail
    every refill beside it, so a new queue's concurrent first producers all wrote cold)."""
    tq = make_tq()
    keys = PairKeys.of("quiet", "_")
    # the pair in cold mode with a producer's admission in flight: no refill may flip it
    assert tq.ctx.warm.admission_begin("quiet", "_", now_ms=to_ms(tq.ctx.now()),
                                       token="elsewhere") == "cold"
    epoch = valkey.hget(keys.meta, "epoch")
    result = tiering.refill(make_tq().ctx, "quiet", "_")
    assert result.promoted == 0 and not result.returned_to_warm
    assert valkey.hget(keys.meta, "epoch") == epoch  # nothing began, nothing to wait for
    assert valkey.zcard(keys.inflight) == 1
    tq.ctx.warm.admission_end("quiet", "_", "elsewhere")
    assert count_state(pg, "quiet", "cold") == 0
    tiering.refill(make_tq().ctx, "quiet", "_")
    assert mode_of(valkey, "quiet") == "warm"


def test_a_new_queues_first_producers_all_write_warm(make_tq, valkey, pg):
    """Several producers enqueueing into a new (queue, tenant) at once, each seeing it for
    the first time: the pair turns warm and no task is written cold. The outcome under real
    concurrency; whether it fails without the mechanism depends on how the threads
    interleave, so the test above pins the mechanism itself."""
    def produce(tq, queue, k, start, errors):
        try:
            start.wait()
            for batch in range(3):
                tq.enqueue(queue, [{"payload": [k, batch, i]} for i in range(100)])
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    for trial in range(3):
        queue = f"fresh{trial}"
        engines = [make_tq() for _ in range(4)]
        start = threading.Barrier(len(engines))
        errors: list[BaseException] = []
        threads = [threading.Thread(target=produce, args=(tq, queue, k, start, errors))
                   for k, tq in enumerate(engines)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert count_state(pg, queue, "cold") == 0, trial
        assert count_state(pg, queue, "warm") == 1200
        assert mode_of(valkey, queue) == "warm"


def test_no_return_to_warm_while_a_promotion_is_on_its_way(make_tq, valkey, pg, monkeypatch):
    """A promotion's rows are warm in PostgreSQL from its batch's commit, in Valkey only
    after its push: another process's return-to-warm check in between (an enqueue's first
    sight of the pair, run beside the mover holding the pair lock) must not flip the pair,
    or later work goes warm and is claimed before the promoted tasks arrive."""
    tq = make_tq(warm_max=10)
    first = tq.enqueue("onway", [{"payload": i} for i in range(15)])  # 10 warm, 5 cold
    for task in first[:10]:
        tq.cancel("onway", task.id)  # the warm set empty, 5 waiting cold
    assert count_state(pg, "onway", "cold") == 5 and mode_of(valkey, "onway") == "cold"
    other = make_tq(warm_max=10)  # another process: it sees the pair for the first time
    claimed: list = []
    real = tq.ctx.warm.push

    def push(queue, tenant, **kw):
        if kw["kind"] == "promote" and not claimed:
            # the batch is committed, its push not yet sent: the other process enqueues
            # and claims
            assert count_state(pg, "onway", "cold") == 0
            claimed.append(other.enqueue_one("onway", "later").state)
            claimed.extend(t.payload for t in other.claim("onway", max=20))
        return real(queue, tenant, **kw)

    monkeypatch.setattr(tq.ctx.warm, "push", push)
    assert tq.run_cold_to_warm().promoted == 5
    state, *early = claimed
    assert early == [], "nothing is handed out ahead of the promoted tasks"
    assert state == "cold"  # the pair stayed cold: the later task waits behind them
    got = [t.payload for t in other.claim("onway", max=20)]
    assert got == [10, 11, 12, 13, 14, "later"]
