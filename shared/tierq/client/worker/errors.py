"""Exceptions a handler raises to say how its task failed."""

from __future__ import annotations


class RetryableError(Exception):
    """The task failed but may succeed later: nack it for a retry, after
    ``retry_in_seconds`` when given, otherwise after the queue's backoff. At the queue's
    ``max_attempts`` it is dead-lettered all the same. Any other exception is treated the
    same way (retried with the queue's backoff)."""

    def __init__(self, message: str = "", *, retry_in_seconds: float | None = None) -> None:
        super().__init__(message)
        if retry_in_seconds is not None and retry_in_seconds < 0:
            raise ValueError("retry_in_seconds must be >= 0")
        self.retry_in_seconds = retry_in_seconds


class PermanentError(Exception):
    """The task can never succeed (bad payload, missing record): dead-letter it now,
    whatever attempts it has left. It can be replayed from the dead letters later."""
