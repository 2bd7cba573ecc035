"""Pointers to payloads kept outside a task (big payloads), in the format of the Amazon SQS
Extended Client Library, so that a consumer written for it reads tierq's records unchanged:

    ["software.amazon.payloadoffloading.PayloadS3Pointer",
     {"s3BucketName": "<bucket>", "s3Key": "tenants/<tenant>/<id>"}]

A pointer is a task's whole payload. Its object lives in the deployment's payload bucket
under its tenant's prefix (:func:`tenant_prefix`); the enqueue refuses any other
(``tierq.logic.payloads``). Pure: no I/O, used by the server, the client and the consumer
helper alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
KEY_ROOT = "tenants/"
# The inline limit of the API (TIERQ_MAX_PAYLOAD_BYTES' default): the client offloads a
# payload whose JSON is longer than this.
INLINE_LIMIT = 256 * 1024


class MalformedPointer(ValueError):
    """A payload that claims to be a pointer but is not one; the message says why."""


@dataclass(frozen=True, slots=True)
class Pointer:
    bucket: str
    key: str

    def payload(self) -> list[Any]:
        """The pointer as a task's payload (the extended client's JSON array)."""
        return [POINTER_CLASS, {"s3BucketName": self.bucket, "s3Key": self.key}]

    def tenant(self) -> str | None:
        """The tenant whose prefix holds the key, or None when the key is under none."""
        if not self.key.startswith(KEY_ROOT):
            return None
        tenant, slash, rest = self.key[len(KEY_ROOT):].partition("/")
        return tenant if slash and tenant and rest else None


def tenant_prefix(tenant: str) -> str:
    """Where a tenant's payload objects live in the bucket (with its trailing slash)."""
    return f"{KEY_ROOT}{tenant}/"


def looks_like_pointer(payload: Any) -> bool:
    """Whether ``payload`` claims to be a pointer: a JSON array (a list, or a tuple from a
    Python caller) whose first item is the extended client's class name."""
    return (isinstance(payload, (list, tuple)) and len(payload) >= 1
            and isinstance(payload[0], str) and payload[0] == POINTER_CLASS)


def parse_pointer(payload: Any) -> Pointer | None:
    """The pointer ``payload`` is; None when it does not claim to be one. Raises
    :class:`MalformedPointer` for an array that names the class but is not a pointer."""
    if not looks_like_pointer(payload):
        return None
    if len(payload) != 2 or not isinstance(payload[1], dict):
        raise MalformedPointer(f"a pointer is [{POINTER_CLASS!r}, "
                               "{\"s3BucketName\": ..., \"s3Key\": ...}]")
    fields = payload[1]
    bucket, key = fields.get("s3BucketName"), fields.get("s3Key")
    if not isinstance(bucket, str) or not bucket:
        raise MalformedPointer("s3BucketName must be a non-empty string")
    if not isinstance(key, str) or not key:
        raise MalformedPointer("s3Key must be a non-empty string")
    extra = sorted(set(fields) - {"s3BucketName", "s3Key"})
    if extra:
        raise MalformedPointer(f"unknown fields {extra}: a pointer has s3BucketName and "
                               "s3Key only")
    if ".." in key.split("/") or "//" in key or "\\" in key:
        raise MalformedPointer("s3Key must not hold '..', '//' or '\\'")
    return Pointer(bucket, key)
