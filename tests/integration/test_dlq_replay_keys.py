"""Replaying dead letters that share a key: a key may die more than once (a task dies, a new
task with its key is enqueued and dies too), but only one live task may hold it. A replay
makes one of them live and reports the others skipped, rather than failing on the live-key
index and replaying nothing. A task held in its group holds its key as a ready one does."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from tests.integration.helpers import count_state, drain
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
