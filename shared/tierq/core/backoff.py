"""Retry delays: fixed, linear or exponential, capped, with proportional jitter."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

from tierq.core.lazy import lazy_dataclass

BackoffKind = Literal["fixed", "linear", "exponential"]


@lazy_dataclass(frozen=True)
class BackoffPolicy:
    kind: BackoffKind = "exponential"
    base_seconds: float = 2.0
    cap_seconds: float = 3600.0
    jitter: float = 0.1  # 0..1: the delay varies by up to ±jitter of itself

    def raw_delay(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (1 = after the first failure), no jitter."""
        if attempt < 1:
            raise ValueError("attempt starts at 1")
        if self.kind == "fixed":
            delay = self.base_seconds
        elif self.kind == "linear":
            delay = self.base_seconds * attempt
        else:
            # 2**n overflows floats past ~1024; the cap is reached long before that.
            delay = self.base_seconds * (2.0 ** min(attempt - 1, 1023))
        return min(delay, self.cap_seconds)

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The delay with jitter applied, never negative and never above the cap."""
        base = self.raw_delay(attempt)
        spread = base * self.jitter
        jittered = base - spread + 2.0 * spread * rand()
        return max(0.0, min(self.cap_seconds, jittered))
