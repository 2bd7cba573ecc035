"""Flows on a cluster: the tests of tests/integration/test_flows.py run here as they are, and
a fan-in whose parents' queues live on every master (each pair in its own slot) releases
its child exactly once while the parents are acked concurrently."""

from __future__ import annotations

import threading
from typing import Any

from tests.integration.helpers import drain
from tests.integration.test_flows import (  # noqa: F401  (run here on the cluster)
    test_a_child_past_its_wait_timeout_is_dead_lettered_waited_too_long,
    test_a_child_waits_for_its_parents_then_its_claim_carries_them,
    test_a_failed_parent_dead_letters_the_child_naming_it,
    test_a_fan_in_of_100_parents_finished_concurrently_releases_its_child_once,
    test_a_flow_is_created_all_or_nothing,
    test_a_released_child_that_goes_cold_keeps_its_parents_through_promotion,
    test_on_parent_failure_run_runs_the_child_told_each_parents_state,
    test_replaying_a_dead_parent_re_arms_its_waiting_child,
)
from tests.support.cluster import node_of


def queues_on_every_master(valkey: Any, count_per_master: int = 1) -> list[str]:
    """Queue names whose pair with the default tenant lies on each master."""
    wanted = {f"{n.host}:{n.port}": count_per_master for n in valkey.get_primaries()}
    chosen: list[str] = []
    for i in range(10_000):
        node = node_of(valkey, f"q{i}", "_")
        if wanted[node] > 0:
            wanted[node] -= 1
            chosen.append(f"q{i}")
        if not any(wanted.values()):
            return chosen
    raise AssertionError("no queue names found on every master")


def test_a_fan_in_over_every_master_releases_its_child_once(make_tq, valkey, pg):
    tq = make_tq()
    queues = queues_on_every_master(valkey)
    parents = [o for i in range(30) for o in tq.enqueue(queues[i % len(queues)],
                                                         [{"payload": i}])]
    [child] = tq.enqueue(queues[0], [{"payload": "join", "after": [p.id for p in parents]}])
    leased = [(q, t) for q in queues for t in tq.claim(q, max=30)]
    assert len(leased) == 31 - 1  # the child waits
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def ack(part: list[tuple[str, Any]]) -> None:
        try:
            barrier.wait()
            for queue, task in part:
                assert tq.ack(queue, [task]).acked == [task.id]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ack, args=(leased[i::6],)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    got = [t for q in queues for t in drain(tq, q)]
    assert [t.id for t in got] == [child.id]
    assert {str(p.id) for p in got[0].parents or []} == {str(p.id) for p in parents}
