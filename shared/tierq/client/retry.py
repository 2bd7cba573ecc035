"""When and how long the client waits before retrying a request."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# Error codes retried whatever their status: 409 idempotency_in_progress means the first
# attempt of this very request (same Idempotency-Key) is still running on the server.
RETRY_CODES = frozenset({"idempotency_in_progress"})
# Error codes never retried whatever their status: a 500 response_too_large is the same
# answer on every attempt (the response would not fit Lambda's), so retrying only waits.
NEVER_RETRY_CODES = frozenset({"response_too_large"})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter (the n-th retry waits a random time in
    ``[0, min(cap, base * 2**n)]``), on 429, 5xx and connection errors. A ``Retry-After``
    header is honoured (up to ``max_retry_after_seconds``) and replaces the computed delay.

    Retries include POSTs: the client sends each enqueue, dead-letter replay, ack, nack,
    release and heartbeat request with an ``Idempotency-Key`` it reuses on that request's
    retries, so a retry after a timeout or a 503 never creates a second task and gets the
    first answer. A 409 ``idempotency_in_progress`` (the first attempt still runs) is retried
    too (``codes``); a 500 ``response_too_large`` never is (``never_codes``): it would be
    answered the same every time.
    """

    max_retries: int = 5
    base_seconds: float = 0.2
    cap_seconds: float = 10.0
    max_retry_after_seconds: float = 60.0
    statuses: frozenset[int] = field(default=RETRY_STATUSES)
    codes: frozenset[str] = field(default=RETRY_CODES)
    never_codes: frozenset[str] = field(default=NEVER_RETRY_CODES)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.base_seconds < 0 or self.cap_seconds < self.base_seconds:
            raise ValueError("need 0 <= base_seconds <= cap_seconds")

    def delay(self, retry: int, retry_after: float | None = None,
              rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first retry)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_seconds)
        ceiling = min(self.cap_seconds, self.base_seconds * (2 ** retry))
        return (rng or random).uniform(0, ceiling)

    def retries(self, status: int, code: str) -> bool:
        """Whether an error response of this status and code is worth another attempt."""
        if code in self.never_codes:
            return False
        return status in self.statuses or code in self.codes


NO_RETRIES = RetryPolicy(max_retries=0)
