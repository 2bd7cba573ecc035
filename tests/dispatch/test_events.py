"""The event a consumer gets is SQS's, field by field: Powertools parses it with its
SqsRecordModel (parser) and its SQSEvent data class, and an SQS consumer's
BatchProcessor answers it as it would answer SQS."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import orjson
from aws_lambda_powertools.utilities.data_classes import SQSEvent
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import SqsModel

from tierq.logic.dispatch import (
    EVENT_LIMIT,
    RECORD_FIELDS_COST,
    claim_budget,
    in_group_order,
    md5_of_message_attributes,
    read_response,
    split_reported,
    sqs_event,
)
from tierq.models.leases import ClaimedTask


def task(payload: Any = None, *, key: str | None = "order-7", attempt: int = 1,
         priority: int = 3, tenant: str = "acme", group: str | None = None,
         seq: int | None = None) -> ClaimedTask:
    return ClaimedTask(id=uuid4(), queue="orders", tenant=tenant, key=key, priority=priority,
                       payload={"n": 1} if payload is None else payload, attempt=attempt,
                       max_attempts=5, lease_token=f"{tenant}~abc~{attempt}~1",
                       lease_expires_at=datetime.now(UTC),
                       redelivered=attempt > 1,
                       enqueued_at=datetime(2026, 11, 23, 12, 0, 0, 123000, tzinfo=UTC),
                       group=group, seq=seq)


def event_of(*tasks: ClaimedTask) -> dict[str, Any]:
    raw, fit = sqs_event(list(tasks), delivered_ms=1_795_000_000_000, region="eu-west-1",
                         account="111122223333")
    assert fit == len(tasks)
    decoded: dict[str, Any] = orjson.loads(raw)
    return decoded


def test_each_record_has_the_fields_of_an_sqs_record() -> None:
    first, retried = task({"to": "a@b.c", "ü": "€"}), task(attempt=3, key=None)
    event = event_of(first, retried)
    record = event["Records"][0]
    assert set(record) == {"messageId", "receiptHandle", "body", "attributes",
                           "messageAttributes", "md5OfBody", "md5OfMessageAttributes",
                           "eventSource", "eventSourceARN", "awsRegion"}
    assert record["messageId"] == str(first.id)
    assert record["receiptHandle"] == first.lease_token
    assert json.loads(record["body"]) == {"to": "a@b.c", "ü": "€"}
    assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == "arn:aws:sqs:eu-west-1:111122223333:orders"
    assert record["awsRegion"] == "eu-west-1"
    assert record["attributes"] == {
        "ApproximateReceiveCount": "1", "SentTimestamp": "1795435200123",
        "SenderId": "acme", "ApproximateFirstReceiveTimestamp": "1795000000000"}
    assert {name: (a["stringValue"], a["dataType"])
            for name, a in record["messageAttributes"].items()} == {
        "queue": ("orders", "String"), "tenant": ("acme", "String"),
        "key": ("order-7", "String"), "priority": ("3", "Number")}
    again = event["Records"][1]
    assert again["attributes"]["ApproximateReceiveCount"] == "3"
    assert "key" not in again["messageAttributes"]  # SQS leaves out what a message lacks


def test_the_md5_of_message_attributes_is_sqs_s() -> None:
    # the worked example of SQS's algorithm: one String attribute
    attributes = {"a": {"stringValue": "b", "dataType": "String"}}
    expected = hashlib.md5(b"\x00\x00\x00\x01a" + b"\x00\x00\x00\x06String" + b"\x01"
                           + b"\x00\x00\x00\x01b").hexdigest()
    assert md5_of_message_attributes(attributes) == expected


def test_powertools_parses_the_event_with_its_sqs_model_and_data_class() -> None:
    first, second = task({"n": 1}), task([1, "two", None], attempt=2)
    event = event_of(first, second)
    parsed = parse(event=event, model=SqsModel)
    assert [r.messageId for r in parsed.Records] == [str(first.id), str(second.id)]
    assert parsed.Records[1].attributes.ApproximateReceiveCount == "2"
    assert parsed.Records[0].attributes.SentTimestamp == datetime(2026, 11, 23, 12, 0, 0,
                                                                  123000, tzinfo=UTC)
    assert parsed.Records[0].messageAttributes["priority"].stringValue == "3"
    data = SQSEvent(event)
    records = list(data.records)
    assert records[1].json_body == [1, "two", None]
    assert records[0].receipt_handle == first.lease_token
    tenant = records[0].message_attributes["tenant"]
    assert tenant is not None and tenant.string_value == "acme"
    assert records[0].queue_url.endswith("/111122223333/orders")


def test_a_batch_is_cut_before_the_invoke_limit() -> None:
    big = "x" * 1_000_000
    tasks = [task({"blob": big}) for _ in range(8)]
    raw, fit = sqs_event(tasks, delivered_ms=0)
    assert fit == 5 and len(raw) <= EVENT_LIMIT
    # one task always goes, whatever its size
    raw, fit = sqs_event([task({"blob": "y" * (EVENT_LIMIT + 10)})], delivered_ms=0)
    assert fit == 1


def test_the_claim_budget_leaves_room_for_every_records_fields() -> None:
    assert claim_budget(1) > claim_budget(100) > EVENT_LIMIT - 100 * RECORD_FIELDS_COST
    # a full batch of tasks as large as the budget allows still fits one invoke
    tasks = [task({"k": "q" * 40_000}, key="\U0010ffff" * 512) for _ in range(100)]
    raw, fit = sqs_event(tasks, delivered_ms=0)
    assert fit == 100 and len(raw) <= EVENT_LIMIT


def test_batch_item_failures_are_read_as_lambda_reads_them() -> None:
    ids = ["a", "b", "c"]
    # a success: no response, null, no or an empty batchItemFailures, anything not an object
    for fine in (b"", b"null", b'{"batchItemFailures": []}', b'{"batchItemFailures": null}',
                 b'{"statusCode": 200}', b'"done"'):
        assert read_response(fine, ids) == (set(), False), fine
    assert read_response(b'{"batchItemFailures": [{"itemIdentifier": "b"}]}', ids) == \
        ({"b"}, False)
    # the whole batch failed, the response invalid: not JSON, an empty, missing, null or
    # unknown identifier, a list that is not one
    for bad in (b"{not json", b'{"batchItemFailures": [{"itemIdentifier": ""}]}',
                b'{"batchItemFailures": [{"itemIdentifier": null}]}',
                b'{"batchItemFailures": [{"id": "a"}]}',
                b'{"batchItemFailures": [{"itemIdentifier": "zzz"}]}',
                b'{"batchItemFailures": "a"}'):
        assert read_response(bad, ids) == (set(ids), True), bad


def test_grouped_records_carry_their_group_and_sequence_number_in_group_order() -> None:
    """A claim takes tasks by priority, so a group's later task may come first: its
    records are put in seq order in the places the group's tasks held; ungrouped tasks
    keep theirs."""
    a2 = task({"n": "a2"}, group="A", seq=907, priority=9)
    loose = task({"n": "u"}, key=None)
    a1 = task({"n": "a1"}, group="A", seq=42)
    b1 = task({"n": "b1"}, group="B", seq=500)
    a3 = task({"n": "a3"}, group="A", seq=2**63 - 1)
    ordered = in_group_order([a2, loose, b1, a3, a1])
    assert ordered == [a1, loose, b1, a2, a3]
    records = event_of(*ordered)["Records"]
    attributes = [r["attributes"] for r in records]
    assert [(a.get("MessageGroupId"), a.get("SequenceNumber")) for a in attributes] == [
        ("A", "00000000000000000042"), (None, None), ("B", "00000000000000000500"),
        ("A", "00000000000000000907"), ("A", "09223372036854775807")]
    assert all(len(a["SequenceNumber"]) == 20 for a in attributes if "SequenceNumber" in a)
    # Powertools reads them as a FIFO queue's attributes
    parsed = parse(event={"Records": records}, model=SqsModel)
    assert [r.attributes.MessageGroupId for r in parsed.Records] == ["A", None, "B", "A", "A"]
    assert parsed.Records[0].attributes.SequenceNumber == "00000000000000000042"
    assert [r.attributes.message_group_id for r in SQSEvent({"Records": records}).records
            ][3] == "A"
    # the seq stays out of a claim's answer (it is for records only)
    assert "seq" not in a1.model_dump() and a1.seq == 42


def test_a_grouped_record_fits_the_fields_cost() -> None:
    """RECORD_FIELDS_COST covers the longest group and sequence number."""
    longest = task(None, key="\U0010ffff" * 512, group="\U0010ffff" * 128, seq=2**63 - 1,
                   tenant="t" * 64)
    raw, _ = sqs_event([longest], delivered_ms=10**19)
    [record] = orjson.loads(raw)["Records"]
    assert len(orjson.dumps(record)) - len(orjson.dumps(record["body"])) < RECORD_FIELDS_COST


def test_each_groups_first_reported_record_is_retried_and_its_later_ones_given_back() -> None:
    a1, a2, a3 = (task(group="A", seq=s) for s in (1, 2, 3))
    b1, b2 = (task(group="B", seq=s) for s in (4, 5))
    u1, u2 = task(key=None), task(key=None)
    retried, given_back = split_reported([a2, u1, b2, a3, u2])  # a1 and b1 succeeded
    assert retried == [a2, u1, b2, u2] and given_back == [a3]
    retried, given_back = split_reported([a3, a1, b1, a2, b2])  # out of order: by seq
    assert retried == [a1, b1] and given_back == [a2, a3, b2]
    assert split_reported([u2, u1]) == ([u2, u1], [])
