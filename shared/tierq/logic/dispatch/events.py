"""The SQS shape of push delivery: a batch's event, one record per task, and the function's
partial batch response, exactly as Amazon SQS and Lambda's SQS event source write and read
them, so that a function written for an SQS event source runs unchanged.

One record per task (:func:`sqs_record`): ``messageId`` the task id, ``receiptHandle`` the
lease token, ``body`` the payload as JSON text, ``md5OfBody``, ``eventSource`` ``aws:sqs``,
``eventSourceARN`` an ARN-shaped name of the queue, ``awsRegion``, ``attributes`` and
``messageAttributes``. The ``attributes`` are ``ApproximateReceiveCount`` (the attempt),
``SentTimestamp`` (the enqueue time), ``ApproximateFirstReceiveTimestamp`` (the time of this
delivery: tierq keeps no first delivery time) and ``SenderId`` (the tenant), all strings;
a task of a group (logic/groups.py) adds ``MessageGroupId`` (its group) and
``SequenceNumber`` (its ``seq`` in SQS's form: a decimal string, zero-padded to 20 digits),
as a FIFO queue's records carry them, so Powertools' ``SqsFifoPartialProcessor`` runs
unchanged. A batch's records are in group order (:func:`in_group_order`).
The ``messageAttributes`` are ``queue``, ``tenant``, ``key`` when the task has one,
``priority``, and ``parents`` for a task released from a wait (``after``): the JSON text of
what its claim carries as ``parents`` (each parent's id, queue, final state and result), with
``md5OfMessageAttributes`` computed as SQS does.

A task enqueued with a trace context (models/traces.py) carries it as SQS carries one: its
X-Ray header as the ``AWSTraceHeader`` attribute, its W3C ``traceparent`` (and
``tracestate``) as message attributes of those names, which OpenTelemetry's SQS
instrumentations read. The dispatcher's own invoke carries no trace header
(aws/consumers.py): the function's records, not its invocation, continue the task's trace.

A batch holds at most what a synchronous invoke's request may carry (6 MB): the claim is
given a byte budget (:func:`claim_budget`) that leaves room for the records' fields
(:data:`RECORD_FIELDS_COST` each).
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from tierq.core.sizing import LAMBDA_PAYLOAD_LIMIT, body_cost
from tierq.logic.claim_budget import TASK_FIELDS_COST
from tierq.logic.context import to_ms
from tierq.models.leases import ClaimedTask

DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT = "123456789012"
# The longest key (models.names.KEY_PATTERN: 512 characters of up to 4 UTF-8 bytes).
LONGEST_KEY_BYTES = 512 * 4
# The longest group, in characters (models.tasks.GroupName).
LONGEST_GROUP = 128
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
    if task.parents is not None:
        attributes["parents"] = _string_attribute(parents_text(task))
    trace = task.trace
    if trace is not None:
        if trace.traceparent is not None:
            attributes["traceparent"] = _string_attribute(trace.traceparent)
        if trace.tracestate is not None:
            attributes["tracestate"] = _string_attribute(trace.tracestate)
    system: dict[str, str] = {
        "ApproximateReceiveCount": str(task.attempt),
        "SentTimestamp": str(to_ms(task.enqueued_at.timestamp())),
        "SenderId": task.tenant,
        "ApproximateFirstReceiveTimestamp": str(delivered_ms),
    }
    if task.group is not None:
        system["MessageGroupId"] = task.group
        if task.seq is not None:
            system["SequenceNumber"] = sequence_number(task.seq)
    if trace is not None and trace.aws_trace_header is not None:
        system["AWSTraceHeader"] = trace.aws_trace_header
    return {
        "messageId": str(task.id),
        "receiptHandle": task.lease_token,
        "body": body,
        "attributes": system,
        "messageAttributes": attributes,
        "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "md5OfMessageAttributes": md5_of_message_attributes(attributes),
        "eventSource": "aws:sqs",
        "eventSourceARN": event_source_arn(task.queue, region, account),
        "awsRegion": region,
    }


def sequence_number(seq: int) -> str:
    """A task's ``seq`` as SQS writes a ``SequenceNumber``: decimal, zero-padded to 20
    digits (a seq is a bigint, so it never needs more)."""
    return f"{seq:020d}"


def in_group_order(tasks: Sequence[ClaimedTask]) -> list[ClaimedTask]:
    """``tasks`` with each group's tasks in ``seq`` order, in the places its tasks held:
    a claim takes tasks by priority, so with ``group_max_leased`` above 1 a group's later
    task may come first, and a consumer of a FIFO queue reads a group's records in order.
    Tasks without a group (or without a seq) keep their places."""
    places: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        if task.group is not None and task.seq is not None:
            places.setdefault(task.group, []).append(i)
    ordered = list(tasks)
    for indexes in places.values():
        if len(indexes) > 1:
            members = sorted((tasks[i] for i in indexes), key=lambda t: t.seq or 0)
            for i, task in zip(indexes, members, strict=True):
                ordered[i] = task
    return ordered


def parents_text(task: ClaimedTask) -> str:
    """The JSON text of a claimed task's parents, as a claim answers them."""
    return orjson.dumps([p.model_dump(mode="json") for p in task.parents or ()]).decode()


def _record_fields_cost() -> int:
    """What a record weighs beyond its body's escaped text, at its longest (names of 64
    characters, the longest key and group, a 200-character token, 20-digit numbers), plus a
    comma."""
    from datetime import UTC, datetime

    name = "n" * 64
    longest = ClaimedTask.model_construct(
        id=uuid.UUID(int=0), queue=name, tenant=name, key="\U0010ffff" * 512,
        group="\U0010ffff" * LONGEST_GROUP, seq=2**63 - 1,
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


def claimed_cost(task: ClaimedTask) -> int:
    """What a claimed task weighs as a record, at most (its parents' text, escaped in its
    attribute, on top)."""
    cost = body_cost(orjson.dumps(task.payload)) + RECORD_FIELDS_COST
    if task.parents is not None:
        cost += body_cost(parents_text(task).encode()) + len(attribute_fields("parents"))
    if task.trace is not None:  # (a record of a task without one costs nothing more)
        cost += trace_cost(task)
    return cost


def trace_cost(task: ClaimedTask) -> int:
    """What a traced task's trace context adds to its record: its attributes (each escaped
    as the record carries it)."""
    trace = task.trace
    if trace is None:
        return 0
    cost = 0
    for name, value in (("traceparent", trace.traceparent), ("tracestate", trace.tracestate)):
        if value is not None:
            cost += body_cost(orjson.dumps(value)) + len(attribute_fields(name))
    if trace.aws_trace_header is not None:
        cost += body_cost(orjson.dumps({"AWSTraceHeader": trace.aws_trace_header})) + 1
    return cost


def attribute_fields(name: str) -> bytes:
    """The JSON text an attribute named ``name`` adds to a record besides its value."""
    return orjson.dumps({name: _string_attribute("")})
