"""Ordering without a cliff (docs/architecture.md §2): places in line past what a double holds
exactly, on both sides of the split between the two member forms (core/ordering.py), a warm
tier written by an older tierq, and the end of tierq_task_seq."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import count_rows, count_state, drain, ready_size
from tests.support.every_task import EVERY_TASK
from tierq.core.ordering import SEQ_MAX, SPLIT, place, task_of, unpack
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.errors import SequenceExhausted
from tierq.logic.context import OffsetClock
from tierq.models import ClaimedTask

# what every tierq before the long form scored a ready task with (the previous
# core/ordering.py), written out here rather than taken from the code under test
PREVIOUS_SCALE = 562949953421312  # 2^49


def seqs_of(pg: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    """The seq of every task of ``queue`` PostgreSQL holds (a batch row's members too)."""
    return {str(i): s for i, s in pg.execute(
        f"SELECT id, seq FROM {EVERY_TASK} WHERE queue = %s", (queue,)).fetchall()}


def entries(valkey: redis.Redis, queue: str, tenant: str = "_") -> list[tuple[str, float]]:
    """The pair's ready set, in its order: (member, score)."""
    return [(m.decode(), s) for m, s in valkey.zrange(PairKeys.of(queue, tenant).ready, 0, -1,
                                                      withscores=True)]


def test_order_holds_past_2_53_across_both_tiers_and_priorities(
        make_tq: Callable[..., Tierq], task_seq: Callable[[int], None],
        valkey: redis.Redis, pg: psycopg.Connection[Any]) -> None:
    """Every seq beyond 2^53: a small warm set, enqueues across three priorities, claims of
    random sizes (some with a byte budget that puts tasks back, some given back whole by a
    release), the mover in between. Within each priority claims follow enqueue order across
    both tiers, and the ready set is always in (priority desc, seq) order of the rows.
    (Before the long form, the first such enqueue committed its rows and then failed on
    the score.)"""
    task_seq(int(__import__("os").environ.get("XSEQ", str((1 << 53) + 1))))
    tq = make_tq(warm_max=30)
    rng = random.Random(53)
    enqueued: dict[int, list[int]] = defaultdict(list)
    priority_of: dict[int, int] = {}  # (each task's, by its payload's n)
    acked: dict[int, list[int]] = defaultdict(list)
    n = 0

    def in_line_order() -> None:
        # A cold pair's warm set may have run dry between ticks (the inline refill of a
        # claim is time-gated and skipped once its byte budget is spent): the tick would
        # fill it, so run it, then check a line worth checking.
        if ready_size(valkey, "h") < 2:
            tq.run_cold_to_warm()
        rows = {str(i): (-priority_of[int(n)], s) for i, n, s in pg.execute(
            f"SELECT id, payload ->> 'n', seq FROM {EVERY_TASK} WHERE queue = 'h'").fetchall()}
        line = [rows[task_of(member)] for member, _ in entries(valkey, "h")]
        assert len(line) > 1 and line == sorted(line)

    def take(got: list[ClaimedTask]) -> None:
        # given back whole while the warm set has room for them: back in their places
        # (into a full one they would wait cold, behind the warm tasks)
        if got and ready_size(valkey, "h") + len(got) <= 30 and rng.random() < 0.15:
            assert len(tq.release("h", got).released) == len(got)
            return
        for t in got:
            acked[t.priority].append(t.payload["n"])
        assert not tq.ack("h", got).rejected

    while n < 1200:
        batch = []
        for _ in range(60):
            p = rng.choice([0, 5, 9])
            batch.append({"payload": {"n": n, "pad": "x" * rng.randint(0, 200)}, "priority": p})
            enqueued[p].append(n)
            priority_of[n] = p
            n += 1
        tq.enqueue("h", batch)
        assert ready_size(valkey, "h") <= 30
        in_line_order()
        take(tq.claim("h", max=rng.randint(1, 25)))
        take(tq.claim("h", max=rng.randint(2, 10), max_bytes=900))  # puts the rest back
        if rng.random() < 0.3:
            tq.run_cold_to_warm()
    assert count_state(pg, "h", "cold") > 0  # both tiers were used
    assert min(seqs_of(pg, "h").values()) > 1 << 53
    for member, score in entries(valkey, "h"):
        priority, seq, _ = unpack(score, member)
        assert seq > 1 << 53 and member[16] == "|" and score == (10 - priority) * SPLIT
    for t in drain(tq, "h", batch=7):
        acked[t.priority].append(t.payload["n"])
    assert dict(acked) == dict(enqueued)


def test_a_batchs_members_and_keyed_tasks_keep_their_places_past_2_53(
        make_tq: Callable[..., Tierq], task_seq: Callable[[int], None],
        valkey: redis.Redis, pg: psycopg.Connection[Any]) -> None:
    """Batches of keyless and keyed tasks over three priorities, every seq past 2^53 (with
    ``TIERQ_BATCH_ROWS``, a batch row each, its keyed tasks rows): each task's seq is its
    batch's first plus its index in the batch, the ready set is in (priority desc, seq)
    order of them, and claims follow each priority's enqueue order, a task given back by a
    release (where batch rows are on, a member moved out) in its own place."""
    task_seq((1 << 53) + 1)
    tq = make_tq(warm_max=1000)
    priorities = (0, 5, 9)
    made = [tq.enqueue("m", [{"payload": {"n": n}, "priority": priorities[n % 3],
                              **({"key": f"k{n}"} if n % 4 == 1 else {})}
                             for n in range(50 * b, 50 * b + 50)]) for b in range(4)]
    assert pg.execute("SELECT count(*) FROM tierq_batches").fetchone() == (
        4 * tq.ctx.settings.batch_rows,)
    seqs = seqs_of(pg, "m")
    assert len(seqs) == 200 and min(seqs.values()) > 1 << 53
    for batch in made:
        got = [seqs[str(o.id)] for o in batch]
        assert got == list(range(got[0], got[0] + 50))  # batch order, no gap
    priority = {str(o.id): priorities[n % 3]
                for n, o in enumerate(o for batch in made for o in batch)}
    line = [task_of(member) for member, _ in entries(valkey, "m")]
    assert line == sorted(seqs, key=lambda i: (-priority[i], seqs[i]))
    [first] = tq.claim("m", max=1)
    assert first.payload == {"n": 2}  # (the first of priority 9, keyless)
    assert tq.release("m", [first]).released
    got = [t.payload["n"] for t in drain(tq, "m", batch=7)]
    assert got == [n for p in (9, 5, 0) for n in range(200) if priorities[n % 3] == p]


def test_places_on_both_sides_of_the_split_make_one_line(
        tq: Tierq, task_seq: Callable[[int], None], valkey: redis.Redis,
        pg: psycopg.Connection[Any]) -> None:
    """Tasks whose seqs straddle 2^49 share a ready set (short and long form members), are
    replaced with a new priority, cancelled and withdrawn by their places, and claims hand
    them out in one order: priority first, then seq."""
    task_seq(SPLIT - 4 * 512)
    out = [tq.enqueue_one("s", {"n": i}, priority=(3, 7)[i % 2], key=f"k{i}")
           for i in range(10)]  # one statement, one value of the sequence, each
    seqs = seqs_of(pg, "s")
    assert sorted(seqs.values()) == [SPLIT - 4 * 512 + 512 * i for i in range(10)]
    forms = {member: len(member) for member, _ in entries(valkey, "s")}
    assert sorted(forms.values()) == [36] * 4 + [53] * 6  # ids; '<16 hex>|<id>'
    # k1 (7, short form) and k6 (3, long form) swap priorities in place; k8 is cancelled
    tq.enqueue("s", [{"payload": {"n": 1}, "key": "k1", "priority": 3, "on_conflict": "replace"},
                     {"payload": {"n": 6}, "key": "k6", "priority": 7, "on_conflict": "replace"}])
    tq.cancel_task("s", out[8].id)
    k9 = str(out[9].id)
    assert tq.ctx.warm.remove_ready("s", "_", [place(7, seqs[k9], k9)]) == [k9]  # withdrawn
    pg.execute("DELETE FROM tierq_tasks WHERE id = %s", (k9,))
    assert ready_size(valkey, "s") == 8
    got = [(t.priority, t.payload["n"]) for t in tq.claim("s", max=20)]
    assert got == [(7, 3), (7, 5), (7, 6), (7, 7), (3, 0), (3, 1), (3, 2), (3, 4)]


def test_a_warm_tier_written_by_the_previous_version_keeps_its_order(
        make_tq: Callable[..., Tierq], task_seq: Callable[[int], None],
        valkey: redis.Redis, pg: psycopg.Connection[Any]) -> None:
    """The upgrade: below 2^49 a ready set holds exactly what the previous version wrote (the
    id, scored (9 - priority) * 2^49 + seq), so its sets need no conversion and a deploy
    that runs both versions side by side sees one format. Later places take the long form
    in the same sets: claims hand out the old tasks in their places, a released old task
    goes back to its own, and the reconciler re-pushes nothing."""
    clock = OffsetClock()
    tq = make_tq(clock=clock, warm_max=100)
    task_seq(513)  # (whatever the session's sequence says: TIERQ_TEST_SEQ_START)
    old = tq.enqueue("u", [{"payload": {"n": i}, "priority": (0, 9)[i % 2]} for i in range(6)])
    seqs = seqs_of(pg, "u")
    priority = {str(o.id): (0, 9)[i % 2] for i, o in enumerate(old)}
    assert sorted(entries(valkey, "u"), key=lambda e: e[0]) == sorted(
        (task_id, float((9 - priority[task_id]) * PREVIOUS_SCALE + seqs[task_id]))
        for task_id in priority)
    task_seq(SPLIT + 5)  # ... a long life later
    tq.enqueue("u", [{"payload": {"n": 6 + i}, "priority": (0, 9)[i % 2]} for i in range(4)])
    assert sum(len(m) > 36 for m, _ in entries(valkey, "u")) == 4
    [first] = tq.claim("u", max=1)
    assert first.payload == {"n": 1}
    assert tq.release("u", [first]).released  # back in its short form place
    clock.advance(tq.ctx.settings.reconcile_grace_seconds + 1)
    assert tq.run_reaper().restored == 0
    got = [t.payload["n"] for t in drain(tq, "u", batch=3)]
    assert got == [1, 3, 5, 7, 9, 0, 2, 4, 6, 8]
    assert count_rows(pg, "u") == 0


def test_the_end_of_the_sequence_fails_each_statement_before_it_commits(
        make_tq: Callable[..., Tierq], task_seq: Callable[[int], None],
        valkey: redis.Redis, pg: psycopg.Connection[Any]) -> None:
    """The one limit left is tierq_task_seq's MAXVALUE (migration 0015): its last value
    still opens a whole block of places, each with a place in a ready set; past it, an
    enqueue and a delayed task coming due fail in the statement that asks for a value, so
    nothing is committed (a keyless retry duplicates nothing) and nothing is pushed."""
    clock = OffsetClock()
    tq = make_tq(clock=clock, warm_max=1000)
    task_seq(SEQ_MAX - 512)
    later = tq.enqueue_one("e", {"n": "later"}, delay_seconds=30)
    tq.enqueue("e", [{"payload": {"n": i}, "priority": i % 2} for i in range(500)])
    assert max(seqs_of(pg, "e").values()) == SEQ_MAX + 499  # the last value's whole block
    before = count_rows(pg, "e")
    with pytest.raises(SequenceExhausted):
        tq.enqueue("e", [{"payload": {"n": "more"}}])
    with pytest.raises(SequenceExhausted):
        tq.enqueue("e", [{"payload": {"n": "keyed"}, "key": "k"}])
    assert count_rows(pg, "e") == before and ready_size(valkey, "e") == 500
    clock.advance(60)
    with pytest.raises(SequenceExhausted):
        tq.run_delayed_mover()
    assert tq.get_task("e", later.id).state == "delayed"  # rolled back, not pushed
    got = drain(tq, "e", batch=200)
    assert [t.payload["n"] for t in got] == [*range(1, 500, 2), *range(0, 500, 2)]
