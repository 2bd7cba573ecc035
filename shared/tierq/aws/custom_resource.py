"""The CloudFormation custom resource that applies the SQL migrations (``DbMigrations`` in
template.yaml, backed by the ``migrate`` function).

CloudFormation sends Create / Update / Delete and waits for an answer on the request's
pre-signed ``ResponseURL`` (an HTTP PUT of a JSON document with an empty Content-Type).
Create and Update apply every pending migration (as the owner) and make the application's
login a member of the application group; Delete answers SUCCESS and leaves the
database alone (the data outlives the stack's custom resource). Whatever happens, an
answer is sent — a missing answer would leave the stack waiting for an hour — and it is
sent before the function's own timeout: a migration still running then is reported FAILED.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson

from tierq.aws.runtime import logger
from tierq.config import get_settings
from tierq.dal import connect
from tierq.dal.migrate import ensure_app_login, migrate

PHYSICAL_RESOURCE_ID = "tierq-db-migrations"
ANSWER_MARGIN_SECONDS = 15.0  # keep this much of the invocation for sending the answer
MAX_REASON = 1500  # the whole response must stay under 4096 bytes
SEND_ATTEMPTS = 4


class InvocationContext(Protocol):
    log_stream_name: str

    def get_remaining_time_in_millis(self) -> int: ...


def answer(event: Mapping[str, Any], status: str, *, reason: str = "",
           data: Mapping[str, Any] | None = None, physical_id: str | None = None) -> dict[str, Any]:
    """The response document CloudFormation expects."""
    body: dict[str, Any] = {
        "Status": status,
        "PhysicalResourceId": physical_id or event.get("PhysicalResourceId")
        or PHYSICAL_RESOURCE_ID,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "NoEcho": False,
        "Data": dict(data or {}),
    }
    if reason:
        body["Reason"] = reason[:MAX_REASON]
    return body


def send(url: str, body: Mapping[str, Any], *, attempts: int = SEND_ATTEMPTS,
         sleep: Callable[[float], None] = time.sleep) -> int:
    """PUT the answer to the pre-signed URL (retrying briefly); returns the HTTP status."""
    data = orjson.dumps(body)
    last: Exception | None = None
    for attempt in range(attempts):
        put = urllib.request.Request(url, data=data, method="PUT",
                                     headers={"Content-Type": "", "Content-Length": str(len(data))})
        try:
            with urllib.request.urlopen(put, timeout=10) as response:
                return int(response.status)
        except (urllib.error.URLError, OSError) as exc:
            last = exc
            logger.warning("answering CloudFormation failed; retrying",
                           extra={"attempt": attempt + 1, "error": str(exc)})
            sleep(min(2.0**attempt, 5.0))
    raise RuntimeError(f"could not answer CloudFormation at the response URL: {last}")


def _run_with_deadline(work: Callable[[], Any], seconds: float) -> Any:
    """``work()``'s result, or TimeoutError when it has not finished within ``seconds``."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="migrations", daemon=True)
    worker.start()
    worker.join(max(0.0, seconds))
    if worker.is_alive():
        raise TimeoutError(f"migrations still running after {seconds:.0f}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def apply_migrations() -> list[str]:
    """As the owner (DB_SECRET_ARN): apply the migrations, then make the application's
    login (DB_APP_SECRET_ARN) a member of the application group."""
    settings = get_settings()
    url = connect.database_url(settings)
    applied = migrate(url)
    if settings.db_app_secret_arn:
        login = connect.fetch_secret(settings.db_app_secret_arn)
        group = ensure_app_login(url, str(login["username"]), str(login["password"]))
        logger.info("application login ready", extra={"login": login["username"],
                                                      "group": group})
    return applied


def handle(event: Mapping[str, Any], context: InvocationContext,
           work: Callable[[], list[str]] = apply_migrations) -> dict[str, Any]:
    """Do what the request asks and answer CloudFormation; returns the answer sent."""
    request_type = event.get("RequestType")
    try:
        if request_type == "Delete":
            body = answer(event, "SUCCESS", data={"Applied": "", "AppliedCount": 0})
        elif request_type in ("Create", "Update"):
            seconds = context.get_remaining_time_in_millis() / 1000.0 - ANSWER_MARGIN_SECONDS
            applied = _run_with_deadline(work, seconds)
            logger.info("migrations applied", extra={"applied": applied})
            body = answer(event, "SUCCESS",
                          data={"Applied": ",".join(applied), "AppliedCount": len(applied)})
        else:
            body = answer(event, "FAILED", reason=f"unknown RequestType {request_type!r}")
    except Exception as exc:
        logger.exception("migrations failed")
        stream = getattr(context, "log_stream_name", "")
        body = answer(event, "FAILED", reason=f"{type(exc).__name__}: {exc}"
                      + (f" (log stream {stream})" if stream else ""))
    status = send(event["ResponseURL"], body)
    logger.info("answered CloudFormation", extra={"status": body["Status"], "http": status})
    return body
