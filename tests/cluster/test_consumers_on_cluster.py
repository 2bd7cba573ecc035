"""Push delivery on a three-master cluster: the queue's tenants lie on every master (each
pair its own slot), its limits on the queue's own slot. Each batch still holds one tenant's
tasks, the tenants take turns, and one tenant's failure stays on its own tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from redis.cluster import RedisCluster

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until
from tests.support.cluster import node_of, tenants_on_every_node
from tierq.engine import Tierq
from tierq.local.consumers import LocalFunctions
from tierq.logic import dispatch

pytestmark = pytest.mark.usefixtures("clean_stores")


@pytest.fixture
def functions() -> Iterator[LocalFunctions]:
    local = LocalFunctions()
    previous = dispatch.install(local)
    JOURNAL.reset()
    yield local
    dispatch.install(previous)
    JOURNAL.reset()


def tenant_of(event: dict[str, Any]) -> str:
    [tenant] = {r["messageAttributes"]["tenant"]["stringValue"] for r in event["Records"]}
    return tenant


def empty(pg: psycopg.Connection[Any], queue: str) -> bool:
    return pg.execute("SELECT count(*) FROM tierq_tasks WHERE queue = %s AND state <> 'dead'",
                      (queue,)).fetchone() == (0,)


def test_tenants_on_every_master_take_turns_one_tenant_a_batch(
        tq: Tierq, valkey: RedisCluster, pg: psycopg.Connection[Any],
        functions: LocalFunctions) -> None:
    big, *small = tenants_on_every_node(valkey, "turns", per_node=1)
    assert len({node_of(valkey, "turns", t) for t in [big, *small]}) == 3
    # max_leased makes each claim take its reservation on the queue's slot first
    tq.put_queue("turns", {"consumer": {"function": "tests.dispatch.consumers:keep",
                                        "batch_size": 4, "max_concurrency": 1},
                           "max_leased": 50})
    tq.enqueue("turns", [{"payload": {"n": n}, "tenant": big} for n in range(40)])
    tq.enqueue("turns", [{"payload": {"n": 100 + n}, "tenant": t}
                         for t in small for n in range(2)])
    JOURNAL.keep_events = True
    run_until(tq, lambda: empty(pg, "turns"))
    order = [tenant_of(e) for e in JOURNAL.events]  # (each event holds one tenant)
    assert len(JOURNAL.runs) == 44 and set(JOURNAL.runs.values()) == {1}
    # every tenant is served in the first turn, whatever its master or its backlog
    assert set(order[:3]) == {big, *small}
    assert order[3:] == [big] * 9


def test_a_tenants_failing_batch_stays_on_its_own_tasks(
        tq: Tierq, valkey: RedisCluster, pg: psycopg.Connection[Any],
        functions: LocalFunctions) -> None:
    acme, globex, _ = tenants_on_every_node(valkey, "charges", per_node=1)
    tq.put_queue("charges", {"consumer": {"function": "tests.dispatch.consumers:validate_all",
                                          "batch_size": 10},
                             "max_attempts": 1})
    tq.enqueue("charges", [{"payload": {"n": 0, "card": "4111111111111111"},
                            "tenant": acme}])
    tq.enqueue("charges", [{"payload": {"n": n}, "tenant": globex} for n in range(1, 6)])
    run_until(tq, lambda: empty(pg, "charges"))
    assert pg.execute("SELECT tenant, state, last_error FROM tierq_tasks").fetchall() == [
        (acme, "dead", "function_error: ValidationError")]
