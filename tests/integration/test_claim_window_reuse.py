"""A process's queue-wide claims rotate over the window of ready tenants they last read for
up to ``TIERQ_CLAIM_WINDOW_REUSE_MS`` (logic/ready_tenants.py ``claim_window``): the same
turns as a read at every claim, a round trip less, and no tenant left out for longer than
the reuse time.

=====================================  ===========================================
case                                   what the next claim sees
=====================================  ===========================================
busy tenants, within the reuse time    the kept window, one tenant further
another process made a tenant ready    that tenant, once the reuse time is up
this process made a tenant ready       that tenant at once
a pair of the window found empty       a new read (the index without it)
a full window (``CLAIM_WINDOW``)       a read at every claim (nothing kept)
=====================================  ===========================================
"""

from __future__ import annotations

import time

import pytest

from tests.support.stores import TierqFactory
from tierq.logic import ready_tenants


def turns(make_tq: TierqFactory, reuse_ms: int) -> list[str]:
    """The tenants of 12 claims of one task each over 3 tenants with work."""
    tq = make_tq(claim_window_reuse_ms=reuse_ms)
    tq.enqueue("q", [{"payload": i, "tenant": t} for t in "abc" for i in range(6)])
    return [task.tenant for _ in range(12) for task in tq.claim("q", max=1)]


def test_the_turns_are_those_of_a_read_at_every_claim(make_tq: TierqFactory):
    read_each = turns(make_tq, 0)
    assert sorted(read_each) == sorted("abc" * 4)
    assert turns(make_tq, 5_000) == read_each


def test_another_process_s_new_tenant_comes_once_the_reuse_time_is_up(
        make_tq: TierqFactory):
    claimer, producer = make_tq(claim_window_reuse_ms=300), make_tq()
    producer.enqueue("q", [{"payload": i, "tenant": "a"} for i in range(20)])
    assert {t.tenant for t in claimer.claim("q", max=2)} == {"a"}
    producer.enqueue("q", [{"payload": i, "tenant": "b"} for i in range(2)])
    assert {t.tenant for t in claimer.claim("q", max=2)} == {"a"}  # (the kept window)
    time.sleep(0.35)
    assert {t.tenant for t in claimer.claim("q", max=2)} == {"a", "b"}


def test_this_process_s_new_tenant_comes_at_once(make_tq: TierqFactory):
    tq = make_tq(claim_window_reuse_ms=5_000)
    tq.enqueue("q", [{"payload": i, "tenant": "a"} for i in range(20)])
    assert {t.tenant for t in tq.claim("q", max=2)} == {"a"}
    assert "q" in tq.ctx.claim_windows
    tq.enqueue("q", [{"payload": i, "tenant": "b"} for i in range(2)])
    assert {t.tenant for t in tq.claim("q", max=2)} == {"a", "b"}


def test_a_pair_found_empty_ends_the_kept_window(make_tq: TierqFactory):
    claimer, other = make_tq(claim_window_reuse_ms=5_000), make_tq()
    other.enqueue("q", [{"payload": i, "tenant": t} for t in "ab" for i in range(10)])
    assert len(claimer.claim("q", max=2)) == 2
    assert sorted(claimer.ctx.claim_windows["q"][1]) == ["a", "b"]
    other.ack("q", other.claim("q", max=10, tenant="a"))  # a's line emptied elsewhere
    got = claimer.claim("q", max=4)
    assert {t.tenant for t in got} == {"b"}
    assert "q" not in claimer.ctx.claim_windows  # (read again at the next claim)
    assert {t.tenant for t in claimer.claim("q", max=4)} == {"b"}
    assert claimer.ctx.claim_windows["q"][1] == ["b"]


@pytest.mark.parametrize("extra", [0, 1])
def test_a_full_window_is_read_at_every_claim(make_tq: TierqFactory, extra: int):
    """The index holds as many tenants as a window or more: tenants beyond it need their
    turns from the index, so nothing is kept; one fewer is kept."""
    tq = make_tq(claim_window_reuse_ms=5_000)
    count = ready_tenants.CLAIM_WINDOW - 1 + extra
    tq.enqueue("q", [{"payload": 1, "tenant": f"t{i:03d}"} for i in range(count)
                     for _ in range(2)])
    assert len(tq.claim("q", max=count)) == count
    assert ("q" in tq.ctx.claim_windows) == (extra == 0)
