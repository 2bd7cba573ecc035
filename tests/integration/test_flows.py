"""Flows: tasks that wait for other tasks (`after`), on the real stores. A waiting task is
released exactly once, in the transaction that finished its last parent; its claim carries
its parents; a failed parent dead-letters it or lets it run; graphs are made all or nothing.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from tests.integration.helpers import count_rows, count_state, drain
from tierq.errors import InvalidInput
from tierq.logic import flows


def _state(pg: Any, task_id: Any) -> str | None:
    row = pg.execute("SELECT state FROM tierq_tasks WHERE id = %s", (str(task_id),)).fetchone()
    return None if row is None else row[0]


def test_a_child_waits_for_its_parents_then_its_claim_carries_them(tq, pg):
    a, b = tq.enqueue("q", [{"payload": "a"}, {"payload": "b"}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id, b.id]}])
    assert child.state == "waiting"
    assert tq.claim("r") == []
    view = tq.get_task("r", child.id)
    assert view.state == "waiting"
    assert [(p.id, p.state) for p in view.parents or []] == [(a.id, None), (b.id, None)]

    ta, tb = tq.claim("q", max=2)
    tq.ack("q", [{"id": ta.id, "lease_token": ta.lease_token, "result": {"n": 1}}])
    assert _state(pg, child.id) == "waiting"
    tq.ack("q", [tb])  # no result: the row is kept (done) while the child waits
    [got] = tq.claim("r")
    assert got.id == child.id
    assert [(p.id, p.queue, p.state, p.result) for p in got.parents or []] == [
        (a.id, "q", "done", {"n": 1}), (b.id, "q", "done", None)]
    # the parents' edges are gone: their rows are ordinary finished rows again
    assert pg.execute("SELECT count(*) FROM tierq_task_edges").fetchone()[0] == 0
    assert pg.execute("SELECT sum(waiters) FROM tierq_tasks").fetchone()[0] == 0


def test_a_child_of_finished_and_kept_parents_is_ready_at_once(tq):
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [t] = tq.claim("q")
    tq.ack("q", [{"id": t.id, "lease_token": t.lease_token, "result": "r"}])
    [child] = tq.enqueue("q", [{"payload": "c", "after": [a.id]}])
    assert child.state == "warm"
    [got] = tq.claim("q")
    assert got.parents is not None and got.parents[0].result == "r"


def test_unknown_foreign_and_acked_parents_are_refused_writing_nothing(tq, pg):
    [a] = tq.enqueue("q", [{"payload": "a", "tenant": "t1"}])
    [t] = tq.claim("q")
    tq.ack("q", [t])  # deleted: no longer kept
    [b] = tq.enqueue("q", [{"payload": "b", "tenant": "t2"}])
    before = pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0]
    for after, field in (([a.id], "tasks[1].after[0]"), ([uuid.uuid4()], "tasks[1].after[0]"),
                         ([b.id], "tasks[1].after[0]")):
        with pytest.raises(InvalidInput) as caught:
            tq.enqueue("q", [{"payload": 0, "tenant": "t1"},
                             {"payload": 1, "tenant": "t1", "after": after}])
        assert caught.value.details[0]["field"] == field
    with pytest.raises(InvalidInput) as caught:
        tq.enqueue("q", [{"payload": 1, "tenant": "t2", "after": [b.id], "key": "k"}])
    assert caught.value.details[0]["field"] == "task.key"
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0] == before


def test_a_fan_in_of_100_parents_finished_concurrently_releases_its_child_once(make_tq, pg):
    tq = make_tq()
    parents = tq.enqueue("q", [{"payload": i} for i in range(100)])
    [child] = tq.enqueue("r", [{"payload": "join", "after": [p.id for p in parents]}])
    leased = tq.claim("q", max=100)
    assert len(leased) == 100
    barrier = threading.Barrier(10)
    errors: list[BaseException] = []

    def ack(part: list[Any]) -> None:
        try:
            barrier.wait()
            for task in part:  # one ack per task, ten threads at once
                assert tq.ack("q", [task]).acked == [task.id]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ack, args=(leased[i::10],)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    got = drain(tq, "r")
    assert [t.id for t in got] == [child.id]  # released once, claimed once
    assert len(got[0].parents or []) == 100
    assert pg.execute("SELECT count(*) FROM tierq_task_waits").fetchone()[0] == 0
    assert count_state(pg, "r", "waiting") == 0


@pytest.mark.parametrize("how", ["nack", "cancel"])
def test_a_failed_parent_dead_letters_the_child_naming_it(tq, pg, how):
    a, b = tq.enqueue("q", [{"payload": "a", "max_attempts": 1}, {"payload": "b"}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id, b.id]}])
    if how == "nack":
        [ta] = tq.claim("q")
        tq.nack("q", [{"id": ta.id, "lease_token": ta.lease_token, "error": "boom"}])
        ended = "dead"
    else:
        tq.cancel_task("q", a.id)
        ended = "cancelled"
    view = tq.get_task("r", child.id)
    assert view.state == "dead"
    assert view.last_error == f"parent {a.id} ended {ended}"


def test_on_parent_failure_run_runs_the_child_told_each_parents_state(tq):
    a, b = tq.enqueue("q", [{"payload": "a", "max_attempts": 1}, {"payload": "b"}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id, b.id],
                                "on_parent_failure": "run"}])
    ta, tb = tq.claim("q", max=2)
    tq.nack("q", [{"id": ta.id, "lease_token": ta.lease_token, "error": "boom"}])
    assert tq.claim("r") == []  # b is not finished yet
    tq.ack("q", [tb])
    [got] = tq.claim("r")
    assert got.id == child.id
    assert [(p.id, p.state) for p in got.parents or []] == [(a.id, "dead"), (b.id, "done")]


def test_replaying_a_dead_parent_re_arms_its_waiting_child(tq):
    [a] = tq.enqueue("q", [{"payload": "a", "max_attempts": 1}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    [ta] = tq.claim("q")
    tq.nack("q", [{"id": ta.id, "lease_token": ta.lease_token, "error": "boom"}])
    assert tq.get_task("r", child.id).state == "dead"
    replayed, _ = tq.dlq_replay("q", ids=[a.id])
    assert replayed == [a.id]
    assert tq.get_task("r", child.id).state == "waiting"
    [again] = tq.claim("q")
    tq.ack("q", [again])
    [got] = tq.claim("r")
    assert got.id == child.id and got.parents and got.parents[0].state == "done"


def test_a_child_past_its_wait_timeout_is_dead_lettered_waited_too_long(tq):
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id], "wait_timeout_seconds": 10}])
    [grandchild] = tq.enqueue("r", [{"payload": "g", "after": [child.id]}])
    assert flows.expire(tq.ctx) == 0
    tq.ctx.clock.advance(11)  # type: ignore[attr-defined]
    assert flows.expire(tq.ctx) == 1
    view = tq.get_task("r", child.id)
    assert view.state == "dead" and view.last_error == "waited_too_long"
    # what waited for it follows its own rule (dead: naming it)
    assert tq.get_task("r", grandchild.id).state == "dead"


def test_a_released_child_that_goes_cold_keeps_its_parents_through_promotion(make_tq):
    tq = make_tq(warm_max=1)
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    tq.enqueue("r", [{"payload": "filler"}])  # the warm set of r is full
    [ta] = tq.claim("q")
    tq.ack("q", [{"id": ta.id, "lease_token": ta.lease_token, "result": [1, 2]}])
    got = drain(tq, "r")
    [released] = [t for t in got if t.id == child.id]
    assert released.parents and released.parents[0].result == [1, 2]


def test_a_flow_is_created_all_or_nothing(tq, pg):
    result = tq.flow({"tasks": [
        {"ref": "fetch", "queue": "io", "payload": 1},
        {"ref": "parse", "queue": "cpu", "payload": 2, "after": ["fetch"]},
        {"ref": "store", "queue": "io", "payload": 3, "after": ["parse", "fetch"]},
    ]})
    assert {ref: t.state for ref, t in result.tasks.items()} == {
        "fetch": "warm", "parse": "waiting", "store": "waiting"}
    [fetch] = tq.claim("io")
    tq.ack("io", [{"id": fetch.id, "lease_token": fetch.lease_token, "result": "page"}])
    [parse] = tq.claim("cpu")
    assert parse.id == result.tasks["parse"].id
    assert tq.claim("io") == []
    tq.ack("cpu", [parse])
    [store] = tq.claim("io")
    assert [p.state for p in store.parents or []] == ["done", "done"]

    before = count_rows(pg)
    for tasks, field in (
        ([{"ref": "a", "queue": "q", "payload": 0, "after": ["b"]},
          {"ref": "b", "queue": "q", "payload": 0, "after": ["a"]}], "tasks[1].after[0]"),
        ([{"ref": "a", "queue": "q", "payload": 0, "after": ["nope"]}], "tasks[0].after[0]"),
        ([{"ref": "a", "queue": "q", "payload": 0},
          {"ref": "a", "queue": "q", "payload": 0}], "tasks[1].ref"),
        ([{"ref": "a", "queue": "q", "payload": 0},
          {"ref": "b", "queue": "q", "payload": 0, "after": [str(uuid.uuid4())]}],
         "tasks[1].after[0]"),
    ):
        with pytest.raises(InvalidInput) as caught:
            tq.flow({"tasks": tasks})
        assert caught.value.details[0]["field"] == field, caught.value
    # another tenant's task
    [other] = tq.enqueue("q", [{"payload": 0, "tenant": "t2"}])
    with pytest.raises(InvalidInput) as caught:
        tq.flow({"tenant": "t1", "tasks": [
            {"ref": "a", "queue": "q", "payload": 0, "after": [str(other.id)]}]})
    assert caught.value.details[0]["field"] == "tasks[0].after[0]"
    assert count_rows(pg) == before + 1


def test_purging_a_parents_queue_settles_its_waiters_as_cancelled(tq):
    [a] = tq.enqueue("q", [{"payload": "a"}])
    dead, run = tq.enqueue("r", [{"payload": "d", "after": [a.id]},
                                 {"payload": "r", "after": [a.id], "on_parent_failure": "run"}])
    tq.purge_queue("q")
    assert tq.get_task("r", dead.id).last_error == f"parent {a.id} ended cancelled"
    [got] = tq.claim("r")
    assert got.id == run.id and got.parents and got.parents[0].state == "cancelled"


def test_a_task_has_at_most_100_parents_and_a_parent_10000_waiting_children(tq, pg):
    parents = tq.enqueue("q", [{"payload": i} for i in range(101)])
    with pytest.raises(ValidationError, match="at most 100 items"):  # (HTTP: 422)
        tq.enqueue("r", [{"payload": 0, "after": [p.id for p in parents]}])
    [child] = tq.enqueue("r", [{"payload": 0, "after": [p.id for p in parents[:100]]}])
    assert child.state == "waiting"
    # a parent at its bound (as if 10,000 children waited on it) refuses one more
    pg.execute("UPDATE tierq_tasks SET waiters = %s WHERE id = %s",
               (flows.MAX_WAITING_CHILDREN, str(parents[0].id)))
    with pytest.raises(InvalidInput) as caught:
        tq.enqueue("r", [{"payload": 1, "after": [parents[0].id]}])
    assert caught.value.details[0]["field"] == "task.after[0]"
    assert count_state(pg, "r", "waiting") == 1


def test_a_child_whose_run_at_is_later_is_released_delayed(tq):
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id], "delay_seconds": 60}])
    [ta] = tq.claim("q")
    tq.ack("q", [ta])
    assert tq.get_task("r", child.id).state == "delayed"
    assert tq.claim("r") == []
    tq.ctx.clock.advance(61)  # type: ignore[attr-defined]
    tq.run_job("delayed_mover")
    [got] = tq.claim("r")
    assert got.id == child.id and got.parents and got.parents[0].state == "done"


def test_a_repeated_claim_answers_the_parents_as_the_first_did(tq):
    from tierq.logic.claim_replay import record_of

    [a] = tq.enqueue("q", [{"payload": "a"}])
    tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    [ta] = tq.claim("q")
    tq.ack("q", [{"id": ta.id, "lease_token": ta.lease_token, "result": {"k": "v"}}])
    first = tq.claim("r")
    again = tq.replay_claim("r", record_of(first))
    assert again == first and again[0].parents and again[0].parents[0].result == {"k": "v"}


def test_parents_results_over_256_kib_in_all_are_left_out_of_the_claim(tq):
    a, b = tq.enqueue("q", [{"payload": "a"}, {"payload": "b"}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id, b.id]}])
    big = "x" * (150 * 1024)  # two of them pass 256 KiB together
    ta, tb = tq.claim("q", max=2)
    tq.ack("q", [{"id": ta.id, "lease_token": ta.lease_token, "result": big},
                 {"id": tb.id, "lease_token": tb.lease_token, "result": big}])
    [got] = tq.claim("r")
    assert got.id == child.id
    assert [(p.id, p.state, p.result) for p in got.parents or []] == [
        (a.id, "done", None), (b.id, "done", None)]
    assert tq.get_task("q", a.id).result == big  # read with GET instead


def test_purging_a_dead_lettered_child_drops_its_wait(tq, pg):
    [a] = tq.enqueue("q", [{"payload": "a", "max_attempts": 1}])
    [child] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    [ta] = tq.claim("q")
    tq.nack("q", [{"id": ta.id, "lease_token": ta.lease_token, "error": "boom"}])
    assert tq.get_task("r", child.id).state == "dead"
    tq.dlq_purge("r", ids=[child.id])
    assert pg.execute("SELECT count(*) FROM tierq_task_edges").fetchone()[0] == 0
    assert pg.execute("SELECT count(*) FROM tierq_task_waits").fetchone()[0] == 0
    assert pg.execute("SELECT waiters FROM tierq_tasks WHERE id = %s",
                      (str(a.id),)).fetchone()[0] == 0


def test_naming_another_tenants_locked_task_is_refused_without_waiting_for_it(
        tq, database_url):
    """A parent id of another tenant is neither locked nor waited for: the enqueue is 422 at
    once even while that tenant holds its row (no delay to it, no timing oracle)."""
    [b] = tq.enqueue("q", [{"payload": "b", "tenant": "t2"}])
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM tierq_tasks WHERE id = %s FOR UPDATE", (b.id,))
        with pytest.raises(InvalidInput) as caught:
            tq.enqueue("q", [{"payload": 1, "tenant": "t1", "after": [b.id]}])
        holder.rollback()
    assert caught.value.details[0]["field"] == "task.after[0]"


def test_a_dead_child_past_its_retention_and_a_purged_queue_let_their_parents_go(tq, pg):
    """Deleting a waiting or dead-lettered child any way (retention, a queue purge) drops its
    wait: its parents' waiters come down, so a done parent is not kept for nobody."""
    from tierq.maintenance import reaper

    [p1, p2] = tq.enqueue("q", [{"payload": "p1"}, {"payload": "p2", "max_attempts": 1}])
    [dead_child] = tq.enqueue("r", [{"payload": "d", "after": [p2.id]}])
    [waiting] = tq.enqueue("w", [{"payload": "w", "after": [p1.id]}])
    tasks = {t.payload: t for t in tq.claim("q", max=2)}
    tq.nack("q", [{"id": tasks["p2"].id, "lease_token": tasks["p2"].lease_token,
                   "error": "boom"}])
    assert tq.get_task("r", dead_child.id).state == "dead"
    tq.put_queue("r", {"retention_seconds": 60})
    tq.ctx.clock.advance(120)
    reaper.run(tq.ctx)
    assert pg.execute("SELECT count(*) FROM tierq_task_waits WHERE child = %s",
                      (str(dead_child.id),)).fetchone()[0] == 0
    tq.purge_queue("w")
    assert pg.execute("SELECT count(*) FROM tierq_tasks WHERE id = %s",
                      (str(waiting.id),)).fetchone()[0] == 0
    assert pg.execute("SELECT count(*) FROM tierq_task_waits").fetchone()[0] == 0
    assert pg.execute("SELECT count(*) FROM tierq_task_edges").fetchone()[0] == 0
    assert pg.execute("SELECT waiters FROM tierq_tasks WHERE id = %s",
                      (str(p1.id),)).fetchone()[0] == 0
    tq.ack("q", [tasks["p1"]])  # nothing waits on it: deleted, as any acked task
    assert pg.execute("SELECT count(*) FROM tierq_tasks WHERE id = %s",
                      (str(p1.id),)).fetchone()[0] == 0


def _nack_to_death(tq: Any, queue: str, task: Any) -> None:
    tq.nack(queue, [{"id": task.id, "lease_token": task.lease_token, "error": "boom",
                     "dead": True}])


def test_replaying_a_dead_parent_re_arms_the_graph_below_it(tq, pg):
    """A child dead-lettered for its parent dead-letters its own children in turn; the
    parent's replay re-arms them all, down the graph, in its one transaction. A grandchild
    with on_parent_failure "run" still waiting waits for its re-armed parent again."""
    a, x = tq.enqueue("q", [{"payload": "a"}, {"payload": "x"}])
    [c] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    g, runs = tq.enqueue("r", [{"payload": "g", "after": [c.id]},
                               {"payload": "runs", "after": [c.id, x.id],
                                "on_parent_failure": "run"}])
    [h] = tq.enqueue("r", [{"payload": "h", "after": [g.id]}])
    leased = {t.payload: t for t in tq.claim("q", max=2)}
    _nack_to_death(tq, "q", leased["a"])
    assert [tq.get_task("r", t.id).state for t in (c, g, h, runs)] == [
        "dead", "dead", "dead", "waiting"]
    assert tq.get_task("r", h.id).last_error == f"parent {g.id} ended dead"
    replayed, _ = tq.dlq_replay("q", ids=[a.id])
    assert replayed == [a.id]
    for t in (c, g, h):
        view = tq.get_task("r", t.id)
        assert (view.state, view.last_error) == ("waiting", None)
    tq.ack("q", [leased["x"]])
    assert tq.get_task("r", runs.id).state == "waiting"  # c is unfinished again
    [again] = tq.claim("q")
    tq.ack("q", [again])
    order = []
    while got := tq.claim("r", max=10):
        order.extend(t.payload for t in got)
        tq.ack("r", got)
    assert order[0] == "c" and sorted(order[1:3]) == ["g", "runs"] and order[3:] == ["h"]
    assert pg.execute("SELECT count(*) FROM tierq_task_waits").fetchone()[0] == 0


def test_a_replay_re_arms_at_most_its_bound_of_levels(tq, monkeypatch):
    monkeypatch.setattr(flows, "REARM_LEVELS", 1)
    [a] = tq.enqueue("q", [{"payload": "a"}])
    [c] = tq.enqueue("r", [{"payload": "c", "after": [a.id]}])
    [g] = tq.enqueue("r", [{"payload": "g", "after": [c.id]}])
    [ta] = tq.claim("q")
    _nack_to_death(tq, "q", ta)
    tq.dlq_replay("q", ids=[a.id])
    assert tq.get_task("r", c.id).state == "waiting"
    assert tq.get_task("r", g.id).state == "dead"  # below the bound: its own replay runs it


def test_a_dead_child_names_the_parent_that_failed_it_with_that_parents_state(tq):
    """Several parents ending differently (done, cancelled, dead, in several orders and in
    one transaction): a child's message names the parent that dead-lettered it and that
    parent's own final state, never another's."""
    p = tq.enqueue("q", [{"payload": f"p{i}"} for i in range(4)])
    one, two = tq.enqueue("r", [{"payload": "one", "after": [p[0].id, p[1].id, p[2].id]},
                                {"payload": "two", "after": [p[2].id, p[1].id, p[3].id]}])
    leased = {t.payload: t for t in tq.claim("q", max=4)}
    tq.ack("q", [leased["p0"]])
    tq.cancel_task("q", p[1].id)  # first failure of both
    _nack_to_death(tq, "q", leased["p2"])  # a second failure, a different state
    assert tq.get_task("r", one.id).last_error == f"parent {p[1].id} ended cancelled"
    assert tq.get_task("r", two.id).last_error == f"parent {p[1].id} ended cancelled"
    # replaying the dead one re-arms neither: the cancelled parent still failed them
    tq.dlq_replay("q", ids=[p[2].id])
    assert tq.get_task("r", one.id).state == "dead"
    # in one transaction: a cancelled parent dead-letters a child, which fails its own
    # child (named with its own state, dead), whose other parent is cancelled with it
    [root] = tq.enqueue("q", [{"payload": "root"}])
    [mid] = tq.enqueue("r", [{"payload": "mid", "after": [root.id]}])
    [low] = tq.enqueue("r", [{"payload": "low", "after": [mid.id, root.id]}])
    tq.cancel_task("q", root.id)
    assert tq.get_task("r", mid.id).last_error == f"parent {root.id} ended cancelled"
    assert tq.get_task("r", low.id).last_error in (f"parent {root.id} ended cancelled",
                                                   f"parent {mid.id} ended dead")
    [late] = tq.enqueue("r", [{"payload": "late", "after": [p[0].id, p[2].id]}])
    assert tq.get_task("r", late.id).state == "waiting"  # p2 replayed: unfinished
    [t2] = tq.claim("q", max=1)
    assert t2.id == p[2].id
    _nack_to_death(tq, "q", t2)
    assert tq.get_task("r", late.id).last_error == f"parent {p[2].id} ended dead"
