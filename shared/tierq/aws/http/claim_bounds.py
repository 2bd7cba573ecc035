"""What bounds a claim made over HTTP, by the claims route or by an ack that claims: the bytes
of its tasks in one Lambda response as the runtime sends it (sized in lua/claim.lua), and
when it must stop popping to answer before the function's or the HTTP API's timeout. A
module of its own: the ack function imports it at its cold start without the claim
route."""

from __future__ import annotations

import time
from typing import Any

from tierq.core.sizing import RESPONSE_BODY_BUDGET, body_cost

# What the tasks of one claim may cost in the response body as the Lambda runtime sends it
# (tierq.core.sizing.body_cost; the envelope around the body is reserved in RESPONSE_BODY_BUDGET),
# less the body's own wrapper around the list. Tasks beyond it stay in line for the next
# claim; the first task always comes (a payload is at most 256 KiB: ~0.5 MB at most here).
CLAIM_RESPONSE_BUDGET = RESPONSE_BODY_BUDGET - body_cost(
    b'{"tasks":[],"retry_after_ms":18446744073709551615}')
# API Gateway's HTTP API answers 503 to a request its integration has not answered in 30 s.
HTTP_API_TIMEOUT = 30.0
# Seconds kept between a claim's last pop and the cut-off, to turn up to 6 MB of tasks into
# the response (models, Powertools' encoder, orjson) and for the runtime to encode and send
# it: measured at ~0.25 s on one core of the development machine, taken twice, and scaled
# to the function's share of a vCPU (Lambda gives one vCPU at 1769 MB, 0.29 at the
# template's 512 MB: 2.2 s then), plus a fixed part for sending 6 MB.
ANSWER_SECONDS_PER_VCPU = 0.5
ANSWER_SECONDS_FIXED = 0.5
ONE_VCPU_MB = 1769


def answer_margin(lambda_context: Any) -> float:
    """How long before the cut-off a claim stops popping (the margin documented above)."""
    memory_mb = getattr(lambda_context, "memory_limit_in_mb", None)
    try:
        share = min(1.0, int(memory_mb) / ONE_VCPU_MB) if memory_mb else 1.0
    except (TypeError, ValueError):
        share = 1.0
    return ANSWER_SECONDS_FIXED + ANSWER_SECONDS_PER_VCPU / max(share, 0.01)


def claim_cut_off(lambda_context: Any, event: dict[str, Any]) -> float | None:
    """When this request is cut off, as a ``time.monotonic()`` instant: the function's
    remaining time (``get_remaining_time_in_millis``), and the HTTP API's 30 s counted from
    when the gateway received the request (``requestContext.timeEpoch``; a time outside the
    last 30 s, from a skewed clock or a stored event, counts as now). None without either."""
    now = time.monotonic()
    limits: list[float] = []
    remaining_ms = getattr(lambda_context, "get_remaining_time_in_millis", None)
    if callable(remaining_ms):
        limits.append(now + remaining_ms() / 1000)
    received_ms = (event.get("requestContext") or {}).get("timeEpoch")
    if isinstance(received_ms, int | float) and not isinstance(received_ms, bool):
        age = time.time() - received_ms / 1000
        limits.append(now + HTTP_API_TIMEOUT - (age if 0 <= age < HTTP_API_TIMEOUT else 0))
    return min(limits) if limits else None


def claim_answer_by(lambda_context: Any, event: dict[str, Any]) -> float | None:
    """When a claim of this request stops popping (a ``time.monotonic()`` instant): its
    cut-off less the answer's margin; None without a cut-off."""
    cut_off = claim_cut_off(lambda_context, event)
    return None if cut_off is None else cut_off - answer_margin(lambda_context)
