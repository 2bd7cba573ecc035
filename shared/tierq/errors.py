"""Typed errors. Each maps to one HTTP status and one stable ``code``."""

from __future__ import annotations

from typing import Any


class TierqError(Exception):
    """Base of every error tierq raises on purpose."""

    status = 500
    code = "internal"

    def __init__(self, message: str, *, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []

    def to_body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InvalidInput(TierqError):
    """Bad input; nothing was written. ``details`` name each offending field."""

    status = 422
    code = "invalid_input"

    @classmethod
    def field(cls, field: str, message: str) -> InvalidInput:
        return cls(f"{field}: {message}", details=[{"field": field, "message": message}])


class MalformedRequest(TierqError):
    """The request could not be parsed at all (not JSON, wrong content)."""

    status = 400
    code = "malformed_request"


class PayloadTooLarge(TierqError):
    status = 413
    code = "payload_too_large"


class NotFound(TierqError):
    status = 404
    code = "not_found"


class Conflict(TierqError):
    status = 409
    code = "conflict"


class TaskFinished(Conflict):
    """A cancel of a task that is done or dead already: nothing was changed."""

    code = "task_finished"


class QuotaExceeded(Conflict):
    """A per-tenant limit would be passed (a new queue beyond TIERQ_MAX_QUEUES_PER_TENANT, a
    new schedule beyond TIERQ_MAX_SCHEDULES_PER_TENANT); nothing was written. 409, not 429:
    retrying does not help until something is freed."""

    code = "quota_exceeded"


class Forbidden(TierqError):
    status = 403
    code = "forbidden"


class TooManyRequests(TierqError):
    """A tenant is over one of its own limits on the HTTP API (requests a second, long polls
    in flight): nothing was done; retrying after ``retry_after`` seconds may succeed. Tried
    before the shared limits (the functions' concurrency) would answer 5xx to everyone."""

    status = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after: int = 1,
                 details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, details=details)
        self.retry_after = max(1, retry_after)


class SequenceExhausted(TierqError):
    """``tierq_task_seq`` has handed out its last value (migration 0015): no task can
    take a new place in line. The statement that asked for one failed, so it wrote nothing
    (a retry duplicates nothing, and fails the same way); the ``TaskSeqUsedPercent`` alarm
    fires long before (docs/architecture.md §2)."""

    code = "sequence_exhausted"


class Unavailable(TierqError):
    """A backing store does not answer; the caller should retry after ``retry_after``.

    ``message`` is what the caller sees: it names the store and never says where it is.
    ``detail`` — the driver's own text, with hosts, ports and URLs — goes to the log only."""

    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int = 2, detail: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.detail = detail


class DatabaseTimedOut(Unavailable):
    """PostgreSQL answered but gave up on a statement: it ran past its ``statement_timeout``
    or waited past its ``lock_timeout`` (its transaction was rolled back). Not an outage:
    the database is up and busy, or a row is held. A 503 with ``Retry-After`` to an HTTP
    caller (a retry usually succeeds); a maintenance pass skips the item it was on (the
    pair, the schedule) and goes on with the others."""

    def __init__(self, message: str = "PostgreSQL did not finish in time (statement or lock "
                 "timeout); retry later", *, retry_after: int = 1,
                 detail: str | None = None) -> None:
        super().__init__(message, retry_after=retry_after, detail=detail)


class WarmTierUnavailable(Unavailable):
    """Valkey does not answer for some keys: no connection or reply in time, or in cluster
    mode the master serving their slot down (connection refused, CLUSTERDOWN, TRYAGAIN).
    Maintenance passes skip the pair concerned and go on with the others; PostgreSQL's
    ``Unavailable`` still ends a pass (every pair needs it)."""


class WarmTierFull(WarmTierUnavailable):
    """Valkey answered out-of-memory (its ``maxmemory`` is reached): work it would take waits
    cold where it can; where it cannot (a claim with nothing to hand out), retry later."""

    def __init__(self, message: str = "the warm tier is full; retry later", *,
                 retry_after: int = 5) -> None:
        super().__init__(message, retry_after=retry_after)
