"""Consumers of grouped tasks on a three-master cluster: tenants on every master, each with
two groups and ungrouped tasks, run by Powertools' ``SqsFifoPartialProcessor``
(tests/dispatch/consumers.py); each group's order and attempts hold per tenant, whichever
master holds its pair (tests/dispatch/test_fifo_consumers.py on a single node)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from redis.cluster import RedisCluster

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until
from tests.dispatch.test_fifo_consumers import LAYOUT, check_records
from tests.support.cluster import node_of, tenants_on_every_node
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions

pytestmark = pytest.mark.usefixtures("clean_stores")


@pytest.mark.parametrize(("function", "max_leased"), [("fifo", 1), ("fifo_skip_group", 10)])
def test_each_tenants_groups_keep_their_order_on_every_master(
        tq: Tierq, valkey: RedisCluster, pg: psycopg.Connection[Any],
        functions: LocalFunctions, function: str, max_leased: int) -> None:
    tenants = tenants_on_every_node(valkey, "fifo", per_node=1)
    assert len({node_of(valkey, "fifo", t) for t in tenants}) == 3
    tq.ctx.consumers = functions
    tq.put_queue("fifo", {"consumer": {"function": f"tests.dispatch.consumers:{function}",
                                       "batch_size": 10},
                          "group_max_leased": max_leased,
                          "backoff": {"kind": "fixed", "base_seconds": 0, "jitter": 0}})
    ids: dict[str, dict[str, str]] = {}
    for tenant in tenants:
        queued = tq.enqueue("fifo", [{"payload": {"n": name, "fail_once": name == "A1"},
                                      "tenant": tenant, **({"group": group} if group else {})}
                                     for name, group in LAYOUT])
        ids[tenant] = {name: str(q.id) for (name, _), q in zip(LAYOUT, queued, strict=True)}
    JOURNAL.keep_events = True
    run_until(tq, lambda: pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = 'fifo'"
                                     " AND state <> 'done'").fetchone() == (0,))
    tenant_of = [{r["messageAttributes"]["tenant"]["stringValue"] for r in e["Records"]}
                 for e in JOURNAL.events]
    assert all(len(t) == 1 for t in tenant_of)  # a batch holds one tenant's tasks
    for tenant in tenants:
        names = {task_id: name for name, task_id in ids[tenant].items()}
        events = [e for e, t in zip(JOURNAL.events, tenant_of, strict=True) if t == {tenant}]
        for event in events:
            check_records(event, ids[tenant])
        runs = [names[r["messageId"]] for e in events for r in e["Records"]]
        a_runs = [n for n in runs if n.startswith("A")]
        attempts = {name: JOURNAL.attempts[task_id] for name, task_id in ids[tenant].items()}
        assert attempts["A1"] == [1, 2]
        if max_leased == 1:  # strictly in order: the failed head again, then the next
            assert a_runs == ["A0", "A1", "A1", "A2"]
            assert [n for n in runs if n.startswith("B")] == ["B0", "B1", "B1", "B2"]
            assert attempts["B1"] == [2]  # reported after A1's failure: an attempt counted
        else:  # A2 given back without an attempt (it never ran), the retry behind it
            assert a_runs == ["A0", "A1", "A2", "A2", "A1"]
            assert attempts["A2"] == [1]
            assert all(attempts[n] == [1] for n in ("A0", "B0", "B1", "B2", "u0", "u1"))
