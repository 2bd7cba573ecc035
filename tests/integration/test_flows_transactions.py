"""Flows' transactions on the real stores: a release and an enqueue, a cancel or an expiry
that lock the same rows in the other order both end without an error to their callers (the
deadlock's victim is run again); an ack whose release fails commits nothing; the flow
statements give their caller's transaction its query plans back.

Each deadlock is made on purpose: a third connection holds one row, the first operation is
started and waits for it holding what the second will want, then the second is started and
waits holding what the first will want; the held row is let go and PostgreSQL finds the
cycle (after its deadlock_timeout)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.integration.helpers import drain
from tierq.logic import flows


def _state(pg: Any, task_id: Any) -> str | None:
    row = pg.execute("SELECT state FROM tierq_tasks WHERE id = %s", (str(task_id),)).fetchone()
    return None if row is None else row[0]


def _wait_for_lock_waits(pg: Any, n: int) -> None:
    """Until ``n`` backends of this database wait for a row lock."""
    deadline = time.monotonic() + 10
    while pg.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()").fetchone()[0] < n:
        assert time.monotonic() < deadline, f"fewer than {n} lock waits"
        time.sleep(0.02)


def _crossed(database_url: str, pg: Any, caplog: Any, hold: str, held: Any,
             first: Callable[[], Any], second: Callable[[], Any]) -> list[Any]:
    """Run ``first`` and ``second`` so that they lock in crossed orders (see the module);
    what each returned. Fails on an error raised by either, and unless PostgreSQL did
    find the cycle (one of them logged that it ran again)."""
    out: list[Any] = [None, None]
    errors: list[BaseException] = []

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            out[i] = call()
        except BaseException as exc:
            errors.append(exc)

    caplog.set_level(logging.WARNING, logger="tierq.dal.postgres")
    with psycopg.connect(database_url) as holder:
        holder.execute(hold, (str(held),))
        one = threading.Thread(target=run, args=(0, first))
        one.start()
        _wait_for_lock_waits(pg, 1)
        two = threading.Thread(target=run, args=(1, second))
        two.start()
        _wait_for_lock_waits(pg, 2)
        holder.rollback()
    one.join(30)
    two.join(30)
    assert errors == []
    assert any("a deadlock's victim" in r.getMessage() for r in caplog.records)
    return out


def _no_wait_rows_left(pg: Any) -> None:
    assert pg.execute("SELECT count(*) FROM tierq_task_waits").fetchone()[0] == 0
    assert pg.execute("SELECT count(*) FROM tierq_task_edges").fetchone()[0] == 0
    assert pg.execute("SELECT COALESCE(sum(waiters), 0) FROM tierq_tasks").fetchone()[0] == 0


@pytest.mark.rows_layout  # (parents that were members: the move's batch lock orders the two)
def test_a_release_and_an_enqueue_naming_its_parents_in_the_other_order_both_succeed(
        tq, pg, database_url, caplog):
    """The ack of a holds a; releasing c then locks c's parents b, a in id order, while an
    enqueue naming a and b holds b and waits for a."""
    b, a = tq.enqueue("q", [{"payload": "b"}, {"payload": "a"}])
    assert str(b.id) < str(a.id)
    [c] = tq.enqueue("r", [{"payload": "c", "after": [a.id, b.id]}])
    tb, ta = tq.claim("q", max=2)
    tq.ack("q", [tb])  # b done and kept: c waits for a alone
    acked, [d] = _crossed(
        database_url, pg, caplog, "SELECT 1 FROM tierq_tasks WHERE id = %s FOR UPDATE", c.id,
        lambda: tq.ack("q", [ta]),
        lambda: tq.enqueue("r", [{"payload": "d", "after": [a.id, b.id]}]))
    assert acked.acked == [ta.id]
    got = drain(tq, "r")
    assert sorted(str(t.id) for t in got) == sorted([str(c.id), str(d.id)])
    assert all([p.state for p in t.parents or []] == ["done", "done"] for t in got)
    _no_wait_rows_left(pg)


def test_a_cancel_of_a_waiting_task_and_its_parents_ack_both_succeed(tq, pg, database_url,
                                                                      caplog):
    """The cancel of c holds c's row and deletes its edge from a; the ack of a holds a and
    marks that edge, then would release c; the cancel then wants a (its waiters)."""
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [c] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    [ta] = tq.claim("q")
    cancelled, acked = _crossed(
        database_url, pg, caplog,
        "SELECT 1 FROM tierq_task_edges WHERE child = %s FOR UPDATE", c.id,
        lambda: tq.cancel_task("r", c.id),
        lambda: tq.ack("q", [ta]))
    assert cancelled.id == c.id and acked.acked == [ta.id]
    assert _state(pg, c.id) is None
    _no_wait_rows_left(pg)


def test_an_expiry_and_the_ack_of_the_parent_both_succeed(tq, pg, database_url, caplog):
    """The expiry holds c's count row and wants c's row and edges; the ack of a holds a and
    c's edge from a, and wants c's count row."""
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [c] = tq.enqueue("r", [{"payload": "c", "after": [a.id], "wait_timeout_seconds": 10}])
    [ta] = tq.claim("q")
    tq.ctx.clock.advance(11)  # type: ignore[attr-defined]
    expired, acked = _crossed(
        database_url, pg, caplog, "SELECT 1 FROM tierq_tasks WHERE id = %s FOR UPDATE", c.id,
        lambda: flows.expire(tq.ctx),
        lambda: tq.ack("q", [ta]))
    assert acked.acked == [ta.id]
    # whichever went first decided: dead-lettered waiting too long, or released
    if expired == 1:
        assert tq.get_task("r", c.id).last_error == flows.WAITED_TOO_LONG
    else:
        assert [t.id for t in drain(tq, "r")] == [c.id]
    _no_wait_rows_left(pg)


FAIL_READY = """
CREATE FUNCTION tierq_test_fail_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'test: task % may not become ready', NEW.id;
END $$;
CREATE TRIGGER tierq_test_fail_ready BEFORE UPDATE ON tierq_tasks FOR EACH ROW
    WHEN (OLD.state = 'delayed' AND NEW.state IN ('warm', 'cold')
          AND NEW.payload = '"fails"'::jsonb)
    EXECUTE FUNCTION tierq_test_fail_ready();
"""


def test_an_ack_whose_release_fails_commits_nothing_and_is_taken_again(tq, pg):
    """Making the released child ready is part of the ack's one transaction: a real failure
    there (a trigger refusing it) rolls the ack back, so the caller's error never follows
    a commit, and the same ack is taken once the failure is gone."""
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [c] = tq.enqueue("r", [{"payload": "fails", "after": [a.id]}])
    [ta] = tq.claim("q")
    pg.execute(FAIL_READY)
    try:
        with pytest.raises(psycopg.Error, match="may not become ready"):
            tq.ack("q", [{"id": ta.id, "lease_token": ta.lease_token, "result": 7}])
        assert (_state(pg, a.id), _state(pg, c.id)) == ("warm", "waiting")
    finally:
        pg.execute("DROP TRIGGER tierq_test_fail_ready ON tierq_tasks;"
                   " DROP FUNCTION tierq_test_fail_ready()")
    assert tq.ack("q", [{"id": ta.id, "lease_token": ta.lease_token,
                         "result": 7}]).acked == [ta.id]
    [got] = tq.claim("r")
    assert got.id == c.id and got.parents and got.parents[0].result == 7


def _seqscan(conn: Any) -> str:
    return str(conn.execute("SELECT current_setting('enable_seqscan') AS v").fetchone()["v"])


@pytest.mark.parametrize("own", ["on", "off"])
def test_flow_statements_give_their_transaction_its_own_plans_back(tq, own):
    """Scans by key hold for the flow statements only: the enqueue, ack or replay around
    them keeps its own setting for what follows."""
    [a] = tq.enqueue("q", [{"payload": "a", "max_attempts": 1}])
    [c] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    [ta] = tq.claim("q")
    tq.nack("q", [{"id": ta.id, "lease_token": ta.lease_token, "error": "boom"}])
    ctx = tq.ctx
    with ctx.db.transaction() as conn:
        conn.execute(f"SET LOCAL enable_seqscan = {own}")
        flows.settle(ctx, conn, [str(c.id)], "done")
        assert _seqscan(conn) == own
        assert flows.on_replay(ctx, conn, [str(a.id)]) == [str(c.id)]
        assert _seqscan(conn) == own


def test_a_child_deleted_while_its_last_parent_is_acked_keeps_its_wait_settled(
        tq, pg, database_url):
    """The ack settles the edge of a child it frees without writing its state (the release
    deletes it); when the child's row is deleted meanwhile (a purge commits while the
    release waits for it), the edge gets its state instead, so a later pass counts it
    never again and the wait of the deleted child goes with its parent's waiters."""
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [c] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    [ta] = tq.claim("q")
    out: list[Any] = []
    with psycopg.connect(database_url) as purger:
        purger.execute("DELETE FROM tierq_tasks WHERE id = %s", (str(c.id),))
        acking = threading.Thread(target=lambda: out.append(tq.ack("q", [ta])))
        acking.start()
        _wait_for_lock_waits(pg, 1)
        purger.commit()
    acking.join(30)
    assert out and out[0].acked == [ta.id]
    assert pg.execute("SELECT parent_state FROM tierq_task_edges WHERE child = %s",
                      (str(c.id),)).fetchall() == [("done",)]
    assert flows.forget_deleted(tq.ctx) == 1
    _no_wait_rows_left(pg)
    flows.on_queue_purged(tq.ctx, "q")  # nothing of a is left to settle
    _no_wait_rows_left(pg)
