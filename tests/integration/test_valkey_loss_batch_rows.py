"""Invariant 1 with batch rows (``TIERQ_BATCH_ROWS``, migration 0030): the Valkey-loss
tests of tests/integration/test_valkey_loss.py run again with engines that write batch
rows, so the reconciler restores lost members as it restores warm rows, a refused push
moves them out cold, and an acked member is never restored."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration import test_valkey_loss as plain
from tests.integration.helpers import drain
from tests.support.stores import TierqFactory, flush_valkey
from tierq.core.ids import uuid7_strings
from tierq.core.ordering import task_of
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.maintenance import reaper


@pytest.fixture
def make_tq(make_tq: TierqFactory) -> TierqFactory:
    """The session's engines, each writing batch rows."""
    def factory(clock: Any = None, **overrides: Any) -> Tierq:
        return make_tq(clock, batch_rows=True, **overrides)

    return factory


test_flushall_mid_run_then_reaper_delivers_every_unacked_task = \
    plain.test_flushall_mid_run_then_reaper_delivers_every_unacked_task
test_a_lost_meta_reads_as_cold_and_returns_to_warm = \
    plain.test_a_lost_meta_reads_as_cold_and_returns_to_warm
test_reconciler_waits_for_the_grace_period = plain.test_reconciler_waits_for_the_grace_period
test_reconciler_never_resurrects_an_acked_task = \
    plain.test_reconciler_never_resurrects_an_acked_task


def test_these_engines_write_batch_rows(make_tq: TierqFactory, pg: Any) -> None:
    tq = make_tq(warm_max=100)
    created = tq.enqueue("v", [{"payload": i} for i in range(300)])
    assert sum(o.state == "warm" for o in created) == 100
    # (one batch row of 300; the 200 the warm set refused moved out, cold)
    assert pg.execute("SELECT (SELECT sum(tasks) FROM tierq_batches),"
                      " (SELECT count(*) FROM tierq_tasks WHERE state = 'cold')").fetchone() \
        == (300, 200)


def test_members_are_restored_though_the_process_ids_ran_ahead_of_the_clock(
        make_tq: TierqFactory, valkey_url: str, valkey_private: bool) -> None:
    """A process keeps its ids increasing (core/ids.py): after an id made for a later
    instant (a bulk load's, on a clock moved on), its batch keys name that instant. The
    reconciler goes by when a batch row was made (its created_at), not by its key."""
    uuid7_strings(1, now_ms=int(time.time() * 1000) + 3_600_000)  # (an hour ahead)
    tq = make_tq(reconcile_grace_seconds=60)
    tq.enqueue("g", [{"payload": i} for i in range(3)])
    flush_valkey(valkey_url, valkey_private)
    tq.ctx.clock.advance(61)
    assert tq.run_reaper().restored == 3
    assert sorted(t.payload for t in drain(tq, "g")) == [0, 1, 2]


def test_a_pairs_batch_rows_are_reconciled_a_slice_a_pass_after_the_cursor_in_its_meta(
        make_tq: TierqFactory, valkey: Any) -> None:
    """Three batch rows of two members, five of them leased; one member of the newest lost:
    with slices of two places (one batch row) a pass it is found on the third pass, each
    pass (each of another process) going on from the cursor the last one kept in the
    pair's meta; the third knows it read the pair's last batch row, so the next starts
    over."""
    keys = PairKeys.of("q", "_")
    engines = [make_tq(reconcile_grace_seconds=30, lease_seconds=3600) for _ in range(4)]
    tq = engines[0]
    batches = [[str(t.id) for t in tq.enqueue("q", [{"payload": 2 * b},
                                                     {"payload": 2 * b + 1}])]
               for b in range(3)]
    lost = batches[2][1]
    assert lost not in {str(t.id) for t in tq.claim("q", max=5)}
    [member] = [m for m in valkey.zrange(keys.ready, 0, -1) if task_of(m.decode()) == lost]
    valkey.zrem(keys.ready, member)
    valkey.hdel(keys.data, lost)
    restored, kept = [], []
    for engine in engines:
        engine.ctx.clock.advance(31)
        restored.append(reaper.run(engine.ctx, reconcile_batch=2).restored)
        kept.append((valkey.hget(keys.meta, "members_after") or b"").decode())
    assert restored == [0, 0, 1, 0]
    assert kept == [batches[0][0], batches[1][0], "", batches[0][0]]
    assert [str(t.id) for t in tq.claim("q", max=5)] == [lost]


def test_a_members_cursor_that_is_not_a_batch_key_starts_from_the_first(
        make_tq: TierqFactory, valkey: Any) -> None:
    keys = PairKeys.of("q", "_")
    tq = make_tq(reconcile_grace_seconds=30)
    [task] = tq.enqueue("q", [{"payload": 1}])
    [member] = valkey.zrange(keys.ready, 0, -1)
    valkey.zrem(keys.ready, member)
    valkey.hdel(keys.data, str(task.id))
    valkey.hset(keys.meta, "members_after", "not a key")
    tq.ctx.clock.advance(31)
    assert reaper.run(tq.ctx).restored == 1
    assert valkey.hget(keys.meta, "members_after") is None
    assert [t.id for t in tq.claim("q")] == [task.id]


def test_a_pair_of_small_batch_rows_is_reconciled_by_places_not_by_rows(
        make_tq: TierqFactory, valkey: Any) -> None:
    """Thirteen batch rows of one task, twelve leased, the newest lost: slices of five
    places read five batch rows a pass, so the third pass finds it."""
    keys = PairKeys.of("q", "_")
    tq = make_tq(reconcile_grace_seconds=30, lease_seconds=3600)
    for i in range(12):
        tq.enqueue("q", [{"payload": i}])
        tq.ctx.clock.advance(0.01)
    assert len(tq.claim("q", max=12)) == 12
    [lost] = tq.enqueue("q", [{"payload": "lost"}])
    [member] = valkey.zrange(keys.ready, 0, -1)
    valkey.zrem(keys.ready, member)
    valkey.hdel(keys.data, str(lost.id))
    tq.ctx.clock.advance(31)
    assert [reaper.run(tq.ctx, reconcile_batch=5).restored for _ in range(3)] == [0, 0, 1]
    assert [t.payload for t in tq.claim("q", max=5)] == ["lost"]
