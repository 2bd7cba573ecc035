"""One pair's warm tier failing during a maintenance pass.

In cluster mode each (queue, tenant) lives on one Valkey master; when that master is down
(connection refused, CLUSTERDOWN, TRYAGAIN), only its pairs fail. A pass records the pair as
failed, counts it as visited (its walk's cursor moves past it) and goes on with the next
pair, so the pairs on the other masters keep their lease expiry, reconciliation, promotion
and due tasks; the failed pair is tried again on a later pass. The rest of the pass passes
over the other pairs of the same master without calling it (a master that does not answer
may cost the client's whole timeout per call, which would spend the pass's budget). A
statement of the pair's that PostgreSQL cancelled at the pass's statement or lock timeout
(``DatabaseTimedOut``: a row held, a slow plan) fails that pair alone the same way, without
passing over others, as does an error reply to one of the pair's scripts (``broken``: a key
of the wrong type, an entry a script cannot read), which would otherwise end every pass at
the same pair (logged as an error for an operator). A row of the pair's that the pass
only records and finds held by another transaction (``held``: the mover's cold-mode record
in its registry row) is passed over and the pair listed the same way. A queue whose stored
settings the settings model refuses (``refused_settings``: a value the table allows but
the model does not, a row written by hand) fails each of its pairs alone too: it would
otherwise end every pass at its first pair. A reply that speaks for the whole server (a
replica answering after a failover, a permission refused, a script missing, a busy or
resharding node: ``tierq.dal.valkey_replies``) ends the pass at once, as before. Any other
PostgreSQL failure still ends the pass: every pair needs it."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis
from pydantic import ValidationError

from tierq.dal.valkey_replies import server_wide
from tierq.errors import DatabaseTimedOut, WarmTierUnavailable
from tierq.logic import ready_tenants
from tierq.logic.context import Context, Pair

logger = logging.getLogger(__name__)

def note_ready_tenants(ctx: Context, job: str, queue: str, tenants: Sequence[str],
                       failed: list[str]) -> None:
    """Enter ``tenants`` in ``queue``'s ready-tenant index (logic/ready_tenants.py) for a
    maintenance pass of ``job``. An index Valkey refuses (a key of the wrong type) is
    logged as an error and the queue listed in ``failed``, so the pass goes on with the
    other queues; a reply that speaks for the whole server is raised."""
    try:
        ready_tenants.note(ctx, queue, tenants)
    except redis.ResponseError as exc:
        if server_wide(exc):
            raise
        if queue not in failed:
            failed.append(queue)
        logger.error("%s: Valkey refused an entry in queue %r's ready-tenant index; tried "
                     "again next pass: %s", job, queue, exc, extra={"job": job, "queue": queue})


def refused(exc: ValidationError) -> str:
    """A settings model's refusal in one line: each field with its message."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


class PairFailures:
    """The pairs (``"queue|tenant"`` in ``failed``, the pass summary's list) and masters
    whose warm tier failed in one pass of ``job``."""

    def __init__(self, job: str, ctx: Context, failed: list[str]) -> None:
        self.job = job
        self.ctx = ctx
        self.failed = failed
        self.masters: set[str] = set()

    def skip(self, pair: Pair) -> bool:
        """Whether the pair's master already failed in this pass (the pair is then listed
        as failed too): the caller passes over it, as visited."""
        if not self.masters:
            return False
        master = self.ctx.warm.master_of(*pair)
        if master is None or master not in self.masters:
            return False
        self._list(pair)
        logger.debug("%s: queue %r tenant %r passed over: its master failed in this pass",
                     self.job, pair[0], pair[1])
        return True

    def record(self, pair: Pair, exc: WarmTierUnavailable, *, when: str = "") -> None:
        """List the pair as failed and log why; the driver's detail (hosts, ports) goes to
        the log only."""
        self._list(pair)
        master = self.ctx.warm.master_of(*pair)
        if master is not None:
            self.masters.add(master)
        logger.warning("%s: Valkey failed for queue %r tenant %r%s; its master's pairs are "
                       "passed over until the next pass: %s", self.job, pair[0], pair[1],
                       f" {when}" if when else "", exc.detail or exc.message,
                       extra={"job": self.job, "queue": pair[0], "tenant": pair[1]})

    def timed_out(self, pair: Pair, exc: DatabaseTimedOut) -> None:
        """List the pair as failed: PostgreSQL cancelled one of its statements at the pass's
        timeout (its transaction rolled back); the next pass tries it again."""
        self._list(pair)
        logger.warning("%s: PostgreSQL timed out for queue %r tenant %r; it is tried again "
                       "next pass: %s", self.job, pair[0], pair[1], exc.detail or exc.message,
                       extra={"job": self.job, "queue": pair[0], "tenant": pair[1]})

    def held(self, pair: Pair) -> None:
        """List the pair as failed: a row of its that the pass only records (its registry
        row) was held by another transaction and passed over, not waited for; the next
        visit writes it."""
        self._list(pair)
        logger.warning("%s: the registry row of queue %r tenant %r is held by another "
                       "transaction; its record is written by a later visit", self.job,
                       pair[0], pair[1],
                       extra={"job": self.job, "queue": pair[0], "tenant": pair[1]})

    def broken(self, pair: Pair, exc: redis.ResponseError) -> None:
        """List the pair as failed: Valkey answered one of its scripts with an error (its
        keys are in a state no script expects, for an operator to look at); the other
        pairs, of its master too, go on, and the next pass tries it again. A reply that
        speaks for the whole server is raised here (``server_wide``)."""
        if server_wide(exc):
            raise exc
        self._list(pair)
        logger.error("%s: Valkey refused a script for queue %r tenant %r; it is tried again "
                     "next pass: %s", self.job, pair[0], pair[1], exc,
                     extra={"job": self.job, "queue": pair[0], "tenant": pair[1]})

    def refused_settings(self, pair: Pair, exc: ValidationError) -> None:
        """List the pair as failed: its queue's stored settings are refused (a value the
        table allows but the settings model does not: a row written by hand, for an
        operator to fix); the other pairs go on, and the next pass tries it again."""
        self._list(pair)
        logger.error("%s: the stored settings of queue %r are refused, so tenant %r is "
                     "passed over until they are fixed: %s", self.job, pair[0], pair[1],
                     refused(exc), extra={"job": self.job, "queue": pair[0], "tenant": pair[1]})

    def _list(self, pair: Pair) -> None:
        name = f"{pair[0]}|{pair[1]}"
        if name not in self.failed:
            self.failed.append(name)
