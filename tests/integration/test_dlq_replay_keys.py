"""Replaying dead letters that share a key: a key may die more than once (a task dies, a new
task with its key is enqueued and dies too), but only one live task may hold it. A replay
makes one of them live and reports the others skipped, rather than failing on the live-key
index and replaying nothing. A task held in its group holds its key as a ready one does."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from tests.integration.helpers import count_state, drain
from tests.support.stores import TierqFactory
from tierq.engine import Tierq


def kill_keyed(tq: Tierq, queue: str, payload: Any, key: str, tenant: str = "_") -> str:
    created = tq.enqueue_one(queue, payload, key=key, tenant=tenant)
    [task] = tq.claim(queue, tenant=tenant)
    assert task.id == created.id
    tq.nack(queue, [{"id": task.id, "lease_token": task.lease_token, "dead": True}])
    return str(created.id)


def test_replay_all_with_two_dead_letters_of_one_key(tq: Tierq,
                                                     pg: psycopg.Connection[Any]) -> None:
    first = kill_keyed(tq, "dk", "first", "K")
    second = kill_keyed(tq, "dk", "second", "K")
    other = kill_keyed(tq, "dk", "other", "L")
    replayed, _ = tq.dlq_replay("dk", all_dead=True)
    assert {str(i) for i in replayed} == {first, other}
    assert count_state(pg, "dk", "dead") == 1  # the second "K" waits, its key being live
    assert sorted(t.payload for t in drain(tq, "dk")) == ["first", "other"]
    # once the replayed "K" is done, the other can be replayed
    replayed, _ = tq.dlq_replay("dk", all_dead=True)
    assert [str(i) for i in replayed] == [second]


def test_replay_of_ids_naming_two_dead_letters_of_one_key(tq: Tierq) -> None:
    first = kill_keyed(tq, "dk2", "first", "K")
    second = kill_keyed(tq, "dk2", "second", "K")
    replayed, skipped = tq.dlq_replay("dk2", ids=[second, first])
    assert [str(i) for i in replayed] == [first]
    assert [str(i) for i in skipped] == [second]


def hold_key(tq: Tierq, queue: str, tenant: str, key: str, state: str) -> str:
    """A task of ``key`` in ``state``: held is behind an active task of its group (one at a
    time, the default); delayed is due in an hour. The id of the keyed task."""
    if state == "held":
        made = tq.enqueue(queue, [{"payload": "head", "group": "g"},
                                  {"payload": "again", "group": "g", "key": key}],
                          tenant=tenant)
    else:
        run_at = {"delayed": {"run_at": time.time() + 3600}, "warm": {}}[state]
        made = tq.enqueue(queue, [{"payload": "again", "key": key, **run_at}], tenant=tenant)
    assert made[-1].state == state
    return str(made[-1].id)


@pytest.mark.parametrize("holder", ["held", "delayed", "warm"])
def test_replay_all_of_every_tenant_passes_over_a_dead_letter_whose_key_is_taken(
        tq: Tierq, holder: str) -> None:
    """An admin's replay of the queue: tenant a's dead letter of key K, older than b's,
    stays dead while a's task of K is live, held or not; b's is replayed. The dead letter
    was in every batch of the replay (oldest first): meeting the live-key index there
    rolled the batch back, so no tenant's dead letters were replayed."""
    dead_a = kill_keyed(tq, "rh", "dies", "K", tenant="a")
    live = hold_key(tq, "rh", "a", "K", holder)
    dead_b = kill_keyed(tq, "rh", "dies", "L", tenant="b")
    replayed, skipped = tq.dlq_replay("rh", all_dead=True)
    assert [str(i) for i in replayed] == [dead_b]
    assert skipped == []  # (only ids asked for by name are reported skipped)
    assert tq.get_task("rh", dead_a).state == "dead"
    assert tq.get_task("rh", live).state == holder


def test_replay_of_one_tenant_skips_its_dead_letter_whose_key_is_held(tq: Tierq) -> None:
    """A tenant's own replay, by id or of all its dead letters, reports the dead letter of a
    key its held task holds skipped (by id) or leaves it dead (all), as for a ready task;
    once the held task has run, the dead letter is replayed."""
    dead = kill_keyed(tq, "rh2", "dies", "K", tenant="a")
    other = kill_keyed(tq, "rh2", "other", "L", tenant="a")
    hold_key(tq, "rh2", "a", "K", "held")
    by_id = tq.dlq_replay_slice("rh2", ids=[dead, other], tenant="a")
    assert ([str(i) for i in by_id.replayed], [str(i) for i in by_id.skipped]) == \
        ([other], [dead])
    everything = tq.dlq_replay_slice("rh2", all_dead=True, tenant="a")
    assert (everything.replayed, everything.more) == ([], False)
    assert sorted(t.payload for t in drain(tq, "rh2", tenant="a")) == ["again", "head", "other"]
    again = tq.dlq_replay_slice("rh2", all_dead=True, tenant="a")
    assert [str(i) for i in again.replayed] == [dead]


def wait_for_a_lock_wait(pg: psycopg.Connection[Any], timeout: float = 10.0) -> None:
    """Until another session of this database waits on a lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = pg.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                         " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()").fetchone()
        if row is not None and row[0]:
            return
        time.sleep(0.01)
    raise AssertionError("no session came to wait on a lock")


def test_a_key_taken_between_the_replays_lock_and_its_reset_skips_the_row(
        tq: Tierq, make_tq: TierqFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task of K enqueued and committed after lock_dead read its snapshot: the reset sees
    it and leaves a's dead letter of K dead, and b's dead letter of the same batch is
    replayed (the reset failed on the live-key index and the batch rolled back)."""
    dead_a = kill_keyed(tq, "rr", "dies", "K", tenant="a")
    dead_b = kill_keyed(tq, "rr", "dies", "L", tenant="b")
    other = make_tq()
    original = tq.ctx.store.lock_dead

    def lock_dead(*args: Any, **kwargs: Any) -> Any:
        locked = original(*args, **kwargs)
        if locked:
            assert other.enqueue_one("rr", "again", key="K", tenant="a").outcome == "created"
        return locked

    monkeypatch.setattr(tq.ctx.store, "lock_dead", lock_dead)
    replayed, _ = tq.dlq_replay("rr", all_dead=True)
    assert [str(i) for i in replayed] == [dead_b]
    assert tq.get_task("rr", dead_a).state == "dead"


@pytest.mark.parametrize("ends", ["commit", "rollback"])
def test_a_reset_waiting_on_a_new_task_of_its_key(
        tq: Tierq, database_url: str, pg: psycopg.Connection[Any], ends: str) -> None:
    """A task of K written, not yet committed, when the replay locks its batch: the reset
    waits on that task's entry in the live-key index. Committed, the task holds K: the
    reset runs again in a savepoint and leaves a's dead letter of K dead, and b's of the
    same batch is replayed (the batch rolled back whole). Rolled back, both are replayed.
    The task is written by hand, as an enqueue's transaction would before its commit."""
    dead_a = kill_keyed(tq, "rr", "dies", "K", tenant="a")
    dead_b = kill_keyed(tq, "rr", "dies", "L", tenant="b")
    outcome: dict[str, Any] = {}

    def replay() -> None:
        try:
            outcome["replayed"] = tq.dlq_replay("rr", all_dead=True)[0]
        except Exception as exc:  # (the assertion below shows it)
            outcome["error"] = exc

    with psycopg.connect(database_url) as holder:
        holder.execute(
            "INSERT INTO tierq_tasks (id, queue, tenant, key, priority, payload, state, run_at,"
            " run_at_initially, max_attempts, seq, created_at, state_since)"
            " VALUES (gen_random_uuid(), 'rr', 'a', 'K', 0, '{}', 'delayed',"
            " now() + interval '1 hour', now() + interval '1 hour', 5,"
            " nextval('tierq_task_seq'), now(), now())")
        replaying = threading.Thread(target=replay)
        replaying.start()
        wait_for_a_lock_wait(pg)
        holder.commit() if ends == "commit" else holder.rollback()
        replaying.join(30)
    assert not replaying.is_alive()
    assert "error" not in outcome, outcome
    wanted = {dead_b} if ends == "commit" else {dead_a, dead_b}
    assert {str(i) for i in outcome["replayed"]} == wanted
    assert (tq.get_task("rr", dead_a).state == "dead") is (ends == "commit")
