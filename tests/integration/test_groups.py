"""Groups: ordered work per key, on the real stores. A group's tasks are claimed in enqueue
order, at most group_max_leased at once; the others are held in PostgreSQL until a
finishing transaction (ack, dead, cancel, purge) releases the next; a retried head keeps
its place; a replayed dead letter joins its group's back (logic/groups.py)."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from typing import Any

import pytest
from pydantic import ValidationError

from tests.integration.helpers import drain
from tierq.errors import InvalidInput
from tierq.logic import groups


def _states(pg: Any, queue: str) -> dict[str, int]:
    rows = pg.execute("SELECT state, count(*) FROM tierq_tasks WHERE queue = %s GROUP BY state",
                      (queue,)).fetchall()
    return {state: n for state, n in rows}


def _group_row(pg: Any, queue: str, grp: str) -> tuple[int, int] | None:
    row = pg.execute("SELECT active, held FROM tierq_groups WHERE queue = %s AND grp = %s",
                     (queue, grp)).fetchone()
    return None if row is None else (row[0], row[1])


def test_a_group_runs_one_at_a_time_in_enqueue_order_whatever_the_priority(tq, pg):
    made = tq.enqueue("q", [{"payload": i, "group": "g", "priority": 9 - i} for i in range(4)]
                      + [{"payload": "free"}])
    assert [o.state for o in made] == ["warm", "held", "held", "held", "warm"]
    assert _group_row(pg, "q", "g") == (1, 3)
    claimed = tq.claim("q", max=10)
    assert sorted(str(t.payload) for t in claimed) == ["0", "free"]
    assert tq.get_task("q", made[1].id).state == "held"
    assert tq.get_task("q", made[1].id).group == "g"
    seen = [t.payload for t in claimed if t.payload != "free"]
    tq.ack("q", claimed)
    while True:
        got = tq.claim("q", max=10)
        if not got:
            break
        assert len(got) == 1
        seen.append(got[0].payload)
        tq.ack("q", got)
    assert seen == [0, 1, 2, 3]


def test_acks_release_the_next_task_and_the_group_row_goes_when_done(tq, pg):
    tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(3)])
    order = []
    while True:
        got = tq.claim("q", max=10)
        if not got:
            break
        assert len(got) == 1  # never two of the group at once
        order.append(got[0].payload)
        tq.ack("q", [{"id": got[0].id, "lease_token": got[0].lease_token,
                      **({"result": {"n": 1}} if got[0].payload == 1 else {})}])
    assert order == [0, 1, 2]
    assert _group_row(pg, "q", "g") is None  # nothing active, nothing held: gone
    assert _states(pg, "q") == {"done": 1}


def test_group_is_refused_with_after_and_when_malformed(tq, pg):
    [a] = tq.enqueue("q", [{"payload": 0}])
    with pytest.raises(InvalidInput) as caught:
        tq.enqueue("q", [{"payload": 1, "group": "g", "after": [a.id]}])
    assert caught.value.details[0]["field"] == "task.group"
    with pytest.raises((InvalidInput, ValidationError)) as bad:
        tq.enqueue("q", [{"payload": 1, "group": "x" * 129}])
    assert "group" in str(bad.value)
    assert pg.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0] == 1
    assert pg.execute("SELECT count(*) FROM tierq_groups").fetchone()[0] == 0


def test_group_max_leased_is_validated_and_three_run_at_once_in_order(tq, pg):
    for bad in (0, 1001):
        with pytest.raises((InvalidInput, ValidationError)) as caught:
            tq.put_queue("q", {"group_max_leased": bad})
        assert "group_max_leased" in str(caught.value)
    assert tq.queue_settings("q").group_max_leased == 1
    tq.put_queue("q", {"group_max_leased": 3})
    assert tq.queue_settings("q").group_max_leased == 3
    made = tq.enqueue("q", [{"payload": i, "group": "g"} for i in range(10)])
    assert [o.state for o in made].count("held") == 7
    order: list[int] = []
    while True:
        got = tq.claim("q", max=10)
        if not got:
            break
        assert len(got) <= 3
        leased = pg.execute("SELECT count(*) FROM tierq_tasks WHERE state = 'warm'").fetchone()[0]
        assert leased <= 3
        order.extend(t.payload for t in got)
        tq.ack("q", got[:1])  # one acked: the next is released
        if len(got) > 1:
            tq.release("q", got[1:])  # given back: still active, claimed again
    # each task claimed first in enqueue order, acked once
    assert list(dict.fromkeys(order)) == list(range(10))
    tq.put_queue("q", {"group_max_leased": None})
    assert tq.queue_settings("q").group_max_leased == 1
