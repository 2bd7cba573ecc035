"""Consumers written for SQS, as their authors would (Powertools' BatchProcessor with
process_partial_response, a module-level processor), called by the dispatcher through
``tests.dispatch.consumers:<name>``. What they saw goes to tests/dispatch/journal.py."""

from __future__ import annotations

import json
import time
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from pydantic import BaseModel, Json

from tests.dispatch.journal import JOURNAL

processor = BatchProcessor(event_type=EventType.SQS)


def fail_once_record(record: SQSRecord) -> None:
    """Fails the first run of a task whose payload says ``fail_once``."""
    payload = json.loads(record.body)
    runs = JOURNAL.ran(record.message_id, int(record.attributes.approximate_receive_count))
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    if payload.get("fail_once") and runs == 1:
        raise ValueError(f"task {payload['n']} fails its first run")


def fail_once(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    with JOURNAL.invocation(event):
        return process_partial_response(event=event, record_handler=fail_once_record,
                                        processor=processor, context=context)


class Order(BaseModel):
    n: int
    fail_once: bool = False


class OrderRecord(SqsRecordModel):
    body: Json[Order]  # the JSON text, parsed into an Order


model_processor = BatchProcessor(event_type=EventType.SQS, model=OrderRecord)


def model_record(record: OrderRecord) -> None:
    runs = JOURNAL.ran(record.messageId, int(record.attributes.ApproximateReceiveCount))
    if record.body.fail_once and runs == 1:
        raise ValueError(f"order {record.body.n} fails its first run")


def with_model(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    with JOURNAL.invocation(event):
        return process_partial_response(event=event, record_handler=model_record,
                                        processor=model_processor, context=context)


def noop(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=lambda record: None,
                                    processor=processor, context=context)


def crash(event: dict[str, Any], context: Any) -> dict[str, Any]:
    with JOURNAL.invocation(event):
        for record in event["Records"]:
            JOURNAL.ran(record["messageId"],
                        int(record["attributes"]["ApproximateReceiveCount"]))
        raise RuntimeError("the consumer crashed")


def keep(event: dict[str, Any], context: Any) -> None:
    """Records every event and succeeds (returns nothing, as a plain handler does)."""
    with JOURNAL.invocation(event):
        for record in event["Records"]:
            JOURNAL.ran(record["messageId"],
                        int(record["attributes"]["ApproximateReceiveCount"]))


class Charge(BaseModel, extra="forbid"):
    n: int


def validate_all(event: dict[str, Any], context: Any) -> None:
    """Parses every record before it works on any, as many consumers do: one bad record
    raises pydantic's ValidationError, whose message quotes the record's input."""
    with JOURNAL.invocation(event):
        for record in event["Records"]:
            JOURNAL.ran(record["messageId"],
                        int(record["attributes"]["ApproximateReceiveCount"]))
        for record in event["Records"]:
            Charge.model_validate_json(record["body"])


def meet(event: dict[str, Any], context: Any) -> None:
    """Records every event, then waits until as many invocations run at once as
    ``JOURNAL.barrier`` has parties (a function error, BrokenBarrierError, if they never
    do within its timeout)."""
    with JOURNAL.invocation(event):
        for record in event["Records"]:
            JOURNAL.ran(record["messageId"],
                        int(record["attributes"]["ApproximateReceiveCount"]))
        assert JOURNAL.barrier is not None
        JOURNAL.barrier.wait()


def hold(event: dict[str, Any], context: Any) -> None:
    """Records every event and returns once ``JOURNAL.gate`` is set (within 30 s)."""
    with JOURNAL.invocation(event):
        for record in event["Records"]:
            JOURNAL.ran(record["messageId"],
                        int(record["attributes"]["ApproximateReceiveCount"]))
        JOURNAL.gate.wait(30)


fifo_processor = SqsFifoPartialProcessor()
fifo_skip_processor = SqsFifoPartialProcessor(skip_group_on_error=True)


def fifo_record(record: SQSRecord) -> None:
    """Fails the first run of a task whose payload says ``fail_once`` (a FIFO consumer)."""
    payload = json.loads(record.body)
    runs = JOURNAL.ran(record.message_id, int(record.attributes.approximate_receive_count))
    if payload.get("fail_once") and runs == 1:
        raise ValueError(f"task {payload['n']} fails its first run")


def fifo(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    """A FIFO queue's consumer as Powertools documents it: the first failure stops the
    batch, and every later record is reported."""
    with JOURNAL.invocation(event):
        return process_partial_response(event=event, record_handler=fifo_record,
                                        processor=fifo_processor, context=context)


def fifo_skip_group(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    """``fifo`` with ``skip_group_on_error``: only the failed group's later records are
    reported."""
    with JOURNAL.invocation(event):
        return process_partial_response(event=event, record_handler=fifo_record,
                                        processor=fifo_skip_processor, context=context)
