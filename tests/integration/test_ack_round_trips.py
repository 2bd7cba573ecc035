"""An ack's Valkey round trips, counted on the wire (bench/enqueue_round_trips.py's
``Wire``): the completion marker of a pair's tasks (logic/waits.py) goes in the pipeline
of that pair's lease drop, and a marker Valkey refuses is logged while the ack stands."""

from __future__ import annotations

import logging

from bench.enqueue_round_trips import Wire
from tierq.dal.warm_tier import PairKeys

QUEUE = "rt"
TENANT = "a"


def claimed(tq, n: int):
    tq.put_queue(QUEUE, {})
    tq.enqueue(QUEUE, [{"payload": {"n": i}, "tenant": TENANT} for i in range(n)])
    got = tq.claim(QUEUE, max=n)
    assert len(got) == n
    return got


def test_an_ack_of_one_pair_is_two_round_trips(tq, valkey):
    first, *got = claimed(tq, 4)
    tq.ack(QUEUE, [first])  # (not counted: it loads the scripts)
    valkey.delete(PairKeys.of(QUEUE, TENANT).finished)
    wire = Wire()
    wire.names = {s.sha.encode(): name for name, s in tq.ctx.warm.scripts.items()}
    with wire.installed():
        wire.on = True
        result = tq.ack(QUEUE, got)
        wire.on = False
    assert len(result.acked) == 3
    # verify the tokens, then the drop with its counts and the markers: one pipeline
    assert wire.sends == 2, (wire.sends, dict(wire.commands))
    assert wire.commands["task_finished"] == 1
    finished = PairKeys.of(QUEUE, TENANT).finished
    assert {v.decode() if isinstance(v, bytes) else v
            for v in valkey.hkeys(finished)} == {str(t.id) for t in got} | {"@started", "~encoding"}


def commands(valkey) -> dict[str, int]:
    """Calls per command so far (INFO commandstats)."""
    return {name.removeprefix("cmdstat_"): int(stats["calls"])
            for name, stats in valkey.info("commandstats").items()}


def test_an_ack_without_a_waiter_sends_no_command_per_task(tq, valkey):
    """The completion markers of a 399-task ack are one HSET, and with no wait registered
    nothing is published (lua/task_finished.lua)."""
    first, *got = claimed(tq, 400)
    tq.ack(QUEUE, [first])  # (not counted: it loads the scripts)
    before = commands(valkey)
    assert len(tq.ack(QUEUE, got).acked) == 399
    after = commands(valkey)
    delta = {name: n - before.get(name, 0) for name, n in after.items()
             if n > before.get(name, 0)}
    assert "spublish" not in delta, delta
    assert delta["hset"] <= 2, delta
    assert max(delta.values()) < 20, delta  # (no command runs once per task)
    markers = valkey.hkeys(PairKeys.of(QUEUE, TENANT).finished)
    assert len(markers) == 400 + 2  # (every task's marker, and the generation's two fields)
    assert valkey.object("encoding", PairKeys.of(QUEUE, TENANT).finished) == b"hashtable"


def test_a_marker_valkey_refuses_is_logged_and_the_ack_stands(tq, valkey, caplog):
    got = claimed(tq, 2)
    valkey.set(PairKeys.of(QUEUE, TENANT).finished, "not a hash")  # (HSET: WRONGTYPE)
    with caplog.at_level(logging.WARNING, logger="tierq"):
        result = tq.ack(QUEUE, got)
    assert len(result.acked) == 2
    assert any("not told" in r.getMessage() for r in caplog.records)
    assert tq.ctx.store.task_by_id(QUEUE, got[0].id) is None  # (acked: deleted)


def test_an_ack_with_results_reads_the_progress_with_the_check(tq, valkey):
    """An ack that keeps its tasks keeps their last progress: read in the pipeline of the
    token check, so it is still two round trips."""
    first, *got = claimed(tq, 4)
    tq.ack(QUEUE, [first])  # (not counted: it loads the scripts)
    tq.heartbeat(QUEUE, [{"id": got[0].id, "lease_token": got[0].lease_token,
                          "progress": {"at": 9}}])
    wire = Wire()
    wire.names = {s.sha.encode(): name for name, s in tq.ctx.warm.scripts.items()}
    with wire.installed():
        wire.on = True
        result = tq.ack(QUEUE, [{"id": t.id, "lease_token": t.lease_token, "result": 1}
                                for t in got])
        wire.on = False
    assert len(result.acked) == 3
    assert wire.sends == 2, (wire.sends, dict(wire.commands))
    assert tq.get_task(QUEUE, got[0].id).progress == {"at": 9}
    assert tq.get_task(QUEUE, got[1].id).progress is None
    assert valkey.hlen(PairKeys.of(QUEUE, TENANT).progress) == 0


def test_an_ack_checks_every_tenants_leases_in_one_round_trip(tq):
    """A claim naming no tenant hands out tasks of several tenants: the ack checks all
    their tokens in one pipeline, then drops each pair's leases in its own round trip."""
    tq.put_queue(QUEUE, {})
    tenants = ["a", "b", "c"]
    tq.enqueue(QUEUE, [{"payload": {"n": i}, "tenant": t} for t in tenants for i in range(3)])
    got = tq.claim(QUEUE, max=9)
    assert sorted({t.tenant for t in got}) == tenants and len(got) == 9
    tq.ack(QUEUE, got[:1])  # (not counted: it loads the scripts)
    wire = Wire()
    wire.names = {s.sha.encode(): name for name, s in tq.ctx.warm.scripts.items()}
    with wire.installed():
        wire.on = True
        result = tq.ack(QUEUE, got[1:])
        wire.on = False
    assert len(result.acked) == 8 and not result.rejected
    assert wire.commands["ZMSCORE"] == 3, dict(wire.commands)
    # one pipeline of the three ZMSCOREs, then one drop per pair
    assert wire.sends == 1 + 3, (wire.sends, dict(wire.commands))
    # acked once: a second ack of one of them is refused (its lease is gone)
    assert [r.reason for r in tq.ack(QUEUE, got[1:2]).rejected] == ["not_owner"]
