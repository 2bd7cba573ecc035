"""The warm/cold decisions of docs/architecture.md §3 (hysteresis: thrash prevention), as
pure functions.

* go cold: when the warm set reaches 100% of warm_max (or refuses anything);
* stay cold: until the warm set is at or below 80% AND the cold backlog is drained;
* promote (cold -> warm): only while the warm set is below 90%, oldest first.

The same thresholds apply to the bytes of task data the warm set holds, against
warm_max_bytes (``*_bytes`` functions): a pair goes cold when either count or bytes reaches
100%, promotes only while both are below 90% and returns to warm only when both are at or
below 80%.

The Lua scripts enforce the same thresholds atomically; these functions are what the
maintenance jobs decide with, and what the property tests pin down.
"""

from __future__ import annotations

from typing import Literal

from tierq.core.lazy import lazy_dataclass

Mode = Literal["warm", "cold"]

GO_COLD_AT = 1.0
PROMOTE_BELOW = 0.9
RETURN_WARM_AT = 0.8


def goes_cold(ready: int, warm_max: int) -> bool:
    """True when the warm set is full: new ready work must go cold."""
    return ready >= warm_max * GO_COLD_AT


def may_promote(ready: int, warm_max: int) -> bool:
    """Promotion runs only with headroom: the warm set below 90% of warm_max."""
    return ready * 10 < warm_max * 9


def promotion_room(ready: int, warm_max: int) -> int:
    """How many cold tasks one promotion may move: up to warm_max, and none without headroom."""
    if not may_promote(ready, warm_max):
        return 0
    return warm_max - ready


def may_return_warm(
    ready: int, warm_max: int, cold_backlog: int, admissions_in_flight: int
) -> bool:
    """A cold queue returns to warm mode only when the warm set is at or below 80%, no cold
    row is left, and no admission is writing cold rows right now."""
    return cold_backlog == 0 and admissions_in_flight == 0 and ready * 10 <= warm_max * 8


@lazy_dataclass(frozen=True)
class Admission:
    """Where n new ready tasks go, given the mode and the warm set's size."""

    warm: int
    cold: int
    mode_after: Mode


def admit(mode: Mode, ready: int, warm_max: int, n: int) -> Admission:
    """New ready work: all cold in cold mode; in warm mode as much as fits, the rest cold,
    and the queue turns cold as soon as the warm set is full."""
    if mode == "cold":
        return Admission(warm=0, cold=n, mode_after="cold")
    fits = max(0, min(n, warm_max - ready))
    after: Mode = "cold" if fits < n or goes_cold(ready + fits, warm_max) else "warm"
    return Admission(warm=fits, cold=n - fits, mode_after=after)


def goes_cold_bytes(ready_bytes: int, warm_max_bytes: int) -> bool:
    """True when the warm set's data reached warm_max_bytes: new ready work must go cold."""
    return ready_bytes >= warm_max_bytes * GO_COLD_AT


def may_promote_bytes(ready_bytes: int, warm_max_bytes: int) -> bool:
    """Promotion runs only while the warm set's data is below 90% of warm_max_bytes."""
    return ready_bytes * 10 < warm_max_bytes * 9


def promotion_room_bytes(ready_bytes: int, warm_max_bytes: int) -> int:
    """How many bytes of task data one promotion may move: up to warm_max_bytes, and none
    without headroom. (An empty warm set always takes one task, however large: push_ready.)"""
    if not may_promote_bytes(ready_bytes, warm_max_bytes):
        return 0
    return warm_max_bytes - ready_bytes


def may_return_warm_bytes(ready_bytes: int, warm_max_bytes: int) -> bool:
    """The byte half of ``may_return_warm``: the data at or below 80% of warm_max_bytes."""
    return ready_bytes * 10 <= warm_max_bytes * 8
