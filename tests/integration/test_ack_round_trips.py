"""An ack's Valkey round trips, counted on the wire (bench/enqueue_round_trips.py's
``Wire``): the completion marker of a pair's tasks (logic/waits.py) goes in the pipeline
of that pair's lease drop, and a marker Valkey refuses is logged while the ack stands."""

from __future__ import annotations

import logging

import pytest
import redis

from tests.integration import ack_pairs_scenarios
from tests.integration.helpers import counted_sends
from tierq.dal.lua_calls import LeaseDrop
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
    with counted_sends(tq) as wire:
        result = tq.ack(QUEUE, got)
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
    # (not counted: it loads the scripts of an ack with results)
    tq.ack(QUEUE, [{"id": first.id, "lease_token": first.lease_token, "result": 0}])
    tq.heartbeat(QUEUE, [{"id": got[0].id, "lease_token": got[0].lease_token,
                          "progress": {"at": 9}}])
    with counted_sends(tq) as wire:
        result = tq.ack(QUEUE, [{"id": t.id, "lease_token": t.lease_token, "result": 1}
                                for t in got])
    assert len(result.acked) == 3
    assert wire.sends == 2, (wire.sends, dict(wire.commands))
    assert tq.get_task(QUEUE, got[0].id).progress == {"at": 9}
    assert tq.get_task(QUEUE, got[1].id).progress is None
    assert valkey.hlen(PairKeys.of(QUEUE, TENANT).progress) == 0


def test_an_ack_of_ten_tenants_is_two_round_trips(tq, valkey):
    """A claim naming no tenant hands out tasks of several tenants: the ack checks (and
    marks) all their leases in one pipeline, then drops every pair's leases in one more,
    with each pair's completion markers and throughput count (11 round trips when each
    pair's drop was a round trip of its own)."""
    tq.put_queue(QUEUE, {})
    tenants = [f"t{i}" for i in range(10)]
    tq.enqueue(QUEUE, [{"payload": {"n": i}, "tenant": t} for t in tenants for i in range(3)])
    got = tq.claim(QUEUE, max=30)
    assert sorted({t.tenant for t in got}) == tenants and len(got) == 30
    first = [next(t for t in got if t.tenant == tenant) for tenant in tenants]
    tq.ack(QUEUE, first)  # (not counted: it loads the scripts and notes the tenants)
    rest = [t for t in got if t not in first]
    with counted_sends(tq) as wire:
        result = tq.ack(QUEUE, rest)
    assert len(result.acked) == 20 and not result.rejected
    assert wire.commands["lease_check"] == 10, dict(wire.commands)
    assert wire.commands["lease_drop"] == 10, dict(wire.commands)
    assert wire.commands["task_finished"] == 10, dict(wire.commands)
    # one pipeline of the ten checks, then one of the ten drops, markers and counts
    assert wire.sends == 2, (wire.sends, dict(wire.commands))
    for tenant in tenants:
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).leased) == 0
        assert tq.throughput(QUEUE, tenant=tenant).acked_total == 3
        finished = {v.decode() for v in valkey.hkeys(PairKeys.of(QUEUE, tenant).finished)}
        assert {str(t.id) for t in got if t.tenant == tenant} <= finished
    # acked once: a second ack of one of them is refused (its lease is gone)
    assert [r.reason for r in tq.ack(QUEUE, rest[:1]).rejected] == ["not_owner"]


def test_an_ack_of_tenants_drops_leases_counts_gives_back_and_wakes(tq, valkey):
    ack_pairs_scenarios.an_ack_of_tenants_drops_every_lease(tq, valkey, ["a", "b", "c"])


def test_an_ack_of_tenants_after_valkey_lost_its_scripts(tq, valkey):
    """Every script of the pipeline (drops, markers, counts, give-back, pushes) is loaded
    and run again."""
    ack_pairs_scenarios.an_ack_of_tenants_drops_every_lease(tq, valkey, ["a", "b", "c"],
                                                            scripts_lost=True)


def test_a_pair_whose_drop_fails_is_raised_after_the_others(tq, valkey):
    """One pair's drop answers an error: every other pair's leases are dropped and counted
    in the same pipeline before the error is raised (the ack is committed already)."""
    tq.put_queue(QUEUE, {})
    tenants = ["a", "b", "c"]
    tq.enqueue(QUEUE, [{"payload": {"n": i}, "tenant": t} for t in tenants for i in range(2)])
    got = tq.claim(QUEUE, max=6)
    got.sort(key=lambda t: t.tenant != "b")  # (b's pair first)
    valkey.delete(PairKeys.of(QUEUE, "b").lease_of)
    valkey.set(PairKeys.of(QUEUE, "b").lease_of, "not a hash")  # (HMGET: WRONGTYPE)
    with pytest.raises(redis.ResponseError):
        tq.ack(QUEUE, got)
    for tenant in ["a", "c"]:
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).leased) == 0
        assert tq.throughput(QUEUE, tenant=tenant).acked_total == 2
    assert all(tq.ctx.store.task_by_id(QUEUE, t.id) is None for t in got)  # (committed)


def test_a_pair_of_more_leases_than_one_call_holds(tq, valkey, monkeypatch):
    """A pair with more members than one drop call takes goes in several calls of the same
    pipeline, beside the other pairs'."""
    monkeypatch.setattr(LeaseDrop, "items_per_call", classmethod(lambda cls: 3))
    tq.put_queue(QUEUE, {})
    tq.enqueue(QUEUE, [{"payload": {"n": i}, "tenant": t} for t in ["a", "b"]
                       for i in range(8)])
    got = tq.claim(QUEUE, max=16)
    tq.ack(QUEUE, got[:1])  # (not counted: it loads the scripts)
    with counted_sends(tq) as wire:
        result = tq.ack(QUEUE, got[1:])
    assert len(result.acked) == 15
    assert wire.commands["lease_drop"] == 6 and wire.sends == 2, (wire.sends,
                                                                  dict(wire.commands))
    for tenant in ["a", "b"]:
        assert valkey.zcard(PairKeys.of(QUEUE, tenant).leased) == 0
