"""The migrate function as CloudFormation calls it: a custom-resource request, answered by
an HTTP PUT on the pre-signed response URL (its host is CloudFormation's response bucket, as
the function requires; the PUT itself goes to a local HTTP server standing in for S3)."""

from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.handlers.support import Context, function_module, load_event
from tests.support.stores import scratch_database, with_database
from tierq.aws import custom_resource
from tierq.aws.runtime import reset_engine
from tierq.dal.migrate import LOCK_KEY, available
from tierq.local.services import LocalServices


@dataclass
class ResponseBucket:
    """Records each PUT like S3 would store the object behind a pre-signed URL."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)

    def only(self) -> dict[str, Any]:
        assert len(self.received) == 1, self.received
        return self.received[0]


# What CloudFormation sends in us-east-1 (the function accepts no other host there).
RESPONSE_URL = ("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com"
                "/cfn-responses/stack/resource?X-Amz-Signature=abc")


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[ResponseBucket]:
    """A local server standing in for S3: the function's PUTs to the response bucket go to it
    (same path and query), plain HTTP."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append({
                "path": self.path,
                "content_type": self.headers.get("Content-Type"),
                "body": json.loads(self.rfile.read(length)),
            })
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]

    def to_local(put: urllib.request.Request, timeout: float) -> int:
        parts = urlsplit(put.full_url)
        put.full_url = f"http://{host}:{port}{parts.path}?{parts.query}"
        with urllib.request.urlopen(put, timeout=timeout) as response:
            return int(response.status)

    monkeypatch.setattr(custom_resource, "_put", to_local)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    yield ResponseBucket(url=RESPONSE_URL, received=received)
    server.shutdown()
    server.server_close()


@pytest.fixture
def fresh_database(services: LocalServices) -> Iterator[str]:
    with scratch_database(services.postgres.url, "tierq_migrate") as url:
        yield url


def request(kind: str, bucket: ResponseBucket, **extra: Any) -> dict[str, Any]:
    event = load_event("cloudformation_create.json")
    event.update(RequestType=kind, ResponseURL=bucket.url, LogicalResourceId="DbMigrations",
                 ResourceType="Custom::TierqMigrations", **extra)
    return event


def migrate_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.delenv("DB_SECRET_ARN", raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    reset_engine()


def test_create_applies_migrations_then_update_finds_nothing(
        monkeypatch: pytest.MonkeyPatch, bucket: ResponseBucket, fresh_database: str) -> None:
    migrate_env(monkeypatch, fresh_database)
    handler = function_module("migrate").lambda_handler
    answer = handler(request("Create", bucket), Context(timeout_seconds=300))
    sent = bucket.only()
    assert sent["body"] == answer
    assert sent["content_type"] == ""  # pre-signed S3 URLs are signed without a content type
    assert sent["path"].startswith("/cfn-responses/stack/resource?X-Amz-Signature=")
    versions = [m.version for m in available()]
    assert answer["Status"] == "SUCCESS"
    # Shards: the one shard of a deployment without TIERQ_SHARD_NAMES (what the functions read)
    assert answer["Data"] == {"Applied": ",".join(versions), "AppliedCount": len(versions),
                              "Shards": "default"}
    assert answer["PhysicalResourceId"] == "tierq-db-migrations"
    event = load_event("cloudformation_create.json")
    for key in ("StackId", "RequestId"):
        assert answer[key] == event[key]
    assert answer["LogicalResourceId"] == "DbMigrations"
    with psycopg.connect(fresh_database) as conn:
        assert conn.execute("SELECT count(*) FROM tierq_tasks").fetchone()[0] == 0

    bucket.received.clear()
    update = handler(request("Update", bucket, PhysicalResourceId="tierq-db-migrations",
                             OldResourceProperties={}), Context(timeout_seconds=300))
    assert update["Status"] == "SUCCESS"
    assert update["Data"] == {"Applied": "", "AppliedCount": 0, "Shards": "default"}
    assert update["PhysicalResourceId"] == "tierq-db-migrations"


def test_delete_answers_success_and_leaves_the_database_alone(
        monkeypatch: pytest.MonkeyPatch, bucket: ResponseBucket) -> None:
    migrate_env(monkeypatch, "postgresql://nobody@127.0.0.1:1/none")  # never contacted
    answer = function_module("migrate").lambda_handler(
        request("Delete", bucket, PhysicalResourceId="tierq-db-migrations"), Context())
    assert answer["Status"] == "SUCCESS"
    assert bucket.only()["body"]["Status"] == "SUCCESS"


def test_a_failure_is_answered_as_failed_with_the_reason(
        monkeypatch: pytest.MonkeyPatch, bucket: ResponseBucket, services: LocalServices) -> None:
    missing = with_database(services.postgres.url, f"absent_{uuid.uuid4().hex[:8]}")
    migrate_env(monkeypatch, missing)
    answer = function_module("migrate").lambda_handler(request("Create", bucket),
                                                       Context(timeout_seconds=300))
    assert answer["Status"] == "FAILED"
    assert "does not exist" in answer["Reason"]
    assert "log stream" in answer["Reason"]
    assert bucket.only()["body"] == answer


def test_migrations_still_running_near_the_timeout_are_answered_failed(
        monkeypatch: pytest.MonkeyPatch, bucket: ResponseBucket, fresh_database: str) -> None:
    migrate_env(monkeypatch, fresh_database)
    with psycopg.connect(fresh_database, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))  # another runner holds it
        answer = function_module("migrate").lambda_handler(
            request("Create", bucket), Context(timeout_seconds=16.5))  # 1.5 s of work allowed
        assert answer["Status"] == "FAILED"
        assert "still running" in answer["Reason"]
        assert bucket.only()["body"]["Status"] == "FAILED"
        holder.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))


def test_an_unknown_request_type_is_failed(monkeypatch: pytest.MonkeyPatch,
                                           bucket: ResponseBucket) -> None:
    migrate_env(monkeypatch, "postgresql://nobody@127.0.0.1:1/none")
    answer = function_module("migrate").lambda_handler(request("Rename", bucket), Context())
    assert answer["Status"] == "FAILED" and "Rename" in answer["Reason"]
