"""A request costs its page, not the backlog: a page of running leases reads the page from
the pair's ``started`` set (lua/running_page.lua), a queue's view reads counters and the
heads of its lines, and a queue-wide claim or the dispatcher visits a window of the
queue's ready-tenant index (logic/ready_tenants.py), never every registered tenant."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
import redis

from tests.support.stores import TierqFactory
from tierq.dal.warm_tier import RUNNING_CALL_LEASES, RUNNING_SCAN_SLACK, PairKeys, QueueKeys
from tierq.engine import Tierq
from tierq.errors import WarmTierUnavailable
from tierq.logic import queues as queue_logic
from tierq.logic import ready_tenants

K = PairKeys.of("q", "_")
INDEX = QueueKeys.ready_tenants("q")


def calls_of(valkey: redis.Redis, command: str) -> int:
    stats = valkey.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def lease_many(tq: Tierq, n: int, *, per_claim: int = 100, tenant: str = "_") -> list[Any]:
    """``n`` leases of one pair, claims of ``per_claim`` a millisecond apart or more (the
    leases of one claim share their start: ties the cursors must order by id)."""
    for start in range(0, n, 500):
        tq.enqueue("q", [{"payload": i, "tenant": tenant}
                         for i in range(start, min(n, start + 500))])
    held: list[Any] = []
    while len(held) < n:
        held += tq.claim("q", max=min(per_claim, n - len(held)), tenant=tenant,
                         lease_seconds=600)
        tq.ctx.clock.advance(0.005)
    return held


def page_all(tq: Tierq, limit: int) -> list[tuple[int, str]]:
    """Every lease of the pair, read ``limit`` a call; each call's position as the next's."""
    seen: list[tuple[int, str]] = []
    after: tuple[int, str] | None = None
    while True:
        leases, after = tq.ctx.warm.running_page("q", "_", after=after, limit=limit)
        seen += [(lease.started_ms, lease.id) for lease in leases]
        if after is None:
            return seen


def test_pages_go_through_every_lease_once_in_start_order(tq: Tierq):
    held = lease_many(tq, 1050)
    for limit in (1, 7, 100, 200, 5000):
        seen = page_all(tq, limit)
        assert len(seen) == len(set(seen)) == 1050, limit
        assert seen == sorted(seen)
        assert {i for _, i in seen} == {str(t.id) for t in held}


def test_a_cursor_whose_lease_ended_goes_on_after_it(tq: Tierq):
    """The cursor's own lease is acked between two pages (its entry gone): the next page
    starts after it all the same, found among the leases of that very millisecond."""
    held = lease_many(tq, 300)
    first, after = tq.ctx.warm.running_page("q", "_", limit=150)
    assert after is not None and after[1] == first[-1].id
    by_id = {str(t.id): t for t in held}
    tq.ack("q", [by_id[first[-1].id], by_id[first[10].id]])
    rest: list[Any] = []
    while after is not None:
        more, after = tq.ctx.warm.running_page("q", "_", after=after, limit=200)
        rest += more
    assert [x.id for x in first] + [x.id for x in rest] == \
        [i for _, i in sorted((x.started_ms, x.id) for x in first + rest)]
    assert len(first) + len(rest) == 300 and not {x.id for x in first} & {x.id for x in rest}


def test_a_page_reads_the_page_not_the_pair(tq: Tierq, valkey: redis.Redis):
    """10,000 entries of leases that started later and have ended (no lease names them:
    a read would remove them) sit after 20 live leases: a page of 10 reads none of them,
    and a call past the live leases removes at most its scan."""
    lease_many(tq, 20, per_claim=20)
    last = int(valkey.zrange(K.started, -1, -1, withscores=True)[0][1])
    valkey.zadd(K.started, {f"gone-{i:05d}": last + 1000 + i for i in range(10_000)})
    page, after = tq.ctx.warm.running_page("q", "_", limit=10)
    assert len(page) == 10 and valkey.zcard(K.started) == 10_020
    page, after = tq.ctx.warm.running_page("q", "_", after=after, limit=10)
    assert len(page) == 10 and valkey.zcard(K.started) == 10_020
    page, after = tq.ctx.warm.running_page("q", "_", after=after, limit=10)
    assert page == [] and after is not None  # (ended leases only: passed over)
    assert 10_020 - valkey.zcard(K.started) <= 10 + RUNNING_SCAN_SLACK


def test_the_reaper_removes_ended_entries_of_started_a_slice_a_visit(
        tq: Tierq, valkey: redis.Redis):
    """Entries of ended leases (as a tierq that ended leases without ``started`` left them)
    after 20 live leases: each reaper pass reads one call's slice after the cursor kept in
    the pair's meta and removes the ended entries it reads, until none is left; the live
    leases stay, and the cursor starts over at the end."""
    lease_many(tq, 20, per_claim=20)
    last = int(valkey.zrange(K.started, -1, -1, withscores=True)[0][1])
    valkey.zadd(K.started, {f"gone-{i:05d}": last + 1000 + i for i in range(2_000)})
    sizes = [valkey.zcard(K.started)]
    while sizes[-1] > 20 and len(sizes) < 20:
        tq.run_reaper()
        sizes.append(valkey.zcard(K.started))
    assert sizes[-1] == 20 and len(sizes) > 5  # a slice a pass, not the whole index
    assert max(a - b for a, b in pairwise(sizes)) <= \
        RUNNING_CALL_LEASES + RUNNING_SCAN_SLACK
    tq.run_reaper()
    assert valkey.hget(K.meta, "started_after") is None  # (at the end: from the start)
    assert len(page_all(tq, 200)) == 20


def test_the_running_route_logic_yields_a_page_lazily(tq: Tierq, valkey: redis.Redis):
    """``pair_leases`` reads a window at a time as the page is consumed."""
    lease_many(tq, 1200)
    before = calls_of(valkey, "evalsha")
    leases = queue_logic.pair_leases(tq.ctx, ("q", "_"), window=50)
    page = [next(leases) for _ in range(50)]
    assert calls_of(valkey, "evalsha") - before == 1
    assert [queue_logic.lease_key(x) for x in page] == sorted(
        queue_logic.lease_key(x) for x in page)
    after = queue_logic.lease_key(page[-1])
    rest = list(queue_logic.pair_leases(tq.ctx, ("q", "_"), after))
    assert len(rest) == 1150 and queue_logic.lease_key(rest[0]) > after
    assert {x.worker for x in rest} == {None}
    assert len(tq.running("q")) == 1200


def test_every_way_a_lease_ends_takes_it_out_of_started(make_tq, valkey: redis.Redis):
    tq = make_tq(lease_seconds=10)
    tq.enqueue("q", [{"payload": i} for i in range(6)])
    held = tq.claim("q", max=6)
    assert valkey.zcard(K.started) == 6
    tq.ack("q", held[:1])
    tq.nack("q", [{"id": held[1].id, "lease_token": held[1].lease_token}])
    tq.release("q", [{"id": held[2].id, "lease_token": held[2].lease_token}])
    tq.cancel_task("q", held[3].id)
    assert {m.decode() for m in valkey.zrange(K.started, 0, -1)} == {
        str(t.id) for t in held[4:]}
    tq.ctx.clock.advance(11)
    assert tq.run_reaper().expired >= 2
    assert valkey.zcard(K.started) == 0


def test_a_queue_view_reads_no_lease(tq: Tierq, valkey: redis.Redis):
    """Counts and the oldest ready task come from counters and the heads of the lines:
    a pair's 1,000 leases are never listed (no HGETALL of claims, no lease page)."""
    lease_many(tq, 1000)
    tq.enqueue("q", [{"payload": "a", "priority": 1}, {"payload": "b", "priority": 7}])
    before = (calls_of(valkey, "hgetall"), calls_of(valkey, "evalsha"))
    view = tq.get_queue("q")
    own = tq.tenant_queue("q", "_")
    [row] = [r for r in tq.detailed_counts() if r.queue == "q"]
    assert view.counts.leased == own.counts.leased == row.leased == 1000
    assert view.counts.warm == own.counts.warm == row.warm == 2
    assert row.oldest_ready_at is not None
    assert calls_of(valkey, "hgetall") == before[0]
    # (the view, the tenant's view and the detailed row: a few scripts each)
    assert calls_of(valkey, "evalsha") - before[1] <= 12


def test_the_oldest_ready_task_is_the_oldest_head_of_its_lines(tq: Tierq):
    tq.enqueue("q", [{"payload": "old", "priority": 2}])
    oldest = tq.detailed_counts()[0].oldest_ready_at
    tq.ctx.clock.advance(5)
    tq.enqueue("q", [{"payload": "new", "priority": 9}])
    assert tq.detailed_counts()[0].oldest_ready_at == oldest
    tq.claim("q", max=1)  # the priority-9 task: leased, no longer ready
    assert tq.detailed_counts()[0].oldest_ready_at == oldest
    tq.claim("q", max=1)
    assert tq.detailed_counts()[0].oldest_ready_at is None


# -- the ready-tenant index --------------------------------------------------------------------


def index(valkey: redis.Redis) -> list[str]:
    return [t.decode() for t in valkey.zrange(INDEX, 0, -1)]


def test_enqueues_enter_tenants_and_a_claim_finding_one_empty_takes_it_out(
        tq: Tierq, valkey: redis.Redis):
    tq.enqueue("q", [{"payload": 1, "tenant": "a"}, {"payload": 2, "tenant": "b"}])
    assert index(valkey) == ["a", "b"]
    assert len(tq.claim("q", max=10)) == 2
    assert index(valkey) == ["a", "b"]  # (both had work: the claim took it)
    assert tq.claim("q", max=10) == []
    assert index(valkey) == []  # found empty: taken out


def test_a_cold_admission_enters_its_tenant(make_tq, valkey: redis.Redis):
    tq = make_tq(warm_max=2)
    tq.enqueue("q", [{"payload": i, "tenant": "c"} for i in range(5)])
    valkey.delete(INDEX)
    tq.enqueue("q", [{"payload": 9, "tenant": "c"}])  # the pair is cold now
    assert index(valkey) == ["c"]
    assert len(tq.claim("q", max=10)) >= 2  # (the inline refill brings the cold work)


def test_a_claim_pass_visits_a_window_not_every_registered_tenant(
        tq: Tierq, valkey: redis.Redis):
    """300 tenants have had tasks (registered) and have none: a queue-wide claim visits at
    most CLAIM_WINDOW of them, each visit takes one out, and once they are out a claim
    pass costs a read of the index."""
    tenants = [f"t{i:03d}" for i in range(300)]
    tq.enqueue("q", [{"payload": 1, "tenant": t} for t in tenants[:150]])
    tq.enqueue("q", [{"payload": 1, "tenant": t} for t in tenants[150:]])
    for t in tenants:
        tq.ack("q", tq.claim("q", max=1, tenant=t))
    assert len(index(valkey)) == 300
    window = ready_tenants.CLAIM_WINDOW
    for i in range(5):
        before = calls_of(valkey, "evalsha")
        assert tq.claim("q", max=10) == []
        # (a visit each, and a second look at each pair found empty: tier_stats)
        assert calls_of(valkey, "evalsha") - before <= 2 * window
        assert len(index(valkey)) == max(0, 300 - window * (i + 1))
    before = (calls_of(valkey, "evalsha"), calls_of(valkey, "zrange"))
    assert tq.claim("q", max=10) == []
    assert calls_of(valkey, "evalsha") == before[0]
    assert calls_of(valkey, "zrange") - before[1] <= 2  # (after its turn, then wrapped)
    tq.enqueue("q", [{"payload": 2, "tenant": "t150"}])
    assert [t.tenant for t in tq.claim("q", max=10)] == ["t150"]


def test_windows_wrap_round_and_claims_stay_fair(tq: Tierq, valkey: redis.Redis):
    tenants = [f"t{i:03d}" for i in range(100)]
    tq.enqueue("q", [{"payload": j, "tenant": t} for t in tenants for j in range(3)])
    assert ready_tenants.tenants_after(tq.ctx, "q", "t098", 4) == ["t099", "t000", "t001",
                                                                   "t002"]
    assert ready_tenants.tenants_after(tq.ctx, "q", None, 2) == ["t000", "t001"]
    assert ready_tenants.tenants_after(tq.ctx, "q", "t001", 500) == tenants[2:] + tenants[:2]
    got: dict[str, int] = {}
    for _ in range(60):
        for task in tq.claim("q", max=5):
            got[task.tenant] = got.get(task.tenant, 0) + 1
    # every claim starts one tenant further and shares: 300 tasks, each tenant's 3
    assert sum(got.values()) == 300 and set(got.values()) == {3}


def test_a_tenant_the_index_lost_comes_back_within_one_maintenance_pass(
        tq: Tierq, valkey: redis.Redis):
    """The index lags (a claim's removal raced an enqueue, a lost write): the reaper's pass
    over the pair's warm rows, or the mover's over its cold rows, enters it again."""
    tq.enqueue("q", [{"payload": 1, "tenant": "w"}])
    valkey.zrem(INDEX, "w")
    assert tq.claim("q", max=5) == []  # queue-wide: the index does not name it
    tq.run_reaper()
    assert index(valkey) == ["w"]
    assert [t.tenant for t in tq.claim("q", max=5)] == ["w"]


def test_a_cold_tenant_the_index_lost_comes_back_with_the_mover(make_tq,
                                                                valkey: redis.Redis):
    tq = make_tq(warm_max=1)
    tq.enqueue("q", [{"payload": i, "tenant": "c"} for i in range(4)])
    valkey.zrem(INDEX, "c")
    tq.run_cold_to_warm()
    assert index(valkey) == ["c"]


def test_a_claims_removal_never_loses_an_admission_that_raced_it(
        tq: Tierq, valkey: redis.Redis, monkeypatch):
    """The claim found the pair empty; before its removal lands, an enqueue pushes and
    enters the tenant: the claim's second look sees the task and enters it back."""
    forget = tq.ctx.warm.forget_ready_tenants

    def enqueue_first(queue: str, tenants: Any, id_tag: Any) -> None:
        tq.enqueue("q", [{"payload": "raced", "tenant": "r"}])  # push, then its entry
        forget(queue, tenants, id_tag)  # the claim's removal lands after it

    tq.enqueue("q", [{"payload": "first", "tenant": "r"}])
    assert len(tq.claim("q", max=5)) == 1
    monkeypatch.setattr(tq.ctx.warm, "forget_ready_tenants", enqueue_first)
    assert tq.claim("q", max=5) == []  # found empty: its removal raced the enqueue
    monkeypatch.undo()
    assert index(valkey) == ["r"]
    assert [t.payload for t in tq.claim("q", max=5)] == ["raced"]


def test_tenants_removed_are_entered_back_when_the_second_look_fails(
        tq: Tierq, valkey: redis.Redis, monkeypatch):
    """The removal went through, the look at the pairs after it did not (their master
    not answering): the tenants removed are entered back rather than left out until a
    maintenance pass, since a push into a line with work enters no one on a cluster."""
    from tierq.errors import WarmTierUnavailable

    tq.enqueue("q", [{"payload": "first", "tenant": "r"}])
    assert len(tq.claim("q", max=5)) == 1
    forget = tq.ctx.warm.forget_ready_tenants

    def enqueue_first(queue: str, tenants: Any, id_tag: Any) -> None:
        tq.enqueue("q", [{"payload": "raced", "tenant": "r"}])  # push, then its entry
        forget(queue, tenants, id_tag)  # the claim's removal lands after it

    def look_fails(*args: Any, **kwargs: Any) -> Any:
        raise WarmTierUnavailable("Valkey is not answering")

    monkeypatch.setattr(tq.ctx.warm, "forget_ready_tenants", enqueue_first)
    monkeypatch.setattr(tq.ctx.warm, "stats_of", look_fails)
    ready_tenants.forget(tq.ctx, "q", ["r"])
    monkeypatch.undo()
    assert index(valkey) == ["r"]
    assert [t.payload for t in tq.claim("q", max=5)] == ["raced"]


@pytest.mark.parametrize("reuse_ms", [0, 100])
def test_a_claim_naming_no_tenant_reads_the_index_in_one_round_trip(
        make_tq: TierqFactory, reuse_ms: int):
    """A queue of one tenant wraps round the ready-tenant index at every claim that reads
    it: both halves of the window are read in one pipeline, so the claim is that read and
    its script. A claim that may reuse the window its process last read (within
    ``TIERQ_CLAIM_WINDOW_REUSE_MS``, logic/ready_tenants.py) is its script alone."""
    from bench.enqueue_round_trips import Wire

    tq = make_tq(claim_window_reuse_ms=reuse_ms)
    tq.enqueue("q", [{"payload": i, "tenant": "a"} for i in range(30)])
    tq.claim("q", max=5)  # (not counted: it loads the scripts and sets the cursor)
    wire = Wire()
    wire.names = {s.sha.encode(): name for name, s in tq.ctx.warm.scripts.items()}
    with wire.installed():
        wire.on = True
        got = tq.claim("q", max=5)
        wire.on = False
    assert len(got) == 5
    reads = 0 if reuse_ms else 2
    assert wire.sends == 1 + (reads > 0), (wire.sends, dict(wire.commands))
    assert wire.commands["ZRANGE"] == reads and wire.commands["claim"] == 1, \
        dict(wire.commands)


def test_an_error_reply_to_the_window_read_is_the_warm_tier_unavailable(
        tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's pipeline returns a node's failure as a reply: the claim answers 503
    (WarmTierUnavailable), not 500."""
    monkeypatch.setattr(tq.ctx.warm, "pipeline",
                        lambda commands: [redis.exceptions.ConnectionError("node down"), []])
    with pytest.raises(WarmTierUnavailable):
        tq.ctx.warm.ready_tenants_after("q", "a", 5)
