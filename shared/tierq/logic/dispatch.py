"""Push delivery: the dispatcher claims batches of the queues that name a consumer function
and calls it synchronously with an event shaped exactly like Amazon SQS's, so that a function
written for an SQS event source (Powertools' ``BatchProcessor(EventType.SQS)`` with
``process_partial_response``, its parser's ``SqsRecordModel``) runs unchanged.

One record per task (:func:`sqs_record`): ``messageId`` the task id, ``receiptHandle`` the
lease token, ``body`` the payload as JSON text, ``md5OfBody``, ``eventSource`` ``aws:sqs``,
``eventSourceARN`` an ARN-shaped name of the queue, ``awsRegion``, ``attributes``
(``ApproximateReceiveCount`` the attempt, ``SentTimestamp`` the enqueue time,
``ApproximateFirstReceiveTimestamp`` the time of this delivery — tierq keeps no first
delivery time —, ``SenderId`` the tenant, all strings) and ``messageAttributes`` (``queue``,
``tenant``, ``key`` when the task has one, ``priority``), with ``md5OfMessageAttributes``
computed as SQS does.

A batch holds the tasks of one tenant (:meth:`Dispatcher._claim`): whatever a function does
with one tenant's records — raise with a record quoted in its message, time out — lands on
that tenant's tasks only. Each batch takes the next tenant with ready work in turn (round
robin over a window of the queue's ready-tenant index, :func:`tierq.logic.ready_tenants.
tenants_after`, by name after the tenant whose turn came last), so a tenant with a large
backlog gets one batch per turn like a tenant with one task, and a batch tries at most
``ready_tenants.DISPATCH_WINDOW`` tenants, however many the queue has registered (a tenant
found without work leaves the index). A tenant with nothing to claim, whose cold work finds
no room warm, or whose pair fails (its Valkey master not answering) passes its turn on; the
batch fails only when every listed tenant failed.

How many batches of a queue run at once follows the batches that find work, never the
length of the tenants' list (which may name tenants with nothing ready): a claim that got
tasks while more is likely ready (a full batch, other tenants listed) lets one more batch
start at once; an empty batch halves that number and backs the queue off only when no other
batch of it holds tasks. ``max_concurrency`` and the dispatcher's threads bound it.

Where the turns stand, and what that does not cover:

- The turn is taken when a batch starts claiming (so concurrent batches take successive
  tenants): a tenant that passes, fails or finds the warm tier full has had its turn.
- The dispatcher keeps the turn in its memory; the tenant each batch that got tasks served
  is also kept on the queue's own slot (``tq:{queue}:turn``, per shard, a day's TTL), read
  once by a new dispatcher (a fresh Lambda environment) to resume after it.
- Two dispatchers running at once (an invocation outliving the minute overlaps the next)
  each go round on their own: a tenant may get a batch from each in one turn.
- On a sharded deployment each shard's dispatcher goes round the tenants of its own shard,
  while ``max_concurrency`` is shared: turns are fair among a shard's tenants, and a shard's
  share of the queue's slots does not follow how many tenants it holds.

The message of a failed invocation (the function's error message, the AWS SDK's) goes to the
dispatcher's log with the queue, the tenant and the function (:meth:`Dispatcher._log_outcome`),
never to the tasks.

The outcome (:func:`settle`), as for an SQS event source with ``ReportBatchItemFailures``,
and what each writes as the tasks' ``last_error``: only a code and a name, never a message
of the function or of the AWS SDK (those quote records, endpoints, ARNs, account ids):

=================================  ==============================  ===========================
outcome                            the tasks                       their ``last_error``
=================================  ==============================  ===========================
named in ``batchItemFailures``     nacked (backoff, max_attempts)  ``batch_item_failure``
not named (a valid response)       acked                           —
response not JSON, or naming an    all nacked                      ``invalid_batch_response``
item not in the batch, or none
function error (raised, timed      all nacked                      ``function_error: <type>``
out, ran out of memory)
outcome unknown (a 500, a read     all nacked, to run no sooner    ``invoke_failed: <name>``
timeout, a connection cut off)     than their lease's end
throttled                          released (no attempt); the      —
                                   queue backs off
refused before it ran (no such     released (no attempt); backs    —
function, access denied)           off longer
=================================  ==============================  ===========================

``<type>`` is Lambda's error type (the payload's ``errorType``, else the
``X-Amz-Function-Error`` header's ``Unhandled``) and ``<name>`` the AWS error code or the
botocore exception's class (``ServiceException``, ``ReadTimeoutError``), each kept only when
it is a plain name (:func:`safe_name`). Every ``last_error`` is at most 2 KiB
(:func:`tierq.logic.leases.clip_error`).

A batch holds at most ``batch_size`` tasks and at most what a synchronous invoke's request
may carry (6 MB): the claim is given a byte budget that leaves room for the records' fields
(:data:`RECORD_FIELDS_COST` each), and a batch that still came out larger gives its tail
back. Its lease covers the batching window, the function's timeout and the time to settle
(:meth:`Consumer.lease_seconds`), so no task is handed out twice while its invocation can
still be running; the invoke's read timeout is past the function's timeout and the SDK
makes one attempt only (tierq.aws.consumers).

``max_concurrency`` bounds the invocations running at once for a queue across every
dispatcher, through the limits of :mod:`tierq.logic.limits` (:class:`InvocationSlots`: the
queue's pool ``invocations``, reservations scored by their deadline on the queue's own
key, so a slot of a dispatcher that died frees itself when its lease would have expired):
each batch takes a slot before it claims, and gives it back once settled.

How the dispatcher is run (a scheduled function woken by ready work) is in
:mod:`tierq.maintenance.dispatcher` and :mod:`tierq.logic.wake`.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import math
import random
import re
import struct
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

import orjson

from tierq.core.sizing import LAMBDA_PAYLOAD_LIMIT, body_cost
from tierq.errors import (
    DatabaseTimedOut,
    Forbidden,
    InvalidInput,
    WarmTierFull,
    WarmTierUnavailable,
)
from tierq.logic import leases, limits, ready_tenants
from tierq.logic.claim import claim_once
from tierq.logic.claim_budget import TASK_FIELDS_COST
from tierq.logic.context import Context, to_ms
from tierq.models.leases import ClaimedTask, ClaimRequest, NackItem, ReleaseItem

log = logging.getLogger(__name__)

# -- the event -----------------------------------------------------------------------------

DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT = "123456789012"
# The longest key (models.names.KEY_PATTERN: 512 characters of up to 4 UTF-8 bytes).
LONGEST_KEY_BYTES = 512 * 4
EVENT_ENVELOPE = 1024  # {"Records": [...]} and the commas between records
# What a batch's event may weigh: a synchronous invoke's request is at most 6 MB.
EVENT_LIMIT = LAMBDA_PAYLOAD_LIMIT


def event_source_arn(queue: str, region: str = DEFAULT_REGION,
                     account: str = DEFAULT_ACCOUNT) -> str:
    """The ARN-shaped name of a queue in its records' ``eventSourceARN``."""
    return f"arn:aws:sqs:{region}:{account}:{queue}"


def _string_attribute(value: str, data_type: str = "String") -> dict[str, Any]:
    return {"stringValue": value, "stringListValues": [], "binaryListValues": [],
            "dataType": data_type}


def md5_of_message_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """SQS's MD5 of message attributes: per attribute in name order, the name, the data type
    (each as a 4-byte big-endian length and UTF-8 bytes), the transport byte 1 (string) and
    the string value likewise."""
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        attribute = attributes[name]
        for text in (name, attribute["dataType"]):
            raw = text.encode()
            digest.update(struct.pack(">I", len(raw)) + raw)
        value = str(attribute["stringValue"]).encode()
        digest.update(b"\x01" + struct.pack(">I", len(value)) + value)
    return digest.hexdigest()


def sqs_record(task: ClaimedTask, *, delivered_ms: int, region: str = DEFAULT_REGION,
               account: str = DEFAULT_ACCOUNT, body: str | None = None) -> dict[str, Any]:
    """One task as an SQS record (see the module's documentation)."""
    if body is None:
        body = orjson.dumps(task.payload).decode()
    attributes: dict[str, dict[str, Any]] = {
        "queue": _string_attribute(task.queue),
        "tenant": _string_attribute(task.tenant),
        "priority": _string_attribute(str(task.priority), "Number"),
    }
    if task.key is not None:
        attributes["key"] = _string_attribute(task.key)
    return {
        "messageId": str(task.id),
        "receiptHandle": task.lease_token,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(task.attempt),
            "SentTimestamp": str(to_ms(task.enqueued_at.timestamp())),
            "SenderId": task.tenant,
            "ApproximateFirstReceiveTimestamp": str(delivered_ms),
        },
        "messageAttributes": attributes,
        "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "md5OfMessageAttributes": md5_of_message_attributes(attributes),
        "eventSource": "aws:sqs",
        "eventSourceARN": event_source_arn(task.queue, region, account),
        "awsRegion": region,
    }


def _record_fields_cost() -> int:
    """What a record weighs beyond its body's escaped text, at its longest (names of 64
    characters, the longest key, a 200-character token, 20-digit numbers), plus a comma."""
    from datetime import UTC, datetime

    name = "n" * 64
    longest = ClaimedTask.model_construct(
        id=uuid.UUID(int=0), queue=name, tenant=name, key="\U0010ffff" * 512,
        priority=-(2**63), payload=None, attempt=-(2**63), max_attempts=0,
        lease_token="t" * 200, lease_expires_at=datetime.now(UTC), redelivered=True,
        enqueued_at=datetime(9999, 12, 31, tzinfo=UTC))
    record = sqs_record(longest, delivered_ms=10**19, region="r" * 32, account="9" * 12,
                        body="")
    return len(orjson.dumps(record)) + 1


# Per record, on top of its body (body_cost of the payload's JSON text).
RECORD_FIELDS_COST = _record_fields_cost()


def claim_budget(batch_size: int) -> int:
    """The byte budget of a batch's claim: a claim charges each task its blob (payload and
    key, with escapes) and TASK_FIELDS_COST; a record costs at most its body and
    RECORD_FIELDS_COST, so the difference is set aside for every task of a full batch."""
    extra = max(0, RECORD_FIELDS_COST - TASK_FIELDS_COST)
    return EVENT_LIMIT - EVENT_ENVELOPE - batch_size * extra


def sqs_event(tasks: Sequence[ClaimedTask], *, delivered_ms: int,
              region: str = DEFAULT_REGION, account: str = DEFAULT_ACCOUNT,
              limit: int = EVENT_LIMIT) -> tuple[bytes, int]:
    """The event of a batch as the bytes of its request, and how many of ``tasks`` it holds:
    the longest prefix whose event fits ``limit`` (at least one task)."""
    records: list[dict[str, Any]] = []
    size = EVENT_ENVELOPE
    for task in tasks:
        body = orjson.dumps(task.payload).decode()
        record = sqs_record(task, delivered_ms=delivered_ms, region=region, account=account,
                            body=body)
        cost = len(orjson.dumps(record)) + 1
        if records and size + cost > limit:
            break
        records.append(record)
        size += cost
    return orjson.dumps({"Records": records}), len(records)


# -- the function's answer -----------------------------------------------------------------

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


def read_response(payload: bytes, batch_ids: Sequence[str]) -> tuple[set[str], bool]:
    """The ids of a batch that failed, from the function's response, and whether the
    response itself was invalid (then every id failed), as Lambda reads an SQS event
    source's partial batch response: no response, ``null``, no or an empty
    ``batchItemFailures`` is a success; a response that is not JSON, or an item whose
    ``itemIdentifier`` is missing, empty or not in the batch, fails the whole batch."""
    everything = set(batch_ids)
    text = payload.strip()
    if not text:
        return set(), False
    try:
        response = orjson.loads(text)
    except orjson.JSONDecodeError:
        return everything, True
    if not isinstance(response, dict):
        return set(), False
    items = response.get("batchItemFailures")
    if items is None:
        return set(), False
    if not isinstance(items, list):
        return everything, True
    failed: set[str] = set()
    for item in items:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or identifier not in everything:
            return everything, True
        failed.add(identifier)
    return failed, False


# -- consumer functions --------------------------------------------------------------------


class ConsumerNotAllowed(Forbidden):
    """The function may not be a consumer here (not in the deployment's allow-list)."""

    code = "consumer_not_allowed"


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


def allow_list(raw: str) -> tuple[str, ...]:
    """TIERQ_CONSUMER_FUNCTIONS: comma-separated names (``name`` or ``name:qualifier``)."""
    return tuple(entry.strip() for entry in raw.split(",") if entry.strip())


@dataclass(frozen=True)
class AllowList:
    """The deployment's allow-list of consumer functions (the template's
    ``ConsumerFunctionArns``): Lambda functions, each listed by its ARN (as the template
    passes them) or, in the stack's account and region, by its name. A queue's consumer
    names one by its ARN or, in the stack's account and region, by its name: both sides are
    compared by name once ``arn_prefix`` is taken off (an ARN of another account or region
    must match in full)."""

    names: tuple[str, ...]
    arn_prefix: str = ""  # arn:<partition>:lambda:<region>:<account>:function:

    def name_of(self, function: str) -> str:
        if self.arn_prefix and function.startswith(self.arn_prefix):
            return function[len(self.arn_prefix):]
        return function

    def allows(self, function: str) -> bool:
        return self.name_of(function) in {self.name_of(entry) for entry in self.names}

    def check(self, function: str) -> None:
        if not self.names:
            raise ConsumerNotAllowed(
                f"consumer.function {function!r}: this deployment allows no consumer "
                "functions (the stack's ConsumerFunctionArns parameter, "
                "TIERQ_CONSUMER_FUNCTIONS, is empty)", details=[{"field": "consumer.function",
                                       "message": "not in the allow-list"}])
        if not self.allows(function):
            raise ConsumerNotAllowed(
                f"consumer.function {function!r} is not in the deployment's allow-list of "
                f"consumer functions ({', '.join(self.names)}); the stack's owner adds it "
                "with the ConsumerFunctionArns parameter",
                details=[{"field": "consumer.function", "message": "not in the allow-list"}])


_functions: ConsumerFunctions | None = None


def install(functions: ConsumerFunctions | None) -> ConsumerFunctions | None:
    """Make ``functions`` where this process checks and calls consumers; returns the one it
    replaces."""
    global _functions
    previous, _functions = _functions, functions
    return previous


def installed() -> ConsumerFunctions | None:
    return _functions


def check_consumer(ctx: Context, function: str) -> None:
    """Whether ``function`` may be a consumer (PUT /v1/queues/{queue} with a consumer, an
    admin action): by the installed functions, else by the allow-list of the settings."""
    functions = _functions
    if functions is not None:
        functions.check(function)
        return
    settings = ctx.settings
    AllowList(allow_list(getattr(settings, "consumer_functions", "")),
              getattr(settings, "consumer_arn_prefix", "")).check(function)


def invalid_function(function: str, why: str) -> InvalidInput:
    return InvalidInput(f"consumer.function {function!r}: {why}",
                        details=[{"field": "consumer.function", "message": why}])


# -- the consumer of a queue ---------------------------------------------------------------

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


# -- settling a batch ----------------------------------------------------------------------

# What settle writes as last_error (see the module's documentation).
ITEM_FAILURE = "batch_item_failure"
INVALID_RESPONSE = "invalid_batch_response"
FUNCTION_ERROR = "function_error"
INVOKE_FAILED = "invoke_failed"


@dataclass
class DispatchCounts:
    """What dispatching did (a pass's, or since a dispatcher started)."""

    batches: int = 0
    dispatched: int = 0  # tasks handed to a function
    acked: int = 0
    retried: int = 0  # nacked, to run again
    dead: int = 0  # nacked out of attempts
    released: int = 0  # given back without an attempt (throttled, not invoked, oversize)
    throttled: int = 0  # invocations the function's concurrency refused
    consumer_errors: int = 0  # invocations that failed (function error, refused, cut off)

    def add(self, other: DispatchCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def minus(self, other: DispatchCounts) -> DispatchCounts:
        return DispatchCounts(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                                 for f in fields(self)})

    def metrics(self) -> dict[str, int]:
        """The CloudWatch counts of these numbers."""
        return {"Dispatched": self.dispatched, "Throttled": self.throttled,
                "ConsumerErrors": self.consumer_errors}


# What the REST metrics show of a queue's push delivery: counters since the queue's first
# batch, in a hash on the queue's own key (no TTL), written once per batch.
COUNTER_FIELDS = ("batches", "dispatched", "acked", "retried", "dead", "released",
                  "throttled", "consumer_errors")


def counters_key(queue: str) -> str:
    return f"tq:{{{queue}}}:dispatch"


# How long the tenant a queue's last batch served is kept for a new dispatcher to resume
# its turns after (a queue not dispatched for this long starts again at the first name).
TURN_TTL_SECONDS = 86_400


def turn_key(queue: str, shard_tag: int | None = None) -> str:
    """Where the tenant a queue's last batch served is kept, on the queue's own slot; per
    shard (each shard's dispatcher goes round its own tenants)."""
    return f"tq:{{{queue}}}:turn" + ("" if shard_tag is None else f":{shard_tag}")


def record_counts(ctx: Context, queue: str, counts: DispatchCounts, *,
                  turn: str | None = None) -> None:
    """Add a batch's counts to the queue's counters and, with ``turn``, keep the tenant the
    batch served as where a new dispatcher resumes the queue's turns: one round trip."""
    values = {name: getattr(counts, name) for name in COUNTER_FIELDS if getattr(counts, name)}
    if not values and turn is None:
        return
    pipe = ctx.warm.client.pipeline(transaction=False)
    for name, value in values.items():
        pipe.hincrby(counters_key(queue), name, value)
    if turn is not None:
        pipe.set(turn_key(queue, ctx.id_tag), turn, ex=TURN_TTL_SECONDS)
    pipe.execute()


def saved_turn(ctx: Context, queue: str) -> str | None:
    """The tenant the queue's last batch served, as :func:`record_counts` kept it."""
    raw = ctx.warm.client.get(turn_key(queue, ctx.id_tag))
    if raw is None:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def read_counts(ctx: Context, queue: str) -> DispatchCounts:
    """The counters of a queue's push delivery (zeros for a queue never dispatched)."""
    raw = ctx.warm.client.hgetall(counters_key(queue))
    values = {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}
    return DispatchCounts(**{name: values.get(name, 0) for name in COUNTER_FIELDS})


def _nack_all(ctx: Context, queue: str, tasks: Sequence[ClaimedTask], error: str,
              counts: DispatchCounts, *, may_run_on: bool = False) -> None:
    """Nack ``tasks``. ``may_run_on``: the invocation may still be running (its outcome is
    unknown), so each task runs again no sooner than its lease would have ended (which
    covers the function's timeout), nor sooner than the queue's backoff says."""
    if not tasks:
        return
    retry_in: list[float | None] = [None] * len(tasks)
    if may_run_on:
        now = ctx.now()
        policy = ctx.queue_settings.get(queue).backoff.policy()
        retry_in = [max(policy.delay(t.attempt), t.lease_expires_at.timestamp() - now, 0.0)
                    for t in tasks]
    result = leases.nack(ctx, queue, [
        NackItem(id=t.id, lease_token=t.lease_token, error=error, retry_in_seconds=delay)
        for t, delay in zip(tasks, retry_in, strict=True)])
    counts.retried += len(result.retried)
    counts.dead += len(result.dead)


def release_tasks(ctx: Context, queue: str, tasks: Sequence[ClaimedTask],
                  counts: DispatchCounts) -> None:
    if not tasks:
        return
    result = leases.release(ctx, queue, [ReleaseItem(id=t.id, lease_token=t.lease_token)
                                         for t in tasks])
    counts.released += len(result.released)


def settle(ctx: Context, consumer: Consumer, tasks: Sequence[ClaimedTask],
           invocation: Invocation) -> DispatchCounts:
    """Record the outcome of one invocation (see the module's documentation)."""
    counts = DispatchCounts()
    queue = consumer.queue
    if invocation.outcome == "throttled":
        counts.throttled += 1
        release_tasks(ctx, queue, tasks, counts)
        return counts
    if invocation.outcome == "not_invoked":
        counts.consumer_errors += 1
        release_tasks(ctx, queue, tasks, counts)
        return counts
    counts.dispatched += len(tasks)
    if invocation.outcome == "function_error":
        counts.consumer_errors += 1
        _nack_all(ctx, queue, tasks,
                  f"{FUNCTION_ERROR}: {safe_name(invocation.error, 'Unhandled')}", counts)
        return counts
    if invocation.outcome != "ok":  # failed: the outcome is unknown
        counts.consumer_errors += 1
        _nack_all(ctx, queue, tasks,
                  f"{INVOKE_FAILED}: {safe_name(invocation.error, 'Unknown')}", counts,
                  may_run_on=True)
        return counts
    failed, invalid = read_response(invocation.payload, [str(t.id) for t in tasks])
    done = [t for t in tasks if str(t.id) not in failed]
    if done:
        counts.acked += len(leases.ack(ctx, queue, done).acked)
    _nack_all(ctx, queue, [t for t in tasks if str(t.id) in failed],
              INVALID_RESPONSE if invalid else ITEM_FAILURE, counts)
    return counts


# -- the dispatcher ------------------------------------------------------------------------

# A queue that had nothing is looked at again after POLL_FIRST, doubling up to the
# dispatcher's tick (TIERQ_DISPATCHER_EVERY); one whose batch got tasks at once.
POLL_FIRST = 0.02
THROTTLE_FIRST, THROTTLE_MAX = 0.2, 10.0
REFUSED_BACKOFF = 30.0  # not invoked (no such function, access denied): look again later
FAILED_BACKOFF = 1.0  # claiming failed (a store error)
CONSUMERS_EVERY = 1.0  # the list of queues with a consumer is read at most this often
WINDOW_POLL = 0.02  # re-claim while a batching window is open
# The lease holder a dispatched task's view and the running list show (to its tenant too):
# never the function's name, which may be its ARN (with the account id).
DISPATCHER_WORKER = "dispatcher"
# What of a failed invocation's message the dispatcher's log line keeps.
LOG_DETAIL_CHARS = 4096


@dataclass
class QueueState:
    """What the dispatcher keeps of a queue between batches (changed under its lock)."""

    in_flight: int = 0
    not_before: float = 0.0  # time.monotonic(): claim no batch before
    poll_delay: float = POLL_FIRST
    throttle_delay: float = THROTTLE_FIRST
    # how many batches of the queue may run at once now (below its free slots): one more
    # after each claim that got tasks while more is likely ready, half after an empty one
    width: int = 1
    fed: int = 0  # batches running now that got tasks
    fed_claims: int = 0  # claims that got tasks so far (an empty batch compares)
    # the tenant whose turn came last (round robin by name)
    last_tenant: str | None = None
    resumed: bool = False  # the turn saved in Valkey was read (once per dispatcher)


# How long a consumer function's timeout is trusted before it is read again: a raised
# timeout lengthens the leases of batches started after this (until then a batch that runs
# past the old timeout could be handed out again). One control-plane call per function
# per dispatcher and minute stays far below Lambda's API limits.
FUNCTION_TIMEOUT_CACHE_SECONDS = 60.0

CountsSink = Callable[[str, Mapping[str, int]], None]


@dataclass
class Dispatcher:
    """Claims and invokes for every queue with a consumer; its invocations run on a pool of
    ``max_in_flight`` threads and outlive a pass (:meth:`run`), so a pass that ends does not
    wait for them (:meth:`drain` does)."""

    ctx: Context
    functions: ConsumerFunctions
    max_in_flight: int = 64
    poll_max: float = 1.0
    sink: CountsSink | None = None  # per-queue metrics (EMF on AWS)
    # set by the invocation that runs the dispatcher: no batch starts after start_until or
    # whose lease would end after finish_by (time.monotonic(); inf: no limit)
    start_until: float = math.inf
    finish_by: float = math.inf
    # set by the invocation too: true once it must stop taking batches (its platform is
    # stopping it: the local stack's shutdown)
    stop_when: Callable[[], bool] | None = None
    totals: DispatchCounts = field(default_factory=DispatchCounts)
    last_busy: float = field(default_factory=time.monotonic)
    _states: dict[str, QueueState] = field(default_factory=dict)
    _consumers: list[str] = field(default_factory=list)
    _consumers_at: float = -math.inf
    _timeouts: dict[str, tuple[float, float]] = field(default_factory=dict)
    # queues whose batch lease is longer than this dispatcher's whole time (from
    # ``began`` to ``finish_by``): never dispatched by it, said once each
    began: float = field(default_factory=time.monotonic)
    unfit: set[str] = field(default_factory=set)
    _in_flight: int = 0
    _rotation: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _pool: ThreadPoolExecutor | None = None
    _slots: InvocationSlots | None = None

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="tierq-dispatch")
        self._slots = InvocationSlots(self.ctx)

    # -- what to dispatch ------------------------------------------------------------------

    def consumer_queues(self) -> list[str]:
        now = time.monotonic()
        if now - self._consumers_at >= CONSUMERS_EVERY:
            self._consumers = self.ctx.store.consumer_queues()
            self._consumers_at = now
        return self._consumers

    def _timeout_of(self, function: str) -> float:
        cached = self._timeouts.get(function)
        now = time.monotonic()
        if cached is None or now - cached[1] > FUNCTION_TIMEOUT_CACHE_SECONDS:
            cached = (float(self.functions.timeout_seconds(function)), now)
            self._timeouts[function] = cached
        return cached[0]

    def consumer(self, queue: str) -> Consumer | None:
        settings = self.ctx.queue_settings.get(queue)
        found = getattr(settings, "consumer", None)
        if found is None or settings.paused:
            return None
        return Consumer(queue=queue, function=found.function, batch_size=found.batch_size,
                        max_concurrency=found.max_concurrency,
                        window_ms=found.max_batching_window_ms,
                        timeout=self._timeout_of(found.function))

    # -- a pass ----------------------------------------------------------------------------

    def run(self, *, until: float, idle_seconds: float,
            should_stop: Callable[[], bool] | None = None) -> tuple[DispatchCounts, bool]:
        """Start batches until ``until`` (``time.monotonic()``, and never past
        ``start_until``), each only if its lease ends before ``finish_by``; stop early once
        nothing was claimed and nothing ran for ``idle_seconds`` (counted across passes).
        Returns what the batches that finished meanwhile did, and whether it ended idle."""
        before = self.counts()
        until = min(until, self.start_until)
        idle = False
        while True:
            now = time.monotonic()
            if now >= until or (should_stop is not None and should_stop()) \
                    or (self.stop_when is not None and self.stop_when()):
                break
            started, wake_at = self._start(now, self.finish_by)
            with self._changed:
                busy = started > 0 or self._in_flight > 0
            if busy:
                self.last_busy = now
            elif now - self.last_busy >= idle_seconds:
                idle = True
                break
            if not started:
                pause = min(max(0.0, wake_at - time.monotonic()), self.poll_max,
                            max(0.0, until - time.monotonic()),
                            max(0.0, self.last_busy + idle_seconds - time.monotonic()))
                with self._changed:
                    self._changed.wait(max(pause, 0.001))
        return self.counts().minus(before), idle

    def has_ready_work(self) -> bool:
        """Whether a queue with a consumer has ready tasks now that this dispatcher could
        take (the last look before a dispatcher that released its flag ends)."""
        now = time.monotonic()
        for queue in self.consumer_queues():
            consumer = self.consumer(queue)
            if consumer is None or now + consumer.lease_seconds() > self.finish_by:
                continue  # (nothing this dispatcher could take)
            window = ready_tenants.tenants_after(self.ctx, queue, None,
                                                 ready_tenants.DISPATCH_WINDOW)
            # (a full window may have more after it: taken as work, a batch tells)
            if len(window) == ready_tenants.DISPATCH_WINDOW \
                    or any(self.ctx.warm.ready_counts(queue, window)):
                return True
        return False

    def in_flight(self) -> int:
        with self._changed:
            return self._in_flight

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the running batches; whether all ended within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self) -> None:
        self.drain()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def counts(self) -> DispatchCounts:
        """What every batch that finished so far did."""
        with self._changed:
            copy = DispatchCounts()
            copy.add(self.totals)
            return copy

    def _start(self, now: float, finish_by: float) -> tuple[int, float]:
        """Start what may start now; how many batches, and when to look again."""
        queues = self.consumer_queues()
        started = 0
        wake_at = now + self.poll_max
        if not queues:
            return 0, wake_at
        self._rotation = (self._rotation + 1) % len(queues)
        for queue in queues[self._rotation:] + queues[:self._rotation]:
            state = self._states.setdefault(queue, QueueState())
            if now < state.not_before:
                wake_at = min(wake_at, state.not_before)
                continue
            consumer = self.consumer(queue)
            if consumer is None:
                continue
            lease = consumer.lease_seconds()
            if now + lease > finish_by:
                if self.began + lease > finish_by:
                    self._say_unfit(consumer, lease, finish_by)
                continue  # its invoke could outlive this dispatcher
            cap = self._cap(consumer)
            with self._changed:
                room = min(cap - state.in_flight, self.max_in_flight - self._in_flight)
                want = min(room, state.width - state.in_flight)  # (see _fed)
                if want <= 0:
                    continue
                state.in_flight += want
                self._in_flight += want
            assert self._pool is not None
            for _ in range(want):
                self._pool.submit(self._batch, consumer, state, lease)
            started += want
        return started, wake_at

    def _say_unfit(self, consumer: Consumer, lease: int, finish_by: float) -> None:
        """A queue this dispatcher can never serve: a configuration error, not a wait."""
        if consumer.queue in self.unfit:
            return
        self.unfit.add(consumer.queue)
        log.warning(
            "queue %s is not dispatched: a batch of its consumer %s needs a lease of %d s "
            "(the function's timeout %g s, its batching window and margins), longer than "
            "the dispatcher's %d s; lower the function's timeout or raise the dispatcher's",
            consumer.queue, consumer.function, lease, consumer.timeout,
            int(finish_by - self.began))

    def dispatch_once(self, queue: str) -> DispatchCounts:
        """One batch of ``queue`` now (of the next tenant in turn), in this thread: claim,
        invoke, settle. What it did (nothing when the queue has no consumer, is paused or
        has nothing ready)."""
        consumer = self.consumer(queue)
        if consumer is None:
            return DispatchCounts()
        state = self._states.setdefault(queue, QueueState())
        before = self.counts()
        with self._changed:
            state.in_flight += 1
            self._in_flight += 1
        self._batch(consumer, state, consumer.lease_seconds())
        return self.counts().minus(before)

    # -- one batch (on a pool thread) ------------------------------------------------------

    def _cap(self, consumer: Consumer) -> int:
        return consumer.max_concurrency or self.max_in_flight

    def _batch(self, consumer: Consumer, state: QueueState, lease: int) -> None:
        counts = DispatchCounts()
        slot: limits.Held | None = None
        tasks: list[ClaimedTask] = []
        invoked = fed = False
        with self._changed:
            fed_claims = state.fed_claims
        try:
            if consumer.max_concurrency is not None:
                assert self._slots is not None
                slot = self._slots.acquire(consumer.queue, consumer.max_concurrency, lease)
                if slot is None:  # every slot is taken (by other dispatchers too)
                    self._later(state, POLL_FIRST * 5)
                    return
            tasks, listed = self._claim(consumer, state, lease)
            if not tasks:
                self._found_nothing(state, fed_claims)
                return
            fed = True
            delivered_ms = to_ms(self.ctx.now())
            event, fit = sqs_event(tasks, delivered_ms=delivered_ms,
                                   region=self.functions.region,
                                   account=self.functions.account)
            # more is likely ready: this tenant filled its batch (or gives its tail back),
            # or other tenants are listed with ready work
            self._fed(consumer, state, more=len(tasks) >= consumer.batch_size
                      or fit < len(tasks) or listed > 1)
            if fit < len(tasks):  # larger than an invoke may carry: the tail goes back
                release_tasks(self.ctx, consumer.queue, tasks[fit:], counts)
                tasks = tasks[:fit]
            invoked = True
            logged = False
            try:
                invocation = self.functions.invoke(consumer.function, event,
                                                   read_timeout=consumer.read_timeout)
            except Exception as exc:  # whether the function ran is unknown: an attempt
                log.warning("invoking %s for queue %r, tenant %r raised; whether it ran is "
                            "unknown", consumer.function, consumer.queue, tasks[0].tenant,
                            exc_info=True, extra=self._fields(consumer, tasks[0].tenant))
                logged = True
                invocation = Invocation("failed", error=type(exc).__name__,
                                        detail="".join(traceback.format_exception(exc)))
            if not logged:
                self._log_outcome(consumer, tasks[0].tenant, invocation)
            counts.batches += 1
            counts.add(settle(self.ctx, consumer, tasks, invocation))
            self._after(consumer, state, invocation)
        except Exception:
            log.exception("dispatching a batch of %r to %s failed", consumer.queue,
                          consumer.function)
            if tasks and not invoked:
                # the function never saw them: back to their places, no attempt counted.
                # (Once invoked, an unsettled batch's leases expire and the reaper counts
                # the attempt: the function may have run.)
                try:
                    release_tasks(self.ctx, consumer.queue, tasks, counts)
                except Exception:
                    log.warning("giving back an unsent batch of %r failed; its leases "
                                "expire", consumer.queue, exc_info=True)
            self._later(state, FAILED_BACKOFF, narrow=True)
        finally:
            if slot is not None:
                assert self._slots is not None
                try:
                    self._slots.release(slot)
                except Exception:
                    log.warning("giving back an invocation slot of %r failed; it frees itself "
                                "at its deadline", consumer.queue, exc_info=True)
            with self._changed:
                state.in_flight -= 1
                self._in_flight -= 1
                if fed:
                    state.fed -= 1
                self.totals.add(counts)
                self._changed.notify_all()
            try:
                record_counts(self.ctx, consumer.queue, counts,
                              turn=tasks[0].tenant if fed and tasks else None)
            except Exception:
                log.warning("recording dispatch counters of %r failed", consumer.queue,
                            exc_info=True)
            if self.sink is not None and any(counts.metrics().values()):
                try:
                    self.sink(consumer.queue, counts.metrics())
                except Exception:
                    log.warning("emitting dispatch metrics failed", exc_info=True)

    def _fed(self, consumer: Consumer, state: QueueState, *, more: bool) -> None:
        """A claim got tasks. While more is likely ready, the queue may run one more batch
        at once (so the pass starts one now): concurrency follows the batches that find
        work, never the length of the tenants' list. A short batch with no other tenant
        listed drained the queue: one batch at a time again."""
        with self._changed:
            state.fed += 1
            state.fed_claims += 1
            state.poll_delay = POLL_FIRST
            if more:
                state.width = min(state.width + 1, self._cap(consumer))
                self._changed.notify_all()
            else:
                state.width = 1

    def _found_nothing(self, state: QueueState, fed_claims: int) -> None:
        """A batch found no tasks (every listed tenant passed its turn). The queue runs half
        as many batches at once; it backs off (the poll delay doubling) only when no other
        batch of it holds tasks or got some since this one started: a probe for more work
        that found none says the queue needs no more batches, not that it is idle."""
        with self._changed:
            state.width = max(1, state.width // 2)
            busy = state.fed > 0 or state.fed_claims != fed_claims
            if busy:
                return
            delay = state.poll_delay
            state.poll_delay = min(state.poll_delay * 2, self.poll_max)
        self._later(state, delay)

    def _claim(self, consumer: Consumer, state: QueueState,
               lease: int) -> tuple[list[ClaimedTask], int]:
        """A batch of one tenant's tasks: the next tenant in turn with ready work. A tenant
        passes its turn on when it has nothing to claim (the list may lag, the tenant may
        be at its own limits), when its cold work finds no room warm (``WarmTierFull``) and
        when its pair fails (``WarmTierUnavailable``: its master does not answer;
        ``DatabaseTimedOut``): each listed tenant is tried once at most, and the tenants of a
        master that failed are passed over for the rest of the batch without a call. The
        batch fails (its error raised) only when every listed tenant failed; PostgreSQL not
        answering (``Unavailable``) fails it at once, as every tenant needs it. Returns the
        tasks, and how many tenants were listed (more is likely ready when others were)."""
        queue = consumer.queue
        self._resume_turn(queue, state)
        with self._changed:
            after = state.last_tenant
        tenants = sorted(set(ready_tenants.tenants_after(self.ctx, queue, after,
                                                         ready_tenants.DISPATCH_WINDOW)))
        empty: list[str] = []
        try:
            return self._claim_window(consumer, state, lease, tenants, empty)
        finally:
            ready_tenants.forget(self.ctx, queue, empty)

    def _claim_window(self, consumer: Consumer, state: QueueState, lease: int,
                      tenants: Sequence[str], empty: list[str],
                      ) -> tuple[list[ClaimedTask], int]:
        """``_claim`` over a window of tenants; the tenants found without ready work are
        added to ``empty``."""
        queue = consumer.queue
        failures = 0
        failure: Exception | None = None
        down: set[str] = set()  # masters that failed in this batch ("": a single server)
        for _ in range(len(tenants)):
            tenant = self._next_tenant(state, tenants)
            if down and self.ctx.warm.master_of(queue, tenant) in down:
                failures += 1
                continue
            try:
                tasks = self._claim_tenant(consumer, tenant, lease, empty)
            except WarmTierFull:  # its cold work finds no room warm: the others go on
                log.info("queue %r, tenant %r: the warm tier is full; its turn passes",
                         queue, tenant, extra=self._fields(consumer, tenant))
                continue
            except (WarmTierUnavailable, DatabaseTimedOut) as exc:
                failures += 1
                failure = exc
                master = self.ctx.warm.master_of(queue, tenant) \
                    if isinstance(exc, WarmTierUnavailable) else None
                if master is not None:
                    down.add(master)
                log.warning("queue %r, tenant %r: claiming failed (%s); its turn passes: %s",
                            queue, tenant, exc.message, exc.detail or "",
                            extra=self._fields(consumer, tenant))
                continue
            if tasks:
                return tasks, len(tenants)
        if failure is not None and failures == len(tenants):
            raise failure
        return [], len(tenants)

    def _resume_turn(self, queue: str, state: QueueState) -> None:
        """Once per queue and dispatcher: resume the turns after the tenant the queue's last
        batch served (kept in Valkey by :func:`record_counts`), so a new dispatcher — a
        fresh Lambda environment, a restart — does not start again at the first name."""
        with self._changed:
            if state.resumed:
                return
            state.resumed = True
        try:
            saved = saved_turn(self.ctx, queue)
        except Exception:
            log.warning("reading the turn of %r failed; its turns start at the first tenant",
                        queue, exc_info=True)
            return
        if saved is not None:
            with self._changed:
                if state.last_tenant is None:
                    state.last_tenant = saved

    def _next_tenant(self, state: QueueState, tenants: Sequence[str]) -> str:
        """The tenant after the one whose turn came last, by name (``tenants`` sorted), so
        the turn goes round whatever the list gained or lost meanwhile. The turn moves on
        before the claim, so concurrent batches of a queue take successive tenants."""
        with self._changed:
            after = state.last_tenant
            i = 0 if after is None else bisect.bisect_right(tenants, after)
            tenant = tenants[i % len(tenants)]
            state.last_tenant = tenant
        return tenant

    def _claim_tenant(self, consumer: Consumer, tenant: str,
                      lease: int, empty: list[str] | None = None) -> list[ClaimedTask]:
        """Up to ``batch_size`` of ``tenant``'s tasks, waiting up to the batching window for
        a full batch once the first task is claimed (as Lambda's SQS poller: with nothing
        ready there is no batch to wait for, and an idle queue must let its dispatcher go
        idle). A claim that fails during the window ends it: the batch is what was had.
        ``empty``: the tenant is added when its pair has no ready work at all."""
        request = ClaimRequest(max=consumer.batch_size, lease_seconds=lease,
                               worker=DISPATCHER_WORKER, tenant=tenant)
        budget = claim_budget(consumer.batch_size)
        tasks = claim_once(self.ctx, consumer.queue, request, max_bytes=budget, empty=empty)
        if not tasks or not consumer.window_ms or len(tasks) >= consumer.batch_size:
            return tasks
        window_ends = time.monotonic() + consumer.window_ms / 1000
        used = sum(_claimed_cost(t) for t in tasks)
        while len(tasks) < consumer.batch_size and used < budget:
            left = window_ends - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(WINDOW_POLL, left))
            try:
                more = claim_once(self.ctx, consumer.queue,
                                  request.model_copy(update={"max": consumer.batch_size
                                                             - len(tasks)}),
                                  max_bytes=max(1, budget - used))
            except Exception:
                log.warning("claiming more of %r for %r's batch failed; sending what it has",
                            consumer.queue, tenant, exc_info=True)
                break
            tasks.extend(more)
            used += sum(_claimed_cost(t) for t in more)
        return tasks

    def _later(self, state: QueueState, delay: float, *, narrow: bool = False) -> None:
        """No batch of the queue before ``delay`` from now; ``narrow``: then one at a time."""
        with self._changed:
            state.not_before = time.monotonic() + delay
            if narrow:
                state.width = 1

    @staticmethod
    def _fields(consumer: Consumer, tenant: str) -> dict[str, str]:
        """The structured fields of a log line about one batch (Powertools' logger keeps
        them as keys of its JSON line)."""
        return {"queue": consumer.queue, "tenant": tenant, "function": consumer.function}

    def _log_outcome(self, consumer: Consumer, tenant: str, invocation: Invocation) -> None:
        """The operator's log of an invocation that failed, with its message
        (``Invocation.detail``: the function's error message, the AWS SDK's), which is
        never stored on the tasks."""
        detail = invocation.detail or invocation.error
        if len(detail) > LOG_DETAIL_CHARS:
            detail = detail[:LOG_DETAIL_CHARS] + f"… ({len(detail)} characters)"
        fields = self._fields(consumer, tenant)
        if invocation.outcome == "function_error":
            log.warning("%s failed on a batch of queue %r, tenant %r (%s): %s",
                        consumer.function, consumer.queue, tenant, invocation.error, detail,
                        extra=fields)
        elif invocation.outcome == "failed":
            log.warning("invoking %s for a batch of queue %r, tenant %r failed, whether it ran "
                        "is unknown (%s): %s", consumer.function, consumer.queue, tenant,
                        invocation.error, detail, extra=fields)
        elif invocation.outcome == "not_invoked":
            log.error("%s could not be invoked for queue %r (%s): %s", consumer.function,
                      consumer.queue, invocation.error, detail, extra=fields)
        elif invocation.outcome == "throttled":
            log.info("%s was throttled for queue %r: %s", consumer.function, consumer.queue,
                     detail, extra=fields)

    def _after(self, consumer: Consumer, state: QueueState, invocation: Invocation) -> None:
        if invocation.outcome == "throttled":
            # back off with jitter, as Lambda's own pollers do when a function is throttled
            delay = state.throttle_delay * (0.5 + random.random())
            state.throttle_delay = min(state.throttle_delay * 2, THROTTLE_MAX)
            self._later(state, delay)
        elif invocation.outcome == "not_invoked":
            self._later(state, REFUSED_BACKOFF, narrow=True)
        else:
            state.throttle_delay = THROTTLE_FIRST


def _claimed_cost(task: ClaimedTask) -> int:
    return body_cost(orjson.dumps(task.payload)) + RECORD_FIELDS_COST
