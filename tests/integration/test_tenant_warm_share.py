"""A tenant's share of the warm tier (logic/tenant_budget.py): the ledger and the pairs'
allotments keep one tenant's warm bytes over all its queues under its bound, with the
stated overshoot; a tenant over its bound goes cold while the others are admitted; and the
reproduction of issue 28's "one tenant fills the shared cache"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import count_state, mode_of
from tierq.config import Settings
from tierq.core.ordering import place
from tierq.dal.warm_tier import MARKER_CHARGE, MARKERS_KEPT_AT_LEAST, PairKeys, TenantShare
from tierq.engine import Tierq
from tierq.logic import tenant_budget
from tierq.logic.admission import task_blob
from tierq.logic.tenant_budget import TASK_CHARGE

MiB = 1 << 20
BIG = "x" * 250_000  # a payload of about 250 KB


def usage(tq: Tierq, queues: list[str], tenant: str) -> int:
    """What the tenant's pairs hold against its bound (data plus the per-task charge)."""
    return sum(tq.ctx.warm.pair_usage(q, tenant, charge=TASK_CHARGE)[0] for q in queues)


def allotted(tq: Tierq, queues: list[str], tenant: str) -> int:
    """The sum of the pairs' allotments (meta ``allot``)."""
    return sum(tq.ctx.warm.pair_usage(q, tenant, charge=TASK_CHARGE)[1] for q in queues)


@pytest.fixture(autouse=True)
def _reclaim_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tenant_budget, "RECLAIM_EVERY", 0.0)


# -- settings ---------------------------------------------------------------------------------

def test_the_bound_is_a_quarter_of_the_capacity_unless_set() -> None:
    assert Settings().tenant_warm_bound(0) == 0  # capacity unknown: no bound
    assert Settings().tenant_warm_bound(8 * MiB) == 2 * MiB
    assert Settings().tenant_warm_bound(MiB) == MiB  # never below 1 MiB
    assert Settings(tenant_warm_max_bytes=0).tenant_warm_bound(8 * MiB) == 0
    assert Settings(tenant_warm_max_bytes=3 * MiB).tenant_warm_bound(8 * MiB) == 3 * MiB
    assert Settings(TIERQ_TENANT_WARM_MAX_BYTES="").tenant_warm_max_bytes is None
    with pytest.raises(ValueError, match="TIERQ_TENANT_WARM_MAX_BYTES must be 0"):
        Settings(tenant_warm_max_bytes=1000)


# -- the ledger ---------------------------------------------------------------------------------

def test_the_ledger_grants_up_to_the_bound_and_sets_entries_only_when_quiet(tq: Tierq) -> None:
    warm = tq.ctx.warm
    assert warm.ledger_take("acme", "a", want=600, bound=1000, now_ms=1_000) == 600
    assert warm.ledger_take("acme", "b", want=600, bound=1000, now_ms=1_000) == 400
    assert warm.ledger_take("acme", "c", want=1, bound=1000, now_ms=1_000) == 0
    assert warm.ledger_total("acme") == 1000
    assert warm.ledger_take("globex", "a", want=600, bound=1000, now_ms=1_000) == 600
    # a push gave 100 back (the pair's count of bytes given back: 100): only lowered
    assert warm.ledger_set("acme", "a", allot=None, freed=100, now_ms=1_000,
                           quiet_ms=60_000) == 900
    # a shrink says the pair holds 50: within quiet of the entry's last grant only lowered
    # by what it freed (a grant may still be on its way to the pair) ...
    assert warm.ledger_set("acme", "a", allot=50, freed=110, now_ms=2_000,
                           quiet_ms=60_000) == 890
    # ... after it, the pair's figure is the entry
    assert warm.ledger_set("acme", "a", allot=50, freed=110, now_ms=70_000,
                           quiet_ms=60_000) == 450
    assert warm.ledger_set("acme", "b", allot=0, freed=0, now_ms=70_000, quiet_ms=60_000) == 50
    assert sorted(warm.ledger_queues("acme", 16)) == ["a"]
    assert warm.ledger_total("globex") == 600


def test_a_reclaim_between_a_push_and_its_report_leaves_the_ledger_exact(
        make_tq: Callable[..., Tierq], monkeypatch: pytest.MonkeyPatch) -> None:
    """A push gives part of its pair's allotment back, then a reclaim shrinks the pair and
    sets its ledger entry from the pair's figure, then the push's report reaches the
    ledger: the report must not lower the entry a second time (the ledger would count
    less than the pair holds, and the tenant could pass its bound by that much)."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    chunk = [{"payload": "w" * 200_000} for _ in range(4)]
    assert {o.state for o in tq.enqueue("a", chunk, tenant="acme")} == {"warm"}
    assert tq.ack("a", tq.claim("a", max=10, tenant="acme")).acked
    assert allotted(tq, ["a"], "acme") > 800_000  # kept after the claims emptied the pair
    reports: list[int] = []
    report = tenant_budget.give_back

    def reclaim_first(ctx: Any, queue: str, tenant: str, freed: int) -> None:
        # the push's report is on its way: a reclaim (its entry quiet) runs before it lands
        ctx.clock.advance(ctx.settings.admission_stale_seconds + 1)
        assert tenant_budget.reclaim(ctx, tenant, MiB)
        assert ctx.warm.ledger_total(tenant) == allotted(tq, ["a"], "acme")
        report(ctx, queue, tenant, freed)
        reports.append(freed)

    monkeypatch.setattr(tenant_budget, "give_back", reclaim_first)
    # a small push leaves the pair's allotment far over its usage: it gives the rest back
    assert tq.enqueue("a", [{"payload": "s"}], tenant="acme")[0].state == "warm"
    assert len(reports) == 1
    held = allotted(tq, ["a"], "acme")
    assert held >= usage(tq, ["a"], "acme") > 0
    assert tq.ctx.warm.ledger_total("acme") == held
    # the same report again (a retried call) changes nothing either
    report(tq.ctx, "a", "acme", reports[0])
    assert tq.ctx.warm.ledger_total("acme") == held


def test_reports_in_either_order_count_once(tq: Tierq) -> None:
    """The ledger's 'set' takes the pair's count of bytes given back so far: two reports
    lower the entry by the bytes given back in all, whatever order they arrive in."""
    warm = tq.ctx.warm
    assert warm.ledger_take("acme", "a", want=1000, bound=10_000, now_ms=1_000) == 1000
    # two pushes gave back 100 (count 100), then 200 (count 300); the later report lands first
    assert warm.ledger_set("acme", "a", allot=None, freed=300, now_ms=1_000,
                           quiet_ms=60_000) == 700
    assert warm.ledger_set("acme", "a", allot=None, freed=100, now_ms=1_000,
                           quiet_ms=60_000) == 700
    # a shrink within quiet of the last grant: lowered by what its count adds
    assert warm.ledger_set("acme", "a", allot=250, freed=350, now_ms=2_000,
                           quiet_ms=60_000) == 650
    # a cancelled grant leaves the entry
    assert warm.ledger_take("acme", "a", want=500, bound=10_000, now_ms=3_000) == 500
    assert warm.ledger_cancel("acme", "a", amount=500) == 650


def test_an_allotment_left_by_a_caller_that_stopped_is_recovered(make_tq: Callable[..., Tierq],
                                                                 valkey: redis.Redis) -> None:
    tq = make_tq(tenant_warm_max_bytes=MiB)
    tq.enqueue("a", [{"payload": "x" * 1000}], tenant="acme")
    # a caller took most of the bound for "b" and stopped before pushing
    lost = tq.ctx.warm.ledger_take("acme", "b", want=MiB, bound=MiB,
                                   now_ms=int(tq.ctx.now() * 1000))
    assert lost > 0 and tq.ctx.warm.ledger_total("acme") == MiB
    big = [{"payload": "y" * 100_000} for _ in range(5)]
    assert {o.state for o in tq.enqueue("c", big, tenant="acme")} == {"cold"}  # no room
    tq.ctx.clock.advance(tq.ctx.settings.admission_stale_seconds + 1)
    # once its grant is older than the admissions' staleness, a reclaim sets it from the
    # pair's own figure (none: nothing was pushed), and the tenant has its bound again
    assert tenant_budget.reclaim(tq.ctx, "acme", MiB)
    assert tq.ctx.warm.ledger_total("acme") < 200_000
    tq.run_cold_to_warm()
    assert mode_of(valkey, "c", "acme") == "warm"


# -- the bound over all a tenant's queues -----------------------------------------------------

def test_one_tenant_over_many_queues_stays_under_its_bound_and_others_are_admitted(
        make_tq: Callable[..., Tierq], valkey: redis.Redis,
        pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(tenant_warm_max_bytes=2 * MiB)
    queues = [f"q{i}" for i in range(12)]
    for queue in queues:
        tq.enqueue(queue, [{"payload": BIG} for _ in range(2)], tenant="acme")
    held = usage(tq, queues, "acme")
    # the allotments sum to what the ledger counts, and the usage stays within them
    assert allotted(tq, queues, "acme") == tq.ctx.warm.ledger_total("acme") <= 2 * MiB
    assert 1.5 * MiB < held <= 2 * MiB
    cold = sum(count_state(pg, q, "cold") for q in queues)
    assert cold >= 24 - (2 * MiB) // len(BIG)  # what passed the bound waits cold
    # another tenant is admitted as if acme were not there
    out = tq.enqueue("q0", [{"payload": BIG}, {"payload": 1}], tenant="globex")
    assert [o.state for o in out] == ["warm", "warm"]
    got = tq.claim("q0", max=10, tenant="globex")
    assert len(got) == 2 and tq.ack("q0", got).acked
    # acme's claims free its share: the mover brings its cold work in, within the bound
    for queue in queues[:6]:
        tasks = tq.claim(queue, max=10, tenant="acme")
        assert tq.ack(queue, tasks).acked
    tq.run_cold_to_warm()
    tq.run_cold_to_warm()
    assert sum(count_state(pg, q, "cold") for q in queues) < cold
    assert usage(tq, queues, "acme") <= 2 * MiB
    assert allotted(tq, queues, "acme") <= tq.ctx.warm.ledger_total("acme") <= 2 * MiB


def markers_held(valkey: redis.Redis, queues: list[str], tenant: str) -> int:
    """The completion markers the tenant's pairs keep, both generations."""
    own = 2  # ('@started', '~encoding')
    return sum(max(0, int(valkey.hlen(key)) - own) for q in queues
               for key in (PairKeys.of(q, tenant).finished, PairKeys.of(q, tenant).finished_prev))


def test_completion_markers_stay_within_the_share_and_give_way_to_tasks(
        make_tq: Callable[..., Tierq], valkey: redis.Redis) -> None:
    """A tenant finishing more tasks than its share has room to mark keeps their completion
    markers within its share (and at most MARKERS_KEPT_AT_LEAST a pair beyond it), and its
    new tasks still go warm in every queue: markers give their room back. A tenant without
    a bound keeps every marker (the cap per pair)."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    queues = ["m0", "m1", "m2"]
    for _ in range(6):  # 9,000 tasks: their markers would take 1.1 MiB
        for queue in queues:
            out = tq.enqueue(queue, [{"payload": i} for i in range(500)], tenant="acme")
            assert {o.state for o in out} == {"warm"}
            got = tq.claim(queue, max=500, tenant="acme")
            assert len(got) == 500 and tq.ack(queue, got).acked
        held = usage(tq, queues, "acme")
        assert held <= MiB + len(queues) * MARKERS_KEPT_AT_LEAST * MARKER_CHARGE
    assert 0 < markers_held(valkey, queues, "acme") * MARKER_CHARGE < MiB
    assert allotted(tq, queues, "acme") <= tq.ctx.warm.ledger_total("acme") <= MiB
    free = make_tq(tenant_warm_max_bytes=0)
    for _ in range(6):
        free.enqueue("m0", [{"payload": i} for i in range(500)], tenant="initech")
        assert free.ack("m0", free.claim("m0", max=500, tenant="initech")).acked
    assert markers_held(valkey, ["m0"], "initech") == 3_000


def test_markers_of_tasks_that_were_never_warm_keep_to_the_floor(
        make_tq: Callable[..., Tierq], valkey: redis.Redis) -> None:
    """Cancels of delayed tasks, which never took any of the share, leave markers with no
    room to hold them: a pair keeps at most MARKERS_KEPT_AT_LEAST of them (more than half
    of that), the latest; without a bound, all."""
    for bound, tenant, kept in ((MiB, "acme", MARKERS_KEPT_AT_LEAST), (0, "initech", 300)):
        tq = make_tq(tenant_warm_max_bytes=bound)
        out = tq.enqueue("later", [{"payload": i, "delay_seconds": 3600} for i in range(300)],
                         tenant=tenant)
        for o in out:
            tq.cancel("later", o.id, tenant=tenant)
        held = markers_held(valkey, ["later"], tenant)
        assert kept // 2 < held <= kept if bound else held == kept
        assert tq.get_task("later", out[-1].id, tenant=tenant).state == "cancelled"
        k = PairKeys.of("later", tenant)
        assert valkey.hexists(k.finished, str(out[-1].id))  # (the latest is kept)


def test_leases_count_against_the_bound(make_tq: Callable[..., Tierq]) -> None:
    """A claim turns a waiting task into a lease at the same charge: a tenant cannot grow
    past its bound by claiming and never acking."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    per_push = 500
    total = 0
    for round_ in range(12):
        out = tq.enqueue("small", [{"payload": i} for i in range(per_push)], tenant="acme")
        total += sum(o.state == "warm" for o in out)
        got = tq.claim("small", max=per_push, tenant="acme")  # never acked
        assert round_ > 0 or len(got) == per_push
        tq.run_cold_to_warm()
    assert usage(tq, ["small"], "acme") <= MiB
    leased = int(tq.ctx.warm.client.zcard(PairKeys.of("small", "acme").leased))
    assert leased * TASK_CHARGE <= MiB < 12 * per_push * TASK_CHARGE  # the bound cut it


def test_the_largest_overshoot_is_one_stalled_grant(make_tq: Callable[..., Tierq]) -> None:
    """A grant taken from the ledger whose push reaches its pair more than the admissions'
    staleness later may be set out of the ledger by a reclaim meanwhile: the pairs then
    hold at most that one grant beyond the bound."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    warm = tq.ctx.warm
    now_ms = int(tq.ctx.now() * 1000)
    stalled = warm.ledger_take("acme", "s", want=300_000, bound=MiB, now_ms=now_ms)
    tq.ctx.clock.advance(tq.ctx.settings.admission_stale_seconds + 1)
    assert tenant_budget.reclaim(tq.ctx, "acme", MiB)  # sets "s" from its pair: 0
    assert warm.ledger_total("acme") == 0
    # others take the whole bound
    for q in ("a", "b", "c", "d"):
        tq.enqueue(q, [{"payload": "z" * 60_000} for _ in range(5)], tenant="acme")
    assert warm.ledger_total("acme") <= MiB
    # the stalled push lands with its grant
    blob = task_blob(0, b'"late"', None, 0, 5, 0)
    task_id = "01000000-0000-7000-8000-000000000001"
    warm.push("s", "acme", warm_max=100, warm_max_bytes=10**9, kind="restore",
              now_ms=now_ms, token="t", since_ms=now_ms,
              items=[(task_id, place(0, 1, task_id), blob)],
              share=TenantShare("strict", stalled, TASK_CHARGE, 64 * 1024))
    queues = ["a", "b", "c", "d", "s"]
    assert usage(tq, queues, "acme") <= allotted(tq, queues, "acme") <= MiB + stalled


def test_replacements_grow_a_pair_only_within_its_tenants_bound(
        make_tq: Callable[..., Tierq], pg: psycopg.Connection[Any]) -> None:
    """A replacement (on_conflict=replace) counts its growth against the pair's allotment:
    growth that fits takes more of the tenant's bound; growth past the bound sends the
    replaced tasks cold, where they wait with their new data."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    keyed = [{"payload": i, "key": f"k{i}"} for i in range(5)]
    assert {o.state for o in tq.enqueue("a", keyed, tenant="acme")} == {"warm"}
    # growth within the bound: replaced in place, warm, the allotment grown to hold it
    out = tq.enqueue("a", [{"payload": "y" * 200_000, "key": "k0", "on_conflict": "replace"}],
                     tenant="acme")
    assert out[0].outcome == "updated"
    assert count_state(pg, "a", "cold") == 0
    assert usage(tq, ["a"], "acme") > 200_000
    assert usage(tq, ["a"], "acme") <= allotted(tq, ["a"], "acme")
    assert allotted(tq, ["a"], "acme") <= tq.ctx.warm.ledger_total("acme") <= MiB
    # replacements that would take the tenant past its bound: the tasks wait cold
    bigger = [{"payload": BIG, "key": f"k{i}", "on_conflict": "replace"} for i in range(5)]
    assert {o.outcome for o in tq.enqueue("a", bigger, tenant="acme")} == {"updated"}
    assert count_state(pg, "a", "cold") == 5
    assert usage(tq, ["a"], "acme") <= allotted(tq, ["a"], "acme")
    assert allotted(tq, ["a"], "acme") <= tq.ctx.warm.ledger_total("acme") <= MiB
    # the mover brings back what fits the bound, with the new data
    tq.run_cold_to_warm()
    assert 0 < count_state(pg, "a", "cold") < 5
    assert usage(tq, ["a"], "acme") <= MiB
    got = tq.claim("a", max=10, tenant="acme")
    assert got and {t.payload for t in got} == {BIG}


def test_a_replacement_that_goes_cold_reports_cold(
        make_tq: Callable[..., Tierq], pg: psycopg.Connection[Any]) -> None:
    """A warm task replaced by content past its tenant's bound waits cold, and its enqueue
    outcome and its row say so (the reconciler reads the row); one that fits stays warm."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    keyed = [{"payload": i, "key": f"k{i}"} for i in range(2)]
    fill = [{"payload": BIG}] * 4  # (about 1,000,000 bytes of the tenant's 1 MiB)
    assert {o.state for o in tq.enqueue("a", keyed + fill, tenant="acme")} == {"warm"}
    small = tq.enqueue("a", [{"payload": "s", "key": "k1", "on_conflict": "replace"}],
                       tenant="acme")
    assert (small[0].outcome, small[0].state) == ("updated", "warm")
    out = tq.enqueue("a", [{"payload": BIG, "key": "k0", "on_conflict": "replace"}],
                     tenant="acme")
    assert (out[0].outcome, out[0].state) == ("updated", "cold")
    assert count_state(pg, "a", "cold") == 1
    assert tq.get_task("a", out[0].id).state == "cold"
    assert usage(tq, ["a"], "acme") <= MiB


# -- issue 28's reproduction: one tenant fills the shared cache -------------------------------

def test_a_tenant_spreading_big_tasks_over_60_queues_does_not_starve_another(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        small_valkey: Callable[[int], None]) -> None:
    tq = make_tq()  # the default bound: a quarter of Valkey's maxmemory
    tq.enqueue("other", [{"payload": 0}], tenant="globex")  # scripts loaded, pair made
    assert tq.ack("other", tq.claim("other", tenant="globex")).acked
    small_valkey(24 * MiB)
    tq.ctx.warm.forget_memory()  # (its maxmemory was read, as none, a moment ago)
    maxmemory = int(valkey.config_get("maxmemory")["maxmemory"])
    queues = [f"spread-{i}" for i in range(60)]
    for queue in queues:  # acme never claims
        tq.enqueue(queue, [{"payload": BIG} for _ in range(2)], tenant="acme")
    assert usage(tq, queues, "acme") <= maxmemory // 4
    assert sum(count_state(pg, q, "cold") for q in queues) > 60  # the rest waits cold
    # globex's work is admitted and claimed: no 503 "the warm tier is full"
    for round_ in range(5):
        out = tq.enqueue("other", [{"payload": "y" * 100_000} for _ in range(4)],
                         tenant="globex")
        assert {o.state for o in out} == {"warm"}, round_
        got = tq.claim("other", max=10, tenant="globex")
        assert len(got) == 4 and tq.ack("other", got).acked
    assert int(valkey.info("memory")["used_memory"]) < maxmemory


def test_a_refused_info_is_remembered_and_the_setting_sizes_the_bound(
        make_tq: Callable[..., Tierq], monkeypatch: pytest.MonkeyPatch) -> None:
    """ElastiCache refuses INFO to tierq's user: the refusal is remembered (never asked
    again), free memory is unknown, and the capacity comes from the setting."""
    tq = make_tq(warm_capacity_bytes=40 * MiB)
    asked: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        asked.append("INFO")
        raise redis.ResponseError("NOPERM User tierq has no permissions to run the 'info' "
                                  "command")

    monkeypatch.setattr(tq.ctx.warm.client, "info", refuse)
    assert tq.ctx.warm.memory("q", "acme") is None
    assert tq.ctx.warm.memory("q", "acme", fresh=True) is None
    assert asked == ["INFO"] and tq.ctx.warm.info_refused
    assert tenant_budget.bound(tq.ctx, "q", "acme") == 10 * MiB
    out = tq.enqueue("q", [{"payload": 1}], tenant="acme")
    assert out[0].state == "warm"
    assert 0 < tq.ctx.warm.ledger_total("acme") <= 10 * MiB


def test_a_pair_short_of_its_allotment_keeps_what_it_holds_while_others_are_reclaimed(
        make_tq: Callable[..., Tierq], pg: psycopg.Connection[Any]) -> None:
    tq = make_tq(tenant_warm_max_bytes=MiB)
    chunk = [{"payload": "w" * 200_000} for _ in range(4)]
    assert {o.state for o in tq.enqueue("a", chunk, tenant="acme")} == {"warm"}
    assert tq.ack("a", tq.claim("a", max=10, tenant="acme")).acked
    held = tq.ctx.warm.pair_usage("a", "acme", charge=TASK_CHARGE)[1]
    assert held > 800_000  # "a" keeps its allotment, the ledger is nearly at the bound
    # a push that needs more than the ledger has left: the reclaim leaves "a" alone (its
    # allotment counts in the push's shortfall), so the five that fit the bound go warm
    out = tq.enqueue("a", chunk + chunk[:2], tenant="acme")
    assert [o.state for o in out] == ["warm"] * 5 + ["cold"]
    assert usage(tq, ["a"], "acme") <= MiB


# -- failures of the share's own keys -------------------------------------------------------------

def test_a_share_that_does_not_answer_leaves_the_pair_cold_and_claims_go_on(
        tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> None:
    """room() fails closed: a tenant whose ledger is on a master that does not answer gets
    no room (its pair waits cold) instead of failing a claim over every tenant."""
    from tierq.errors import WarmTierUnavailable

    def down(*_: Any, **__: Any) -> int:
        raise WarmTierUnavailable("the warm tier does not answer")

    monkeypatch.setattr(tq.ctx.warm, "ledger_total", down)
    assert tenant_budget.room(tq.ctx, "a", "acme", MiB) == 0


def test_a_grant_taken_before_a_failed_reclaim_is_the_pairs(
        tq: Tierq, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the ledger gave is returned to the pair even when the reclaim after it fails,
    so no grant is held by the ledger for nobody."""
    from tierq.errors import WarmTierUnavailable

    def down(*_: Any, **__: Any) -> bool:
        raise WarmTierUnavailable("the warm tier does not answer")

    tq.ctx.warm.ledger_take("acme", "other", want=MiB - 1000, bound=MiB, now_ms=1)
    monkeypatch.setattr(tenant_budget, "reclaim", down)
    got = tenant_budget.grant(tq.ctx, "a", "acme", short=5000, limit=MiB)
    assert got == 1000 and tq.ctx.warm.ledger_total("acme") == MiB


def test_the_bound_holds_one_largest_task_and_outlives_a_failed_reading(
        make_tq: Callable[..., Tierq], valkey: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound below one task of the largest size would keep that task cold for good: the
    bound is at least one; and a capacity read once stays when INFO fails later."""
    tq = make_tq(tenant_warm_max_bytes=MiB, max_payload_bytes=MiB)
    assert tenant_budget.bound(tq.ctx, "a", "acme") == tenant_budget.largest_task(tq.ctx) > MiB
    before = valkey.config_get("maxmemory")["maxmemory"]
    valkey.config_set("maxmemory", 64 * MiB)
    try:
        read = make_tq()
        first = tenant_budget.bound(read.ctx, "a", "acme")
        assert first == 16 * MiB  # a quarter of the capacity
        monkeypatch.setattr(read.ctx.warm, "memory", lambda *_, **__: None)
        assert tenant_budget.bound(read.ctx, "a", "acme") == first
    finally:
        valkey.config_set("maxmemory", before)


def test_a_bulk_warm_up_stays_within_the_tenants_share(
        make_tq: Callable[..., Tierq], monkeypatch: pytest.MonkeyPatch,
        pg: psycopg.Connection[Any]) -> None:
    """The Glue feeder's warm-up promotes a bulk load's cold rows within the tenant's share
    when the capacity comes from the setting and INFO is refused, as on ElastiCache (the job
    gets TIERQ_WARM_CAPACITY_BYTES from the template like the functions)."""
    from tierq.logic import bulk

    tq = make_tq(warm_capacity_bytes=8 * MiB)  # a quarter: 2 MiB
    monkeypatch.setattr(tq.ctx.warm.client, "info", _refuse_info)
    rows = [(i, "acme", f"k{i}", 0, f'"{BIG}"', None) for i in range(20)]  # about 5 MB
    with tq.bulk_load("fed", rows=len(rows), tenants=["acme"]) as load, \
            tq.bulk_writer(load) as writer:
        assert writer.write(bulk.copy_text(rows), tenants=["acme"]) == len(rows)
    promoted = tq.bulk_warm_up("fed", ["acme"])
    assert 0 < promoted < len(rows)
    assert usage(tq, ["fed"], "acme") <= 2 * MiB
    assert count_state(pg, "fed", "cold") == len(rows) - promoted


def _refuse_info(*args: Any, **kwargs: Any) -> Any:
    raise redis.ResponseError("NOPERM User tierq has no permissions to run the 'info' command")


def test_a_purged_queue_leaves_the_ledger_and_its_count_starts_afresh(
        make_tq: Callable[..., Tierq]) -> None:
    """A purge drops the pair's keys, its allotment and its count of bytes given back with
    them: the ledger forgets the pair, so reports of the pair's new count (from 0 again)
    lower its entry as they say rather than being taken for reports already seen."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    warm = tq.ctx.warm
    tq.enqueue("a", [{"payload": "w" * 100_000} for _ in range(3)], tenant="acme")
    assert warm.ledger_total("acme") > 0
    warm.ledger_set("acme", "a", allot=None, freed=8_000, now_ms=1, quiet_ms=60_000)
    tq.purge_queue("a")
    assert warm.ledger_total("acme") == 0
    # the pair lives again: grants raise its entry, its reports (count from 0) lower it
    assert warm.ledger_take("acme", "a", want=5_000, bound=MiB, now_ms=2) == 5_000
    assert warm.ledger_set("acme", "a", allot=None, freed=4_000, now_ms=2,
                           quiet_ms=60_000) == 1_000


def test_a_pairs_own_figure_resets_the_count_the_ledger_saw(tq: Tierq) -> None:
    """Valkey lost a pair's keys (its count of bytes given back restarts at 0) without a
    purge: the reclaim's figure, read in the pair's slot, sets the entry and the count
    seen together, so the pair's next reports count again."""
    warm = tq.ctx.warm
    assert warm.ledger_take("acme", "a", want=10_000, bound=MiB, now_ms=1) == 10_000
    assert warm.ledger_set("acme", "a", allot=None, freed=8_000, now_ms=1,
                           quiet_ms=60_000) == 2_000
    # the pair's keys are lost; a quiet reclaim sets its entry from its own figures
    assert warm.ledger_set("acme", "a", allot=0, freed=0, now_ms=100_000,
                           quiet_ms=60_000) == 0
    assert warm.ledger_take("acme", "a", want=5_000, bound=MiB, now_ms=100_001) == 5_000
    assert warm.ledger_set("acme", "a", allot=None, freed=4_000, now_ms=100_001,
                           quiet_ms=60_000) == 1_000


def test_grouped_acks_push_their_released_tasks_within_the_tenants_bound(
        make_tq: Callable[..., Tierq], pg: psycopg.Connection[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A grouped ack pushes the tasks its release made ready in the round trip of its
    lease drop (admission.push_along) as a push that expects no shortfall: when the pair is
    short of allotment the answer is taken up as any push's (a grant, then a strict push, the
    rest cold). The tenant stays within its bound, the ledger counts each push once, and
    every group still runs in order."""
    tq = make_tq(tenant_warm_max_bytes=MiB)
    modes: list[str] = []  # the answers of the pushes sent along
    read = tq.ctx.warm.pushed_along

    def pushed_along(along: Any) -> Any:
        out = read(along)
        modes.append(out.mode)
        return out

    monkeypatch.setattr(tq.ctx.warm, "pushed_along", pushed_along)
    payload = "x" * 60_000
    tq.enqueue("g", [{"payload": {"n": i, "pad": payload}, "group": f"g{i % 6}"}
                     for i in range(36)], tenant="acme")
    seen: dict[str, list[int]] = {}
    done = 0
    for _ in range(200):
        got = tq.claim("g", max=10, tenant="acme")
        if not got:
            if done == 36:
                break
            tq.run_cold_to_warm()  # (what went cold for the bound comes in as room frees)
            continue
        for task in got:
            seen.setdefault(f"g{task.payload['n'] % 6}", []).append(task.payload["n"])
        assert usage(tq, ["g"], "acme") <= MiB
        done += len(tq.ack("g", got).acked)
        assert allotted(tq, ["g"], "acme") <= tq.ctx.warm.ledger_total("acme") <= MiB
    assert done == 36
    assert seen == {f"g{k}": list(range(k, 36, 6)) for k in range(6)}
    assert modes, "no push went along a lease drop"
