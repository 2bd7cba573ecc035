"""Acks committed together (``TIERQ_ACK_GROUP_COMMIT``, logic/ack_gathering.py), run on one
Valkey (tests/integration/test_ack_group_commit.py) and on a cluster
(tests/cluster/test_ack_group_commit_on_cluster.py).

Each scenario holds the pair's committer lock as a committer would while the acks join the
mailbox, so that they meet whatever the threads' timing, then lets it go (or lets it
expire, as a committer that stopped would):

==================================  ==================================================
scenario                            what it shows
==================================  ==================================================
``many_acks_one_commit``            six acks waiting: one commit answers all, every
                                    task gone, every lease dropped
``a_stopped_committer``             acks taken by a committer that stopped: each
                                    waits while its lock lasts, then commits alone,
                                    none lost
``one_task_twice``                  two acks of one task meet: one answer has it, the
                                    other is ``not_found``, as one after the other
``a_slow_committer``                its committer holds the lock past the wait: the
                                    ack deletes alone after ``WAIT_ALONE_SECONDS``
``a_later_pass_fails``              the committer's second commit fails: its own ack
                                    (committed) is answered, the one taken commits alone
``a_failed_commit``                 the committer's statement fails: it answers the
                                    error, the other ack commits alone; the failed
                                    one's tasks stay leased and its retry acks them
``groups_go_on``                    a grouped task acked by another's commit frees its
                                    group's next task
``tenants_apart``                   one tenant's held lock never delays another's ack
==================================  ==================================================
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.support.every_task import EVERY_TASK
from tests.support.polling import eventually
from tierq.core.batch_ids import batch_member
from tierq.dal.warm_tier import AckMail
from tierq.engine import Tierq
from tierq.logic import ack_gathering

QUEUE = "gathered"


def mail(tenant: str) -> AckMail:
    return AckMail.of(QUEUE, tenant, None, "-")


def hold_lock(valkey: Any, tenant: str, ms: int = 30_000) -> None:
    """Hold the pair's committer lock as a committer under way would."""
    assert valkey.set(mail(tenant).lock, "a committer", px=ms, nx=True)


def joined(valkey: Any, tenant: str, n: int) -> None:
    eventually(lambda: valkey.llen(mail(tenant).mailbox) == n, timeout=10,
               what=f"{n} acks in the mailbox")


def held_ids(pg: Any) -> list[str]:
    """The ids of the queue's tasks PostgreSQL still holds (rows and batch members)."""
    return sorted(r[0] for r in pg.execute(
        f"SELECT id::text FROM {EVERY_TASK} WHERE queue = %s", (QUEUE,)).fetchall())


def plain_ack_statement(tasks: Sequence[Any]) -> str:
    """The store's method that commits a plain ack of ``tasks`` (of one tenant and
    attempt): ``end_batch_members`` when any is a batch member, else ``ack_delete``
    (logic/batch_rows.finish_plain)."""
    return "end_batch_members" if any(batch_member(t.id) for t in tasks) else "ack_delete"


def engines(make_tq: Callable[..., Tierq], n: int) -> list[Tierq]:
    return [make_tq(ack_group_commit=True) for _ in range(n)]


def acking(tq: Tierq, tasks: list[Any], out: dict[int, Any], key: int) -> threading.Thread:
    """A thread that acks ``tasks`` and keeps its result (or its error) in ``out[key]``."""
    def run() -> None:
        try:
            out[key] = tq.ack(QUEUE, tasks)
        except Exception as exc:  # (kept for the test to look at)
            out[key] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def meet(valkey: Any, tqs: list[Tierq], claims: list[list[Any]]) -> dict[int, Any]:
    """Each engine acks its claim on a thread of its own while the pair's lock is held,
    then the lock goes once they all wait in the mailbox: their results (or errors)."""
    hold_lock(valkey, "a")
    out: dict[int, Any] = {}
    threads = [acking(tq, c, out, i) for i, (tq, c) in enumerate(zip(tqs, claims, strict=True))]
    joined(valkey, "a", len(threads))
    valkey.delete(mail("a").lock)  # the committer under way let it go
    for thread in threads:
        thread.join(timeout=30)
    return out


def many_acks_one_commit(make_tq: Callable[..., Tierq], valkey: Any, pg: Any) -> None:
    tqs = engines(make_tq, 6)
    tqs[0].enqueue(QUEUE, [{"payload": i, "tenant": "a"} for i in range(60)])
    claims = [tq.claim(QUEUE, max=10, tenant="a") for tq in tqs]
    assert [len(c) for c in claims] == [10] * 6
    out = meet(valkey, tqs, claims)
    for i, claim in enumerate(claims):
        assert not isinstance(out[i], Exception), out[i]
        assert sorted(map(str, out[i].acked)) == sorted(str(t.id) for t in claim)
        assert not out[i].rejected
    counts = [tq.ctx.ack_commits for tq in tqs]
    assert sum(c.commits for c in counts) == 1 and sum(c.committed for c in counts) == 6
    assert sum(c.answered for c in counts) == 5 and sum(c.alone for c in counts) == 0
    assert held_ids(pg) == []
    assert tqs[0].running(QUEUE) == []
    assert not valkey.exists(mail("a").lock) and valkey.llen(mail("a").mailbox) == 0


def a_stopped_committer(make_tq: Callable[..., Tierq], valkey: Any, pg: Any) -> None:
    tqs = engines(make_tq, 3)
    tqs[0].enqueue(QUEUE, [{"payload": i, "tenant": "a"} for i in range(6)])
    claims = [tq.claim(QUEUE, max=2, tenant="a") for tq in tqs]
    hold_lock(valkey, "a", ms=800)
    out: dict[int, Any] = {}
    threads = [acking(tq, c, out, i) for i, (tq, c) in enumerate(zip(tqs, claims, strict=True))]
    joined(valkey, "a", 3)
    # taken by the committer (at once, as its script takes them), which stops before its
    # commit
    valkey.eval("""
        for _, entry in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
          redis.call('HSET', KEYS[2], string.match(entry, '^[^ ]*'), 'a committer')
        end
        return redis.call('DEL', KEYS[1])""", 2, mail("a").mailbox, mail("a").states)
    time.sleep(0.3)
    assert all(thread.is_alive() for thread in threads)  # (its lock still lasts)
    for thread in threads:
        thread.join(timeout=30)
    for i, claim in enumerate(claims):
        assert not isinstance(out[i], Exception), out[i]
        assert sorted(map(str, out[i].acked)) == sorted(str(t.id) for t in claim)
    assert sum(tq.ctx.ack_commits.alone for tq in tqs) == 3
    assert held_ids(pg) == []
    assert tqs[0].running(QUEUE) == []


def a_failed_commit(make_tq: Callable[..., Tierq], valkey: Any, pg: Any,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    tqs = engines(make_tq, 2)
    tqs[0].enqueue(QUEUE, [{"payload": i, "tenant": "a"} for i in range(4)])
    claims = [tq.claim(QUEUE, max=2, tenant="a") for tq in tqs]
    statement = plain_ack_statement([t for c in claims for t in c])
    for tq in tqs:  # a statement for more than one ack fails, as on a database error
        real = getattr(tq.ctx.store, statement)

        def failing(queue: str, ids: Any, *args: Any, real: Any = real, **kw: Any) -> Any:
            if len(ids) > 2:
                raise RuntimeError("the database refused the commit")
            return real(queue, ids, *args, **kw)

        monkeypatch.setattr(tq.ctx.store, statement, failing)
    out = meet(valkey, tqs, claims)
    failed = [i for i in out if isinstance(out[i], Exception)]
    assert len(failed) == 1 and "refused the commit" in str(out[failed[0]])
    done = 1 - failed[0]
    assert sorted(map(str, out[done].acked)) == sorted(str(t.id) for t in claims[done])
    assert sum(tq.ctx.ack_commits.alone for tq in tqs) == 1
    assert held_ids(pg) == sorted(str(t.id) for t in claims[failed[0]])
    monkeypatch.undo()
    again = tqs[failed[0]].ack(QUEUE, claims[failed[0]])
    assert len(again.acked) == 2 and not again.rejected
    assert not valkey.exists(mail("a").lock)


def groups_go_on(make_tq: Callable[..., Tierq], valkey: Any) -> None:
    tqs = engines(make_tq, 2)
    tqs[0].enqueue(QUEUE, [{"payload": [g, i], "tenant": "a", "group": g}
                           for g in ("g1", "g2") for i in range(2)])
    claims = [tq.claim(QUEUE, max=1, tenant="a") for tq in tqs]
    assert sorted(t.payload[0] for c in claims for t in c) == ["g1", "g2"]  # one a group
    out = meet(valkey, tqs, claims)
    assert all(len(out[i].acked) == 1 for i in range(2)), out
    assert sum(tq.ctx.ack_commits.answered for tq in tqs) == 1
    nxt = eventually(lambda: tqs[0].claim(QUEUE, max=2, tenant="a") or None, timeout=10,
                     what="the groups' next tasks")
    got = list(nxt)
    if len(got) < 2:
        got += eventually(lambda: tqs[0].claim(QUEUE, max=2, tenant="a") or None, timeout=10)
    assert sorted(tuple(t.payload) for t in got) == [("g1", 1), ("g2", 1)]


def tenants_apart(make_tq: Callable[..., Tierq], valkey: Any) -> None:
    tqs = engines(make_tq, 2)
    tqs[0].enqueue(QUEUE, [{"payload": i, "tenant": t} for t in "ab" for i in range(2)])
    held_a = tqs[0].claim(QUEUE, max=2, tenant="a")
    held_b = tqs[1].claim(QUEUE, max=2, tenant="b")
    hold_lock(valkey, "a")
    out: dict[int, Any] = {}
    waiting = acking(tqs[0], held_a, out, 0)
    joined(valkey, "a", 1)
    assert len(tqs[1].ack(QUEUE, held_b).acked) == 2  # b's pair: its own lock, free
    assert waiting.is_alive()  # a's ack still waits for a's committer
    valkey.delete(mail("a").lock)
    waiting.join(timeout=30)
    assert len(out[0].acked) == 2
    assert ack_gathering.MOST_ENTRIES >= 2


def one_task_twice(make_tq: Callable[..., Tierq], valkey: Any, *,
                   members: bool = False) -> None:
    """``members``: the engines write batch rows, and the tasks must be members."""
    tqs = engines(make_tq, 2)
    tqs[0].enqueue(QUEUE, [{"payload": i, "tenant": "a"} for i in range(2)])
    tasks = tqs[0].claim(QUEUE, max=2, tenant="a")
    assert [batch_member(t.id) for t in tasks] == [members] * 2
    out = meet(valkey, tqs, [tasks, tasks])  # (the second a retried ack)
    results = sorted((out[0], out[1]), key=lambda r: len(r.acked))
    assert results[1].acked and sorted(map(str, results[1].acked)) == \
        sorted(str(t.id) for t in tasks)
    assert results[0].acked == []
    assert sorted(r.reason for r in results[0].rejected) == ["not_found", "not_found"]


def a_later_pass_fails(make_tq: Callable[..., Tierq], valkey: Any, pg: Any,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    committer, later = engines(make_tq, 2)
    committer.enqueue(QUEUE, [{"payload": i, "tenant": "a"} for i in range(4)])
    own = committer.claim(QUEUE, max=2, tenant="a")
    taken = later.claim(QUEUE, max=2, tenant="a")
    statement = plain_ack_statement(own + taken)
    real = getattr(committer.ctx.store, statement)
    out: dict[int, Any] = {}
    threads: list[threading.Thread] = []

    def first_then_failing(queue: str, ids: Any, *args: Any, **kw: Any) -> Any:
        if not threads:  # its first commit: another ack joins meanwhile
            rows = real(queue, ids, *args, **kw)
            threads.append(acking(later, taken, out, 1))
            joined(valkey, "a", 1)
            return rows
        raise RuntimeError("the database refused the commit")

    monkeypatch.setattr(committer.ctx.store, statement, first_then_failing)
    mine = committer.ack(QUEUE, own)
    assert sorted(map(str, mine.acked)) == sorted(str(t.id) for t in own)
    threads[0].join(timeout=30)
    assert sorted(map(str, out[1].acked)) == sorted(str(t.id) for t in taken)
    assert later.ctx.ack_commits.alone == 1 and committer.ctx.ack_commits.commits == 1
    assert held_ids(pg) == []
    assert committer.running(QUEUE) == []


def a_slow_committer(make_tq: Callable[..., Tierq], valkey: Any, pg: Any) -> None:
    [tq] = engines(make_tq, 1)
    tq.enqueue(QUEUE, [{"payload": i, "tenant": "a"} for i in range(2)])
    tasks = tq.claim(QUEUE, max=2, tenant="a")
    hold_lock(valkey, "a")
    out: dict[int, Any] = {}
    began = time.monotonic()
    thread = acking(tq, tasks, out, 0)
    joined(valkey, "a", 1)
    # taken by the committer holding the lock, which takes its time
    valkey.eval("""
        local entry = redis.call('LPOP', KEYS[1])
        return redis.call('HSET', KEYS[2], string.match(entry, '^[^ ]*'), 'a committer')""",
                2, mail("a").mailbox, mail("a").states)
    thread.join(timeout=30)
    assert time.monotonic() - began >= ack_gathering.WAIT_ALONE_SECONDS
    assert sorted(map(str, out[0].acked)) == sorted(str(t.id) for t in tasks)
    assert tq.ctx.ack_commits.alone == 1
    assert held_ids(pg) == []
