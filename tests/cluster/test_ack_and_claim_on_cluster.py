"""An ack that claims the next tasks on a three-master cluster: the tests of one Valkey
(tests/integration/test_ack_and_claim.py) again, with this folder's stores. The drop rides
in the claim's pipeline, routed to its pair's master."""

from __future__ import annotations

import os
import signal
from typing import Any

from tests.integration.test_ack_and_claim import (  # noqa: F401 (collected here again)
    QUEUE,
    test_a_claim_error_of_another_kind_is_internal_and_the_ack_stands,
    test_a_claim_that_sends_nothing_sends_the_drop_alone,
    test_a_claim_that_waits_sends_the_drop_before_it_waits,
    test_a_failed_drop_is_the_answer_and_the_claimed_tasks_go_back,
    test_an_ack_without_its_lease_is_rejected_and_the_claim_runs,
    test_the_ack_is_done_and_the_next_tasks_leased,
    test_the_drop_rides_in_the_claim_s_round_trip,
    test_under_max_leased_the_acked_leases_make_room,
)
from tests.support.cluster import node_of, serve_own_slots, tenants_on_every_node
from tierq.config import Settings
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq
from tierq.local.services.process import wait_pid_gone
from tierq.logic.context import OffsetClock
from tierq.models import ClaimRequest


def test_a_claim_on_a_stopped_master_leaves_the_ack_and_its_drop_whole(
        partial_cluster, app_database_url, clean_stores) -> None:
    """The ack's tenant on a master that answers, the claim's on one that is down: the
    round trip the drop went in fails (the cluster pipeline writes nothing when one of its
    masters refuses), so the drop is sent again alone; the ack stands, its leases are
    dropped, and the answer says the claim failed."""
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        client: Any = tq.warm.client
        tenants = tenants_on_every_node(client, QUEUE, per_node=1)
        acked, claimed = tenants[0], next(
            t for t in tenants if node_of(client, QUEUE, t) != node_of(client, QUEUE, tenants[0]))
        tq.enqueue(QUEUE, [{"payload": i, "tenant": t} for t in (acked, claimed)
                           for i in range(2)])
        got = tq.claim(QUEUE, ClaimRequest(max=2, tenant=acked))
        serve_own_slots(partial_cluster)
        port = int(node_of(client, QUEUE, claimed).split(":")[1])
        pid = partial_cluster.node_pids()[partial_cluster.ports.index(port)]
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)
        answer = tq.ack_and_claim(QUEUE, got, ClaimRequest(max=2, tenant=claimed))
        assert sorted(answer.acked) == sorted(t.id for t in got)
        assert answer.tasks == [] and answer.claim_error == "unavailable"
        assert client.zcard(PairKeys.of(QUEUE, acked).leased) == 0
        assert [tq.ctx.store.task_by_id(QUEUE, t.id) for t in got] == [None, None]
