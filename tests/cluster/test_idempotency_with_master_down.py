"""Idempotency records in Valkey with one master of the cluster down: a record whose key
lives on a surviving master is kept as usual; only keys of the stopped master answer 503.
(Running the record's script must not need every master: redis-py's Script would first load
it on all of them.)"""

from __future__ import annotations

import hashlib
import os
import signal
import time

from tests.support.cluster import serve_own_slots
from tierq.config import Settings
from tierq.engine import Tierq
from tierq.errors import Unavailable
from tierq.local.services.process import wait_pid_gone
from tierq.logic import idempotency
from tierq.logic.context import OffsetClock


def test_records_on_surviving_masters_are_kept_while_one_master_is_down(
        partial_cluster, app_database_url, clean_stores):
    settings = Settings(database_url=app_database_url, valkey_url=partial_cluster.url,
                        valkey_cluster=True, settings_cache_seconds=0)
    with Tierq(settings=settings, clock=OffsetClock()) as tq:
        client = tq.warm.client
        scopes = [hashlib.sha256(f"scope-{i}".encode()).digest() for i in range(60)]
        master_of = {s: client.get_node_from_key(idempotency.valkey_key(s)).port  # type: ignore[attr-defined]
                     for s in scopes}
        down_port = master_of[scopes[0]]
        serve_own_slots(partial_cluster)
        pid = partial_cluster.node_pids()[partial_cluster.ports.index(down_port)]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_pid_gone(pid, 10)
        time.sleep(1.5)  # past node_timeout: the others mark it failed

        kept, refused = 0, 0
        for scope in scopes:
            try:
                claim = idempotency.claim_in_valkey(tq.ctx, scope, b"fingerprint")
            except Unavailable as exc:
                assert master_of[scope] == down_port, scope.hex()
                assert "127.0.0.1" not in exc.message
                refused += 1
                continue
            assert master_of[scope] != down_port, scope.hex()
            assert isinstance(claim, idempotency.ValkeyClaim)
            claim.finish({"ok": True})
            again = idempotency.claim_in_valkey(tq.ctx, scope, b"fingerprint")
            assert isinstance(again, idempotency.Kept) and again.body == {"ok": True}
            kept += 1
        assert kept > 0 and refused > 0, (kept, refused)
