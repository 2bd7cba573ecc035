"""Push delivery on a three-master cluster: the queue's tenants lie on every master (each
pair its own slot), its limits on the queue's own slot. Each batch still holds one tenant's
tasks, the tenants take turns, and one tenant's failure stays on its own tasks; a tenant
whose master is down passes its turn, and fails a batch only when every tenant failed."""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

import psycopg
import pytest
from redis.cluster import RedisCluster

from tests.dispatch.journal import JOURNAL
from tests.dispatch.support import run_until, task_states
from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tests.support.polling import eventually
from tierq.config import Settings
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.consumers import LocalFunctions
from tierq.local.services import PrivateValkeyCluster
from tierq.local.services.process import wait_pid_gone
from tierq.logic.context import OffsetClock
from tierq.logic.dispatch import Dispatcher, counters_key

pytestmark = pytest.mark.usefixtures("clean_stores")


def tenant_of(event: dict[str, Any]) -> str:
    [tenant] = {r["messageAttributes"]["tenant"]["stringValue"] for r in event["Records"]}
    return tenant


def empty(pg: psycopg.Connection[Any], queue: str) -> bool:
    """Nothing of ``queue`` left but its dead (rows and batch members alike)."""
    return set(task_states(pg, queue)) <= {"dead"}


def test_tenants_on_every_master_take_turns_one_tenant_a_batch(
        tq: Tierq, valkey: RedisCluster, pg: psycopg.Connection[Any],
        functions: LocalFunctions) -> None:
    big, *small = tenants_on_every_node(valkey, "turns", per_node=1)
    assert len({node_of(valkey, "turns", t) for t in [big, *small]}) == 3
    # max_leased makes each claim take its reservation on the queue's slot first
    tq.ctx.consumers = functions
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
    tq.ctx.consumers = functions
    tq.put_queue("charges", {"consumer": {"function": "tests.dispatch.consumers:validate_all",
                                          "batch_size": 10},
                             "max_attempts": 1})
    tq.enqueue("charges", [{"payload": {"n": 0, "card": "4111111111111111"},
                            "tenant": acme}])
    tq.enqueue("charges", [{"payload": {"n": n}, "tenant": globex} for n in range(1, 6)])
    run_until(tq, lambda: empty(pg, "charges"))
    assert task_states(pg, "charges") == {"dead": 1}  # globex's tasks were all acked
    assert pg.execute("SELECT tenant, state, last_error FROM tierq_tasks").fetchall() == [
        (acme, "dead", "function_error: ValidationError")]


def node_of_key(client: RedisCluster, key: str) -> str:
    node = client.get_node_from_key(key)
    return f"{node.host}:{node.port}"


def refused(tq: Tierq, queue: str, tenant: str) -> bool:
    try:
        tq.claim(queue, tenant=tenant, max=1)
    except Unavailable:
        return True
    return False


def test_a_tenant_on_a_stopped_master_passes_its_turn(
        partial_cluster: PrivateValkeyCluster, app_database_url: str, clean_stores: None,
        functions: LocalFunctions, caplog: pytest.LogCaptureFixture) -> None:
    """One master stopped for real (SIGKILL): the batches of a queue whose tenants lie on
    every master serve the others' tenants one after another, none failing (before, a
    batch whose turn came to a tenant of the stopped master failed, and held the queue for
    a second); a batch finds each stopped master once (its other tenants passed over
    without a call). A queue whose every tenant is on the stopped master fails its batch
    and backs off."""
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        tq.ctx.consumers = functions
        client: RedisCluster = tq.warm.client  # type: ignore[assignment]
        # the master to stop holds the wake flag's slot nor the queues' own slots
        masters = {f"{n.host}:{n.port}" for n in client.get_primaries()}
        stopped = sorted(masters - {node_of_key(client, "tq:dispatch:awake")})[0]
        queue, lonely = [q for q in (f"q{i}" for i in range(100))
                         if node_of_key(client, counters_key(q)) != stopped][:2]
        tenants = tenants_on_every_node(client, queue, per_node=2)
        on_stopped = [t for t in tenants if node_of(client, queue, t) == stopped]
        live = [t for t in tenants if t not in on_stopped]
        alone = [t for t in (f"t{i}" for i in range(1000))
                 if node_of(client, lonely, t) == stopped][:2]
        for name in (queue, lonely):
            tq.put_queue(name, {"consumer": {"function": "tests.dispatch.consumers:keep",
                                             "batch_size": 10}})
        tq.enqueue(queue, [{"payload": {"n": n}, "tenant": t} for t in tenants
                           for n in range(2)])
        tq.enqueue(lonely, [{"payload": {"n": 0}, "tenant": t} for t in alone])

        port = int(stopped.split(":")[1])
        serve_own_slots(partial_cluster)
        pid = partial_cluster.node_pids()[partial_cluster.ports.index(port)]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)
        eventually(lambda: refused(tq, queue, on_stopped[0]), timeout=20,
                   what="the stopped master's pair still answers")

        JOURNAL.keep_events = True
        caplog.set_level(logging.INFO, logger="tierq.logic.dispatch")
        dispatcher = Dispatcher(tq.ctx, functions)
        try:
            for _ in live:  # one batch per live tenant, none failing
                counts = dispatcher.dispatch_once(queue)
                assert (counts.batches, counts.acked) == (1, 2)
            assert sorted(tenant_of(e) for e in JOURNAL.events) == sorted(live)
            # a full turn more: the live tenants have nothing left, the stopped master's
            # fail; a call finds their master down, its other tenant is passed over
            caplog.clear()
            assert dispatcher.dispatch_once(queue).batches == 0
            failed = [r.getMessage() for r in caplog.records
                      if "claiming failed" in r.getMessage()]
            assert len(failed) == 1 and any(f"tenant {t!r}" in failed[0]
                                            for t in on_stopped), failed
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
            # an empty pass's poll delay (ms), not the failed batch's backoff (1 s)
            assert dispatcher._states[queue].not_before < time.monotonic() + 0.5

            caplog.clear()  # every tenant of the queue failed: the batch fails
            assert dispatcher.dispatch_once(lonely).batches == 0
            assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] \
                == [f"dispatching a batch of {lonely!r} to tests.dispatch.consumers:keep "
                    "failed"]
            assert dispatcher._states[lonely].not_before > time.monotonic() + 0.5
        finally:
            dispatcher.close()
