"""logic/claim_isolation.py's set-aside entries under threads sharing a Context: claims
expire entries while others set pairs aside, and none of them raises."""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

from tierq.logic import claim_isolation


class _Warm:
    def master_of(self, queue: str, tenant: str) -> str:
        return "m1"


def test_usable_under_threads_never_raises(monkeypatch: Any) -> None:
    """Claim threads call ``usable`` while others set pairs aside: a pair whose time is up
    is deleted by every thread that saw it expired (KeyError), and the comprehension over
    ``items()`` sees the dict grow (RuntimeError)."""
    monkeypatch.setattr(claim_isolation, "SET_ASIDE_SECONDS", 0.0)  # (expire at once)
    ctx: Any = SimpleNamespace(claim_set_aside={}, claim_masters_down={}, warm=_Warm())
    for i in range(200):
        ctx.claim_set_aside[("q", f"seed{i}")] = 0.0
    errors: list[BaseException] = []
    stop = time.monotonic() + 3.0
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def claims() -> None:
        while time.monotonic() < stop and not errors:
            try:
                claim_isolation.usable(ctx, "q", ["a", "b", "c"])
            except BaseException as exc:
                errors.append(exc)

    def failures() -> None:
        i = 0
        while time.monotonic() < stop and not errors:
            i += 1
            claim_isolation.set_aside(ctx, "q", f"t{i % 500}", RuntimeError("x"))

    threads = [threading.Thread(target=claims) for _ in range(6)] + \
        [threading.Thread(target=failures) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, f"{type(errors[0]).__name__}: {errors[0]}"


def test_two_claims_expiring_the_same_pair_never_raise() -> None:
    """No thread sets anything aside meanwhile: only expiries race (KeyError)."""
    errors: list[BaseException] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(300):
            ctx: Any = SimpleNamespace(claim_set_aside={("q", f"s{i}"): 0.0
                                                        for i in range(300)},
                                       claim_masters_down={}, warm=_Warm())
            gate = threading.Barrier(4)

            def claim(ctx: Any = ctx, gate: threading.Barrier = gate) -> None:
                gate.wait()
                try:
                    claim_isolation.usable(ctx, "q", ["a"])
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=claim) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                break
    finally:
        sys.setswitchinterval(old)
    assert not errors, f"{type(errors[0]).__name__}: {errors[0]}"
