"""Rows written cold at once on a cluster: the tests of tests/integration/test_cold_admission.py
run here as they are, and one enqueue over tenants on every master checks each pair on its
own master (the checks go out pipelined, one request per master)."""

from __future__ import annotations

from tests.integration.helpers import drain, mode_of
from tests.integration.test_cold_admission import (  # noqa: F401  (run here on the cluster)
    marked,
    test_a_batch_over_several_tenants_checks_each_pair,
    test_a_record_of_tasks_about_to_be_pushed_goes_when_the_insert_fails,
    test_an_enqueue_into_a_full_warm_set_writes_its_rows_cold_at_once,
    test_an_enqueue_that_found_room_is_pushed_though_others_filled_the_set_meanwhile,
    versions,
)
from tests.support.cluster import node_of, tenants_on_every_node

QUEUE = "cold"


def test_one_enqueue_over_every_master_sends_only_the_full_pairs_cold(make_tq, valkey, pg,
                                                                       marked):  # noqa: F811
    tq = make_tq(warm_max=3)
    tenants = tenants_on_every_node(valkey, QUEUE, per_node=2)
    assert len({node_of(valkey, QUEUE, t) for t in tenants}) == 3
    full = tenants[::2]
    for tenant in full:
        tq.enqueue(QUEUE, [{"payload": i, "tenant": tenant} for i in range(3)])
        assert mode_of(valkey, QUEUE, tenant) == "cold"
        tq.ctx.modes[(QUEUE, tenant)] = "warm"  # as a process that saw it last warm
    seen = marked(tq)
    out = tq.enqueue(QUEUE, [{"payload": 3, "tenant": tenant} for tenant in tenants])
    assert {o.tenant: o.state for o in out} == {
        tenant: "cold" if tenant in full else "warm" for tenant in tenants}
    assert seen.ids == []
    rows = 3 * len(full) + len(tenants)
    assert versions(pg) == (rows, rows)
    for tenant in full:
        assert [t.payload for t in drain(tq, QUEUE, tenant=tenant)] == [0, 1, 2, 3]
