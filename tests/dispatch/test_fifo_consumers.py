"""Consumers of grouped tasks as of an SQS FIFO queue, on real PostgreSQL and Valkey:
Powertools' ``SqsFifoPartialProcessor`` run unchanged (tests/dispatch/consumers.py), both
ways, and what settle makes of its report (logic/dispatch/settle.py): each group's first
reported record nacked, the group's later ones released, the unreported acked."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import WITH_ATTEMPTS, run_until
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic.dispatch import Dispatcher

pytestmark = pytest.mark.usefixtures("clean_stores")

# one tenant's tasks in enqueue order: two groups and ungrouped tasks, interleaved; the
# failure is A1, in the middle of group A (and of the batch)
LAYOUT = [("A0", "A"), ("B0", "B"), ("A1", "A"), ("u0", None), ("B1", "B"), ("A2", "A"),
          ("u1", None), ("B2", "B")]


def rows(pg: psycopg.Connection[Any], queue: str) -> dict[str, tuple[str, int]]:
    """Each task's name (its payload's ``n``) -> (state, attempts), acked ones left out."""
    found = pg.execute(f"SELECT payload->>'n', state, attempts FROM {WITH_ATTEMPTS}"
                       " WHERE queue = %s AND state <> 'done'", (queue,)).fetchall()
    return {name: (state, attempts) for name, state, attempts in found}


def fifo_queue(tq: Tierq, queue: str, function: str) -> dict[str, str]:
    """A queue of ``function`` whose batch holds every task of LAYOUT (each group's tasks
    all active at once), retried at once; the tasks' ids by name."""
    tq.put_queue(queue, {"consumer": {"function": f"tests.dispatch.consumers:{function}",
                                      "batch_size": 10},
                         "group_max_leased": 10,
                         "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    queued = tq.enqueue(queue, [{"payload": {"n": name, "fail_once": name == "A1"},
                                 **({"group": group} if group else {})}
                                for name, group in LAYOUT])
    return {name: str(q.id) for (name, _), q in zip(LAYOUT, queued, strict=True)}


def names_of(event: dict[str, Any], ids: dict[str, str]) -> list[str]:
    by_id = {task_id: name for name, task_id in ids.items()}
    return [by_id[r["messageId"]] for r in event["Records"]]


def check_records(event: dict[str, Any], ids: dict[str, str]) -> None:
    """Grouped records carry MessageGroupId and a 20-digit SequenceNumber, rising within
    each group; ungrouped records carry neither."""
    last: dict[str, int] = {}
    for name, record in zip(names_of(event, ids), event["Records"], strict=True):
        attributes = record["attributes"]
        group = dict(LAYOUT)[name]
        if group is None:
            assert "MessageGroupId" not in attributes and "SequenceNumber" not in attributes
            continue
        assert attributes["MessageGroupId"] == group
        number = attributes["SequenceNumber"]
        assert len(number) == 20 and number.isdigit()
        assert int(number) > last.get(group, -1)
        last[group] = int(number)


def redelivered(tq: Tierq, pg: psycopg.Connection[Any], queue: str,
                ids: dict[str, str]) -> list[str]:
    """Run the queue dry; the names of the second batch's records, in order."""
    run_until(tq, lambda: not rows(pg, queue))
    assert len(JOURNAL.events) >= 2
    for event in JOURNAL.events:
        check_records(event, ids)
    return names_of(JOURNAL.events[1], ids)


def test_a_fifo_processor_stops_at_the_failure_and_each_group_keeps_its_order(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    ids = fifo_queue(tq, "fifo", "fifo")
    JOURNAL.keep_events = True
    counts = Dispatcher(tq.ctx, functions).dispatch_once("fifo")
    [event] = JOURNAL.events
    assert names_of(event, ids) == [name for name, _ in LAYOUT]
    check_records(event, ids)
    # reported: A1 and every later record; A1 and B1 head their groups' reports, the
    # ungrouped u0 and u1 are nacked as always, A2 and B2 go back without an attempt
    assert (counts.acked, counts.retried, counts.released, counts.dead) == (2, 4, 2, 0)
    assert rows(pg, "fifo") == {"A1": ("warm", 1), "B1": ("warm", 1), "u0": ("warm", 1),
                                "u1": ("warm", 1), "A2": ("warm", 0), "B2": ("warm", 0)}
    assert set(JOURNAL.runs) == {ids["A0"], ids["B0"], ids["A1"]}  # the rest never ran

    second = redelivered(tq, pg, "fifo", ids)
    # A2 and B2 kept their places, the retries took the back of the line: with room for
    # several active tasks per group, a retry goes behind its group's other active tasks
    # (as a worker's nack does); each group's records stay in that order
    assert second == ["A2", "B2", "A1", "u0", "B1", "u1"]
    assert JOURNAL.attempts[ids["A1"]] == [1, 2]
    assert JOURNAL.attempts[ids["A2"]] == [1]  # released: its first run, first attempt
    assert JOURNAL.attempts[ids["B2"]] == [1]
    assert JOURNAL.attempts[ids["B1"]] == [2]  # reported unrun: an attempt counted
    assert sorted(JOURNAL.runs.values()) == [1] * 7 + [2]


def test_a_fifo_processor_skipping_the_failed_group_acks_the_others(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions) -> None:
    ids = fifo_queue(tq, "skip", "fifo_skip_group")
    JOURNAL.keep_events = True
    counts = Dispatcher(tq.ctx, functions).dispatch_once("skip")
    [event] = JOURNAL.events
    check_records(event, ids)
    # reported: A1 and A2 only; A1 nacked, A2 given back, every other record acked
    assert (counts.acked, counts.retried, counts.released, counts.dead) == (6, 1, 1, 0)
    assert rows(pg, "skip") == {"A1": ("warm", 1), "A2": ("warm", 0)}
    assert set(JOURNAL.runs) == {ids[n] for n in ("A0", "B0", "A1", "u0", "B1", "u1", "B2")}

    assert redelivered(tq, pg, "skip", ids) == ["A2", "A1"]
    assert JOURNAL.attempts[ids["A1"]] == [1, 2]
    assert JOURNAL.attempts[ids["A2"]] == [1]


@pytest.mark.parametrize("function", ["fifo", "fifo_skip_group"])
def test_one_at_a_time_a_failed_head_runs_again_before_its_group_goes_on(
        tq: Tierq, pg: psycopg.Connection[Any], functions: LocalFunctions,
        function: str) -> None:
    """The default ``group_max_leased`` (1): a batch holds one task per group, the failed
    head is retried first, and its group's order holds across batches."""
    tq.put_queue("strict", {"consumer": {"function": f"tests.dispatch.consumers:{function}",
                                         "batch_size": 10},
                            "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    queued = tq.enqueue("strict", [{"payload": {"n": name, "fail_once": name == "A1"},
                                    **({"group": group} if group else {})}
                                   for name, group in LAYOUT])
    ids = {name: str(q.id) for (name, _), q in zip(LAYOUT, queued, strict=True)}
    JOURNAL.keep_events = True
    run_until(tq, lambda: not rows(pg, "strict"))
    batches = [names_of(event, ids) for event in JOURNAL.events]
    for event in JOURNAL.events:
        check_records(event, ids)
    # one task per group per batch; A1 fails in the second batch (beside B1), and the
    # next batch runs it again, its group waiting for it (A2 still held)
    assert batches[0] == ["A0", "B0", "u0", "u1"]
    assert batches[1] == ["A1", "B1"]
    assert "A1" in batches[2] and "A2" not in batches[2]
    if function == "fifo":
        assert batches[2] == ["A1", "B1"]  # both retried, in their nacks' order
    runs = [name for batch in batches for name in batch]
    assert [n for n in runs if n.startswith("A")] == ["A0", "A1", "A1", "A2"]
    assert [n for n in runs if n.startswith("B")] == (
        ["B0", "B1", "B1", "B2"] if function == "fifo" else ["B0", "B1", "B2"])
    # B1 was reported unrun by the default processor: an attempt counted, as its group's
    # first reported record
    assert JOURNAL.attempts[ids["B1"]] == ([2] if function == "fifo" else [1])
    assert JOURNAL.attempts[ids["A1"]] == [1, 2]


def test_a_claimed_grouped_task_carries_its_seq_from_every_tier(
        make_tq: Any, pg: psycopg.Connection[Any]) -> None:
    """The seq that records carry is the row's, whichever path made the task warm: the
    enqueue, a cold -> warm promotion (warm_max 4 leaves most heads cold), a release of a
    held task; and a group named with quotes and backslashes is delivered as named."""
    tq = make_tq(warm_max=4)
    names = [f'g{i} "q" \\ {i}' for i in range(6)]
    made = tq.enqueue("q", [{"payload": {"n": n}, "group": names[n % 6]} for n in range(18)]
                      + [{"payload": {"n": "free"}}])
    assert {o.state for o in made} == {"warm", "cold", "held"}
    seen: dict[str, list[int]] = {}
    while True:
        claimed = tq.claim("q", max=3)
        if not claimed:
            break
        found = dict(pg.execute("SELECT id::text, seq FROM tierq_tasks WHERE id = ANY(%s)",
                                ([t.id for t in claimed],)).fetchall())
        for t in claimed:
            if t.group is None:
                assert t.seq is None
                continue
            assert t.seq == found[str(t.id)]
            seen.setdefault(t.group, []).append(t.payload["n"])
        tq.ack("q", claimed)
    assert seen == {name: [i, i + 6, i + 12] for i, name in enumerate(names)}
