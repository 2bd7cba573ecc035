"""The queue's limits as one claim sees them, behind one call before its pops.

A claim is cut by four limits of the queue's settings. The per-tenant ones
(``tenant_max_leased``, ``tenant_rate``) are checked by the claim script of each pair. The
queue-wide ones (``max_leased``, ``rate``) span tenants whose pairs live in other cluster
slots, so the claim reserves for all its pops at once on the queue's own slot
(lua/capacity_take.lua) through :meth:`ClaimLimits.reserve`:

| deployment      | where the reservation is taken                       | round trips |
| --------------- | ---------------------------------------------------- | ----------- |
| single server   | in the first pair's claim script, which it also cuts | none extra  |
| cluster         | a call of its own (lua/queue_capacity.lua)           | one         |

Each pair's pop takes at most what is left of the reservation, and :meth:`ClaimLimits.flush`
gives back what no pop used. The take is one entry ``<random>~`` holding the units
``<random>~1`` .. ``<random>~<granted>``. The claim's leases are numbered on from one pair
to the next, ``<tenant>~<random>~<attempt>~<k>``, and the k-th lease holds unit k
(warm_tier.reservation_of). Every pop of the claim uses the take's ``now_ms``, so no lease
ends after its reservation.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field

from tierq.core.ids import new_token_prefix
from tierq.dal.warm_tier import QueueTake
from tierq.logic import limits
from tierq.logic.context import Context, to_ms
from tierq.models.queues import QueueSettings, RateLimit

log = logging.getLogger(__name__)


def rate_of(limit: RateLimit | None) -> tuple[float, int] | None:
    """A rate limit as the scripts take it: (per second, burst)."""
    return None if limit is None else (limit.per_second, limit.burst)


@dataclass
class QueueGate:
    """The queue-wide limits of one claim call (``max_leased``, ``rate``) and what of them
    the claim reserved and used."""

    ctx: Context
    queue: str
    max_leased: int  # 0: none
    rate: tuple[float, int] | None
    random: str = field(default_factory=lambda: secrets.token_hex(12))
    now_ms: int = 0
    granted: int = 0
    used: int = 0
    # the take the first pop makes in its own script (single server), until it is made
    riding: QueueTake | None = None

    @property
    def left(self) -> int:
        return self.granted - self.used

    @property
    def holder(self) -> str:
        return f"{self.random}~"

    def prefix(self, tenant: str) -> str:
        """The token prefix of the claim's leases in ``tenant``."""
        return f"{tenant}~{self.random}~"

    def ride(self, want: int, shares: int) -> None:
        """Make the take with the first pop, in its script (single server).

        The first pair takes at most its share (``shares``: the tenants the grant is shared
        among).
        """
        self.now_ms = to_ms(self.ctx.now())
        self.riding = QueueTake(self.queue, limits.LEASES_POOL, want, self.holder,
                                self.max_leased, self.rate, shares)

    def took(self, granted: int) -> None:
        """The first pop made the take: it granted ``granted``."""
        self.granted = granted
        self.riding = None

    def take(self, want: int, lease_ms: int) -> int:
        """Take capacity for up to ``want`` tasks in a call of its own; returns the
        retry-after (ms, 0: all granted)."""
        self.now_ms = to_ms(self.ctx.now())
        got = self.ctx.warm.take_capacity(
            self.queue, limits.LEASES_POOL, want=want, now_ms=self.now_ms,
            deadline_ms=self.now_ms + lease_ms, holder=self.holder,
            max_held=self.max_leased, rate=self.rate)
        self.granted = got.taken
        return got.retry_after_ms

    def flush(self) -> None:
        """Give back what no pop used (one call).

        Should it fail, the reservations end at their deadline (the lease deadline) and the
        tokens are lost: the safe side.
        """
        if self.left <= 0:
            return
        try:
            self.ctx.warm.take_capacity(
                self.queue, limits.LEASES_POOL, want=0, now_ms=to_ms(self.ctx.now()),
                deadline_ms=0, holder=self.holder, max_held=self.max_leased, rate=self.rate,
                give_back_tokens=self.left if self.rate is not None else 0,
                give_back_past=self.used if self.max_leased else None)
            self.granted = self.used
        except Exception:
            log.warning("giving back unused capacity of %r failed; it frees itself at the "
                        "lease deadline", self.queue, exc_info=True)


@dataclass(frozen=True)
class PopLimits:
    """What one pop passes to the claim script: its clock, token prefix, first lease
    number and the take riding with it (None: no queue-wide take in this pop)."""

    now_ms: int
    token_prefix: str
    first_k: int
    take: QueueTake | None


@dataclass
class ClaimLimits:
    """The limits of one claim: the per-tenant ones its pops pass on, the queue-wide gate
    (None when the queue has neither ``max_leased`` nor ``rate``), and the soonest time a
    limit that cut the claim says more may be had."""

    ctx: Context
    tenant_max_leased: int  # 0: none
    tenant_rate: tuple[float, int] | None
    gate: QueueGate | None
    retry_after_ms: int | None = None

    @classmethod
    def of(cls, ctx: Context, queue: str, settings: QueueSettings) -> ClaimLimits:
        """The limits of a claim on ``queue`` with its ``settings``."""
        rate = rate_of(settings.rate)
        gate = None if not settings.max_leased and rate is None else \
            QueueGate(ctx, queue, settings.max_leased or 0, rate)
        return cls(ctx, settings.tenant_max_leased or 0, rate_of(settings.tenant_rate), gate)

    def note(self, retry_ms: int) -> None:
        """A limit cut the claim: more may be had in ``retry_ms`` (0: it did not)."""
        if retry_ms > 0:
            self.retry_after_ms = retry_ms if self.retry_after_ms is None \
                else min(self.retry_after_ms, retry_ms)

    def reserve(self, want: int, shares: int, lease_ms: int) -> int:
        """Reserve the queue-wide capacity of the claim before any pop (see the module's
        table); returns how many tasks the claim may go on to pop.

        On a single server the take rides with the first pop, which it cuts, so ``want``
        is returned. ``shares`` is the number of tenants the grant is shared among.
        """
        gate = self.gate
        if gate is None:
            return want
        if self.ctx.warm.single_server:
            gate.ride(want, shares)
            return want
        self.note(gate.take(want, lease_ms))
        return gate.granted

    @property
    def room(self) -> bool:
        """Whether a pop may still be made: no queue-wide gate, a take still to ride, or
        reserved units left."""
        gate = self.gate
        return gate is None or gate.riding is not None or gate.left > 0

    def for_pop(self, tenant: str, n: int) -> tuple[int, PopLimits] | None:
        """How many of ``n`` a pop of ``tenant`` may take now and what it passes to the
        script; None when the queue-wide reservation has nothing left."""
        gate = self.gate
        if gate is None:
            return n, PopLimits(to_ms(self.ctx.now()), new_token_prefix(tenant), 0, None)
        riding = gate.riding
        if riding is None:
            # within what the claim reserved, numbered on from the pairs before
            n = min(n, gate.left)
            if n <= 0:
                return None
        return n, PopLimits(gate.now_ms, gate.prefix(tenant), gate.used, riding)

    def popped(self, pop: PopLimits, granted: int, count: int, retry_ms: int) -> None:
        """A pop made with ``pop`` took ``count`` tasks; its script granted ``granted`` of
        a riding take and said ``retry_ms``."""
        gate = self.gate
        if gate is not None:
            if pop.take is not None:
                gate.took(granted)
            gate.used += count
        self.note(retry_ms)

    def lost(self, pop: PopLimits, n: int) -> None:
        """A pop made with ``pop`` of up to ``n`` tasks failed, its script may have leased
        some: the claim's later pops number their leases past its ``n`` units, and
        :meth:`flush` does not give them back (they end at their deadline), so no two
        leases hold one unit."""
        gate = self.gate
        if gate is not None and pop.take is None:
            gate.used += n

    def repeated(self, pop: PopLimits, granted: int, last: int) -> None:
        """A pop made with ``pop`` ran twice (its first reply was lost), and the first run's
        leases, numbered up to ``last``, go back: the claim's later pops number theirs past
        ``last``, and :meth:`flush` gives back the units past what they use. A take that
        rode with it granted ``granted`` (-1: not known, under a rate alone, so no unit past
        ``last`` is popped or given back)."""
        gate = self.gate
        if gate is None:
            return
        if pop.take is not None:
            gate.took(granted if granted >= 0 else last)
        gate.used = max(gate.used, last)

    @property
    def grant(self) -> int | None:
        """What the queue-wide take granted, once made (None: no gate or not made yet)."""
        gate = self.gate
        if gate is None or gate.riding is not None:
            return None
        return gate.granted

    def flush(self) -> None:
        """Give back the queue-wide reservation no pop used."""
        if self.gate is not None:
            self.gate.flush()
