"""Big payloads in a consumer function: the records of a batch carry a pointer in their
``body`` where a task's payload was offloaded (the SQS extended client's format,
:mod:`tierq.core.pointers`); :func:`resolve_records` puts each object's JSON in its place,
so the rest of the function reads ``record["body"]`` as for any task.

    from tierq.aws.payloads import resolve_records

    def lambda_handler(event, context):
        for record in resolve_records(event):
            payload = json.loads(record["body"])
            ...

The function reads the payload bucket with its own role: attach the stack's
``PayloadReadPolicyArn`` output (s3:GetObject under ``tenants/``, kms:Decrypt on the key).
Under ``tierq dev`` the same call reads the local folder (``TIERQ_PAYLOAD_DIR``). Records
whose body is no pointer are left as they are; so is a record whose object is another
tenant's (its ``SenderId``): it raises :class:`PayloadUnavailable` instead, as does one
whose object is gone, and one without a ``SenderId`` (no tenant to check the pointer
against). Powertools' batch processors report the raising record alone when
the call is made per record (:func:`resolve_record`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from tierq.core.pointers import MalformedPointer, parse_pointer
from tierq.dal.payload_store import PayloadStore, payload_store


class PayloadUnavailable(RuntimeError):
    """A record's pointer names an object this function cannot read (missing, another
    tenant's, another bucket, or no payload store configured)."""


def resolve_record(record: dict[str, Any], store: PayloadStore | None = None
                   ) -> dict[str, Any]:
    """The record with its pointer's object as its ``body`` (``md5OfBody`` updated); the
    record itself when its body is no pointer. Changes the record in place."""
    body = record.get("body")
    if not isinstance(body, str) or "PayloadS3Pointer" not in body:
        return record
    try:
        pointer = parse_pointer(orjson.loads(body))
    except (orjson.JSONDecodeError, MalformedPointer):
        return record
    if pointer is None:
        return record
    store = store or payload_store()
    if store is None:
        raise PayloadUnavailable("no payload store: set TIERQ_PAYLOAD_BUCKET to the stack's "
                                 "PayloadBucketName")
    sender = (record.get("attributes") or {}).get("SenderId")
    if not sender:
        raise PayloadUnavailable(f"record {record.get('messageId')}: no attributes.SenderId "
                                 "(the task's tenant) to check the pointer's tenant against; "
                                 "pass the record as the consumer function received it")
    if pointer.bucket != store.bucket or pointer.tenant() != sender:
        raise PayloadUnavailable(f"record {record.get('messageId')}: the pointer names "
                                 f"{pointer.bucket}/{pointer.key}, not one of tenant "
                                 f"{sender!r}'s payloads in {store.bucket}")
    try:
        data = store.read(pointer.key)
    except KeyError:
        raise PayloadUnavailable(f"record {record.get('messageId')}: no object "
                                 f"{pointer.key} in {store.bucket}") from None
    text = data.decode()
    record["body"] = text
    record["md5OfBody"] = hashlib.md5(data, usedforsecurity=False).hexdigest()
    return record


def resolve_records(event: Mapping[str, Any], store: PayloadStore | None = None
                    ) -> list[dict[str, Any]]:
    """Every record of an SQS-shaped event, each through :func:`resolve_record`."""
    return [resolve_record(record, store) for record in event.get("Records", [])]


__all__ = ["PayloadUnavailable", "resolve_record", "resolve_records"]
