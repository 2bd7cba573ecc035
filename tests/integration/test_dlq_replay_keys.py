"""Replaying dead letters that share a key: a key may die more than once (a task dies, a new
task with its key is enqueued and dies too), but only one live task may hold it. A replay
makes one of them live and reports the others skipped, rather than failing on the live-key
index and replaying nothing."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.integration.helpers import count_state, drain
from tierq.engine import Tierq


def kill_keyed(tq: Tierq, queue: str, payload: Any, key: str) -> str:
    created = tq.enqueue_one(queue, payload, key=key)
    [task] = tq.claim(queue)
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
