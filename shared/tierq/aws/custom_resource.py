"""The CloudFormation custom resource that applies the SQL migrations (``DbMigrations`` in
template.yaml, backed by the ``migrate`` function).

CloudFormation sends Create / Update / Delete and waits for an answer on the request's
pre-signed ``ResponseURL`` (an HTTP PUT of a JSON document with an empty Content-Type).
Create and Update apply every pending migration (as the owner) and make the application's
login a member of the application group; Delete answers SUCCESS and leaves the
database alone (the data outlives the stack's custom resource). Whatever happens, an
answer is sent — a missing answer would leave the stack waiting for an hour — and it is
sent before the function's own timeout: a migration still running then is reported FAILED.

With shards, each further shard's stack has a resource of its own that migrates that shard
(its properties name it), and ``DbMigrations`` migrates every shard and puts them in service
together; its answer's ``Shards`` is what the functions read as ``TIERQ_SHARD_NAMES``.

A request is checked before anything is done with it (:func:`check_request`). Otherwise
whoever may invoke the function could send the owner's credentials to a host of its
choosing, or have the answer PUT anywhere. Only these are accepted:

| field                       | accepted when                                              |
| --------------------------- | ---------------------------------------------------------- |
| ``ResponseURL``             | an https URL, port 443, no user part, on the bucket below  |
| its bucket                  | ``cloudformation-custom-resource-response-<region>``, the  |
|                             | region without dashes (the form with dashes is not AWS's)  |
| its host                    | an S3 form: ``<bucket>.s3.amazonaws.com``,                 |
|                             | ``<bucket>.s3.<region>.amazonaws.com``,                    |
|                             | ``<bucket>.s3-<region>.amazonaws.com`` or the dual-stack   |
|                             | one; ``.amazonaws.com.cn`` in China                        |
| ``Shard`` (a further        | a shard of ``TIERQ_SHARD_NAMES`` other than the default    |
| shard's, with               |                                                            |
| ``OwnerSecretArn``)         |                                                            |
| ``DbName``                  | the database ``DB_NAME``                                   |
| ``Host``                    | exactly the endpoint RDS reports for that shard's proxy,   |
|                             | ``TIERQ_SHARD_PROXY_PREFIX`` + the shard's name (the name  |
|                             | infra/shard.yaml gives it)                                 |

The default shard is always reached at ``DB_HOST``, the proxy the function was deployed
with, whatever the request says.

A Delete does nothing with the database, so only its ``ResponseURL`` is checked. The
resource of a shard just taken out of ``TIERQ_SHARD_NAMES`` (or of a shard stack a rollback
deletes) names a shard the function does not know, and refusing its Delete would leave that
nested stack ``DELETE_FAILED``.

| the request | what is done | what is answered |
| --- | --- | --- |
| ResponseURL refused (any type) | nothing (an error logged) | nothing: a waiting stack times out |
| Delete | nothing | SUCCESS |
| Create / Update: Host, shard or database refused | nothing | FAILED, with the reason |
| Create / Update accepted | the migrations | SUCCESS, or FAILED |
"""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from tierq.aws.runtime import logger
from tierq.config import Settings, get_settings
from tierq.dal import connect
from tierq.dal.migrate import ensure_app_login, migrate
from tierq.dal.shards import (
    check_names,
    directory_entries,
    parse_shard_names,
    shards_from_settings,
)

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


RESPONSE_BUCKET_PREFIX = "cloudformation-custom-resource-response-"


class Refused(Exception):
    """A request this function does not act on; the message says why (no secret in it)."""


def _s3_suffix(region: str) -> str:
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


def response_url_problem(url: str, region: str | None) -> str | None:
    """Why ``url`` is not CloudFormation's response URL for ``region`` (None when it is)."""
    if not region:
        return "the function's region (AWS_REGION) is not set"
    try:
        parts = urlsplit(str(url))
        port = parts.port
    except ValueError:
        return "ResponseURL is not a URL"
    if parts.scheme != "https":
        return "ResponseURL is not https"
    if parts.username is not None or parts.password is not None:
        return "ResponseURL has a user part"
    if port not in (None, 443):
        return "ResponseURL names a port"
    host = (parts.hostname or "").lower()
    bucket = RESPONSE_BUCKET_PREFIX + region.replace("-", "")
    suffix = _s3_suffix(region)
    allowed = {f"{bucket}.s3.{suffix}", f"{bucket}.s3.{region}.{suffix}",
               f"{bucket}.s3-{region}.{suffix}", f"{bucket}.s3.dualstack.{region}.{suffix}"}
    if host not in allowed:
        return (f"ResponseURL's host is not CloudFormation's response bucket of {region} "
                f"({bucket} on S3)")
    return None


def _shard_proxy_endpoint(name: str) -> str | None:
    """The endpoint RDS reports for the proxy named ``name`` (None: no such proxy)."""
    import boto3  # type: ignore[import-untyped]  # (Lambda ships it; shards need it)

    client = boto3.client("rds")
    try:
        proxies = client.describe_db_proxies(DBProxyName=name)["DBProxies"]
    except client.exceptions.DBProxyNotFoundFault:
        return None
    return str(proxies[0]["Endpoint"]) if proxies else None


def check_request(event: Mapping[str, Any], settings: Settings | None = None,
                  proxy_endpoint: Callable[[str], str | None] = _shard_proxy_endpoint) -> None:
    """Refuse (``Refused``) a request whose resource properties name a host, shard or
    database that is not this stack's (see the module's documentation)."""
    props = event.get("ResourceProperties") or {}
    if not props.get("OwnerSecretArn"):
        return  # every shard, at the hosts of the function's own environment
    settings = settings or get_settings()
    shard = str(props.get("Shard") or "")
    names = parse_shard_names(settings.shard_names) if settings.shard_names else []
    if shard not in names[1:]:
        raise Refused(f"Shard {shard!r} is not a further shard of this stack "
                      f"(TIERQ_SHARD_NAMES)")
    database = str(props.get("DbName") or settings.db_name)
    if database != settings.db_name:
        raise Refused(f"DbName {database!r} is not this stack's database")
    prefix = settings.shard_proxy_prefix
    if not prefix:
        raise Refused("TIERQ_SHARD_PROXY_PREFIX is not set: no shard's host can be checked")
    host = str(props.get("Host") or "")
    expected = proxy_endpoint(prefix + shard)
    if expected is None or not re.fullmatch(r"[A-Za-z0-9.-]+", expected) \
            or host.lower() != expected.lower():
        raise Refused(f"Host is not the endpoint of shard {shard!r}'s proxy "
                      f"({prefix}{shard})")


def _put(request: urllib.request.Request, timeout: float) -> int:
    """One PUT (its own function: the tests send it to a local server)."""
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return int(response.status)


def send(url: str, body: Mapping[str, Any], *, attempts: int = SEND_ATTEMPTS,
         sleep: Callable[[float], None] = time.sleep) -> int:
    """PUT the answer to the pre-signed URL (retrying briefly); returns the HTTP status."""
    data = orjson.dumps(body)
    last: Exception | None = None
    for attempt in range(attempts):
        put = urllib.request.Request(url, data=data, method="PUT",
                                     headers={"Content-Type": "", "Content-Length": str(len(data))})
        try:
            return _put(put, 10)
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


@dataclass(frozen=True)
class Migrated:
    applied: list[str]  # the versions applied now (on any shard)
    shards: list[str]  # the shards migrated, the default first


def apply_migrations(properties: Mapping[str, Any] | None = None) -> list[str]:
    """The versions :func:`migrate_shards` applied."""
    return migrate_shards(properties).applied


def migrate_shards(properties: Mapping[str, Any] | None = None) -> Migrated:
    """As the owner, apply the migrations and make the application's login a member of the
    application group, on:

    - the one shard the resource's properties name (``Shard``, ``Host``, ``DbName``,
      ``OwnerSecretArn``, ``AppSecretArn``: the stack of a further shard, before its secrets
      rotate for the first time);
    - or else every shard of the deployment (``TIERQ_SHARD_NAMES``: the default one as
      ``DB_SECRET_ARN`` and ``DB_APP_SECRET_ARN`` say, the others from their Parameter Store
      entries), then put them in service together (the pairs' homes copied on each: see
      ``ShardedTierq.migrate``). A shard that fails is named; the others are migrated.
    """
    settings = get_settings()
    props = properties or {}
    if props.get("OwnerSecretArn"):
        shard = str(props.get("Shard") or "")
        check_names([shard])
        one = settings.replace(
            db_host=str(props["Host"]), db_name=str(props.get("DbName") or settings.db_name),
            db_secret_arn=str(props["OwnerSecretArn"]),
            db_app_secret_arn=str(props.get("AppSecretArn") or "") or None)
        return Migrated(_migrate_database(one, connect.database_url(one)), [shard])
    specs = shards_from_settings(settings, login="owner")
    names = [spec.name for spec in specs]
    if len(specs) == 1:
        return Migrated(_migrate_database(settings, specs[0].url), names)
    entries = directory_entries(names[1:], settings.shard_directory)
    logins = {names[0]: settings,
              **{name: entry.settings(settings, "owner") for name, entry in entries.items()}}
    from tierq.sharded import ShardedTierq  # (only a sharded deployment's step needs it)

    sharded = ShardedTierq(specs, settings=settings)
    try:
        applied = sharded.migrate()  # every shard, then the homes copied on each
    finally:
        sharded.close()
    for spec in specs:
        _app_login(logins[spec.name], spec.url)
    logger.info("shards migrated", extra={"applied": applied})
    return Migrated(sorted({v for versions in applied.values() for v in versions}), names)


def _migrate_database(settings: Settings, url: str) -> list[str]:
    applied = migrate(url, lock_timeout_ms=settings.migrate_lock_timeout_ms,
                      lock_attempts=settings.migrate_lock_attempts,
                      runner_wait_seconds=settings.migrate_runner_wait_seconds)
    _app_login(settings, url)
    return applied


def _app_login(settings: Settings, url: str) -> None:
    """Make the login of ``DB_APP_SECRET_ARN`` a member of the application group (created
    the first time, its password set again later)."""
    if settings.db_app_secret_arn:
        login = connect.fetch_secret(settings.db_app_secret_arn)
        group = ensure_app_login(url, str(login["username"]), str(login["password"]))
        logger.info("application login ready", extra={"login": login["username"],
                                                      "group": group})


def handle(event: Mapping[str, Any], context: InvocationContext,
           work: Callable[[Mapping[str, Any]], Migrated] = migrate_shards) -> dict[str, Any]:
    """Do what the request asks and answer CloudFormation; returns the answer sent (or, for
    a refused ResponseURL, the FAILED answer that could not be sent)."""
    request_type = event.get("RequestType")
    problem = response_url_problem(str(event.get("ResponseURL") or ""),
                                   get_settings().aws_region)
    if problem is not None:
        # no answer can go anywhere safe: nothing is done, and a stack (if one waits) fails
        # at the resource's ServiceTimeout
        logger.error("custom resource request refused: not answered",
                     extra={"reason": problem, "request_type": request_type,
                            "stack": str(event.get("StackId") or "")[:300]})
        return answer(_keys_of(event), "FAILED", reason=problem)
    try:
        if request_type != "Delete":  # (a Delete does nothing; see the module's table)
            check_request(event)
    except Refused as exc:
        logger.error("custom resource request refused", extra={"reason": str(exc)})
        body = answer(event, "FAILED", reason=f"refused: {exc}")
        status = send(event["ResponseURL"], body)
        logger.info("answered CloudFormation", extra={"status": "FAILED", "http": status})
        return body
    try:
        if request_type == "Delete":
            body = answer(event, "SUCCESS", data={"Applied": "", "AppliedCount": 0})
        elif request_type in ("Create", "Update"):
            seconds = context.get_remaining_time_in_millis() / 1000.0 - ANSWER_MARGIN_SECONDS
            properties = event.get("ResourceProperties") or {}
            done: Migrated = _run_with_deadline(lambda: work(properties), seconds)
            logger.info("migrations applied", extra={"applied": done.applied,
                                                     "shards": done.shards})
            # Shards: the functions' TIERQ_SHARD_NAMES (!GetAtt DbMigrations.Shards), so
            # they learn of a shard only once it is migrated and in service
            body = answer(event, "SUCCESS",
                          data={"Applied": ",".join(done.applied),
                                "AppliedCount": len(done.applied),
                                "Shards": ",".join(done.shards)})
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


def _keys_of(event: Mapping[str, Any]) -> dict[str, Any]:
    """The fields an answer copies, from an event that may lack them."""
    return {**event, **{key: str(event.get(key) or "") for key in
                        ("StackId", "RequestId", "LogicalResourceId")}}
