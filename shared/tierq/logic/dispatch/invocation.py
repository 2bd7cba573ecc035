"""Calling a consumer function: what a call gave (:class:`Invocation`), where functions are
called (:class:`ConsumerFunctions`), a queue's consumer as a batch sees it
(:class:`Consumer`) and the invocation slots of ``max_concurrency`` (:class:`InvocationSlots`).

``max_concurrency`` bounds the invocations running at once for a queue across every
dispatcher, through the limits of :mod:`tierq.logic.limits`: the queue's pool
``invocations``, reservations scored by their deadline on the queue's own key. A slot of a
dispatcher that died frees itself when its lease would have expired. Each batch takes a slot
before it claims, and gives it back once settled.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Protocol

import orjson

from tierq.logic import limits
from tierq.logic.context import Context

Outcome = Literal["ok", "function_error", "throttled", "not_invoked", "failed"]


@dataclass(frozen=True)
class Invocation:
    """What calling the function gave: ``ok`` (its response in ``payload``),
    ``function_error`` (it raised or timed out), ``throttled`` (not run), ``not_invoked``
    (refused before it ran: no such function, access denied …) or ``failed`` (the outcome is
    unknown: the call was cut off).

    ``error`` is a name only — Lambda's ``errorType`` for a function error, the AWS error
    code or the exception's class otherwise — as it may be stored on the batch's tasks;
    ``detail`` is the message, for the operator's log only (it may quote records, endpoints,
    ARNs)."""

    outcome: Outcome
    payload: bytes = b""
    error: str = ""
    detail: str = ""


# A name as Lambda's error types, AWS error codes and exception classes are written
# (``KeyError``, ``Sandbox.Timedout``, ``ServiceException``): nothing a message, a URL or an
# ARN could pass as (no spaces, colons, slashes or quotes).
_SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")


def safe_name(text: object, fallback: str) -> str:
    """``text`` when it is a plain name (see ``_SAFE_NAME``), else ``fallback``."""
    if isinstance(text, str) and _SAFE_NAME.fullmatch(text):
        return text
    return fallback


def function_error_type(header: str, payload: bytes) -> str:
    """Lambda's error type of a function error: the payload's ``errorType`` when it is a
    plain name, else the ``X-Amz-Function-Error`` header's value (``Unhandled``)."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        body = None
    fallback = safe_name(header, "Unhandled")
    if isinstance(body, dict):
        return safe_name(body.get("errorType"), fallback)
    return fallback


def function_error_message(payload: bytes) -> str:
    """What a function error's answer says, for the log: the payload's ``errorMessage``
    when it has one, else the payload's text."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("errorMessage"), str):
        return str(body["errorMessage"])
    return payload.decode("utf-8", "replace")


class ConsumerFunctions(Protocol):
    """Where consumer functions are checked and called: Lambda on AWS
    (``tierq.aws.consumers``), the local stack's functions and modules
    (``tierq.local.consumers``)."""

    region: str
    account: str

    def check(self, function: str) -> None:
        """Raise ``ConsumerNotAllowed`` (403) or ``InvalidInput`` (422) for a function that
        may not be a consumer."""

    def timeout_seconds(self, function: str) -> float:
        """The function's timeout."""

    def invoke(self, function: str, event: bytes, *, read_timeout: float) -> Invocation:
        """Call the function synchronously, once."""


# Time past the function's timeout before the invoke's answer is given up (Lambda answers a
# timed-out function with an error itself, a little after the timeout).
READ_MARGIN_SECONDS = 15.0
# Time the lease leaves for the claim before the invoke and the settling after it.
SETTLE_MARGIN_SECONDS = 15.0


@dataclass(frozen=True)
class Consumer:
    queue: str
    function: str
    batch_size: int
    max_concurrency: int | None
    window_ms: int
    timeout: float  # the function's

    @property
    def read_timeout(self) -> float:
        return self.timeout + READ_MARGIN_SECONDS

    def lease_seconds(self) -> int:
        """The lease of a batch: the batching window, the invoke (read timeout) and time to
        claim and settle."""
        return math.ceil(self.window_ms / 1000 + self.read_timeout + SETTLE_MARGIN_SECONDS)


# -- concurrency slots ---------------------------------------------------------------------

INVOCATIONS_POOL = "invocations"


class InvocationSlots:
    """``max_concurrency`` across every dispatcher, through the queue-wide capacity of
    :mod:`tierq.logic.limits` (pool ``invocations``: reservations scored by their deadline
    on the queue's own key). A slot is taken before the claim, for the batch's lease, and
    given back once the batch is settled; one whose dispatcher died stops counting at its
    deadline (by then its tasks' leases have expired too), so no capacity is lost for
    longer than a lease."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def acquire(self, queue: str, cap: int, lease_seconds: float) -> limits.Held | None:
        held = limits.take(self.ctx, queue, INVOCATIONS_POOL, limit=cap,
                           hold_seconds=lease_seconds)
        return held if held.count else None

    def release(self, held: limits.Held) -> None:
        limits.give_back(self.ctx, held)

    def running(self, queue: str) -> int:
        return limits.in_use(self.ctx, queue, INVOCATIONS_POOL)

