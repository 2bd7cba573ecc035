"""One pair's warm tier failing during a maintenance pass.

In cluster mode each (queue, tenant) lives on one Valkey master; when that master is down
(connection refused, CLUSTERDOWN, TRYAGAIN), only its pairs fail. A pass records the pair as
failed, counts it as visited (its walk's cursor moves past it) and goes on with the next
pair, so the pairs on the other masters keep their lease expiry, reconciliation, promotion
and due tasks; the failed pair is tried again on the next pass. A PostgreSQL failure still
ends the pass: every pair needs it."""

from __future__ import annotations

import logging

from tierq.errors import WarmTierUnavailable
from tierq.logic.context import Pair

logger = logging.getLogger(__name__)


def record_failed_pair(job: str, failed: list[str], pair: Pair, exc: WarmTierUnavailable,
                       *, when: str = "") -> None:
    """Add ``"queue|tenant"`` to the pass's ``failed`` list (once) and log why; the driver's
    detail (hosts, ports) goes to the log only."""
    name = f"{pair[0]}|{pair[1]}"
    if name not in failed:
        failed.append(name)
    logger.warning("%s: Valkey failed for queue %r tenant %r%s; skipped until the next "
                   "pass: %s", job, pair[0], pair[1], f" {when}" if when else "",
                   exc.detail or exc.message,
                   extra={"job": job, "queue": pair[0], "tenant": pair[1]})
