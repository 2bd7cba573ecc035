"""Cron schedules: ``PUT /v1/schedules/{name}`` (create or replace, and install the next
occurrences at once), ``GET /v1/schedules/{name}``, ``DELETE /v1/schedules/{name}`` (withdraw
the pending occurrences; a claimed one finishes) and ``GET /v1/schedules`` (each with its
next occurrences). Occurrences are keyed delayed tasks ``name/config_hash/epoch_ms``; the
rules, daylight saving included, are in :mod:`tierq.logic.schedules`.

Names are scoped per tenant: a schedule is (tenant, name). The tenant is the caller's own
for a caller pinned to a tenant (naming another is 403); an admin names it (``tenant`` in
the body of a PUT, ``?tenant=`` on the other routes; default ``_``). A PUT writes only the
row of that tenant, in the statement that writes it, so no caller can take another
tenant's schedule over, not even by racing it.

``GET /v1/schedules`` pages: in (tenant, name) order, at most ``limit`` per page and never
more than fits a Lambda response; ``next`` is the cursor of the next page.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from tierq.aws.http import paging, request
from tierq.aws.http.errors import responses
from tierq.aws.http.params import TenantQuery
from tierq.aws.runtime import engine
from tierq.models.names import DEFAULT_TENANT
from tierq.models.schedules import (
    SCHEDULE_NAME_PATTERN,
    ScheduleIn,
    ScheduleList,
    ScheduleRemoved,
    ScheduleView,
)

router = Router()

SchedulePath = Annotated[str, Path(
    pattern=SCHEDULE_NAME_PATTERN,
    description="Schedule name: letters, digits, _ . - (at most 64), unique per tenant.",
)]
MAX_PAGE = 1000
DEFAULT_PAGE = 100
CURSOR = paging.CursorForm("schedules", (paging.CursorPart("tenant", paging.NAME_PART),
                                         paging.CursorPart("name", paging.SCHEDULE_NAME_PART)))


def schedule_tenant(named: str | None) -> str:
    """The tenant whose schedule a request means: the caller's own when pinned (naming
    another is 403), else the one named, else '_'."""
    return request.check_tenant(named) or DEFAULT_TENANT


@router.get(
    "/v1/schedules",
    summary="List cron schedules",
    description="In (tenant, name) order, at most `limit` per page and never more than fits "
                "a Lambda response (6 MB as the runtime writes it): a page may hold fewer. "
                "`next` is the cursor of the next page, null on the last. A caller pinned to "
                "a tenant gets only its tenant's schedules; an admin gets every tenant's, or "
                "one tenant's with `tenant`.",
    operation_id="listSchedules",
    tags=["schedules"],
    responses=responses("Schedules, each with its next occurrences and the occurrences "
                        "installed as tasks.", 403),
)
def list_schedules(
    tenant: TenantQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = DEFAULT_PAGE,
    after: Annotated[str | None, CURSOR.query()] = None,
) -> ScheduleList:
    only = request.check_tenant(tenant)
    start = CURSOR.decode(after)
    source = engine().schedules_after((start[0], start[1]) if start else None, tenant=only,
                                      limit=limit + 1)
    views, last = paging.fill(iter(source), lambda view: (view.tenant, view.name), limit=limit)
    return ScheduleList(
        schedules=views,
        next=None if last is None else CURSOR.encode(*last))


@router.put(
    "/v1/schedules/<name>",
    summary="Create or replace a cron schedule",
    description="Body: queue, payload, optional tenant (whose schedule it is; names are "
                "scoped per tenant), priority (0-9), horizon (future "
                "occurrences kept installed, default 4), enabled, and exactly one of cron "
                "(5 fields, or 6 with seconds first, e.g. '30 2 * * *'), every_seconds "
                "(at least 1, e.g. 60) or daily (e.g. ['02:30', '14:00']); timezone (IANA, "
                "default UTC) applies to cron and daily. Occurrences are keyed delayed tasks "
                "'name/config_hash/epoch_ms'; a change of anything that decides them "
                "replaces the pending ones (a claimed one finishes). A nonexistent local "
                "time (spring forward) fires once when the clocks jump; a repeated one "
                "(fall back) fires once, at its first occurrence. Occurrences are installed "
                "at most 366 days ahead, and at most TIERQ_SCHEDULE_MAX_INSTALLED_BYTES of "
                "payload per schedule (422 when the horizon, or the occurrences within the "
                "next ticks, would hold more); a new schedule beyond the tenant's "
                "TIERQ_MAX_SCHEDULES_PER_TENANT is 409 quota_exceeded.",
    operation_id="putSchedule",
    tags=["schedules"],
    responses=responses("The schedule as stored, with its next occurrences.", 403, 409, 413),
)
def put_schedule(name: SchedulePath, body: Annotated[ScheduleIn, Body()]) -> ScheduleView:
    tenant = schedule_tenant(body.tenant)
    if tenant != body.tenant:
        body = body.model_copy(update={"tenant": tenant})
    return engine().put_schedule(name, body)


@router.get(
    "/v1/schedules/<name>",
    summary="A cron schedule and its next occurrences",
    operation_id="getSchedule",
    tags=["schedules"],
    responses=responses("The schedule as stored, with its next occurrences.", 403, 404),
)
def get_schedule(name: SchedulePath, tenant: TenantQuery = None) -> ScheduleView:
    return engine().get_schedule(name, schedule_tenant(tenant))


@router.delete(
    "/v1/schedules/<name>",
    summary="Remove a cron schedule",
    description="Withdraws its pending occurrences; an occurrence a worker has claimed "
                "runs to its end.",
    operation_id="deleteSchedule",
    tags=["schedules"],
    responses=responses("How many pending occurrences were withdrawn.", 403, 404),
)
def delete_schedule(name: SchedulePath, tenant: TenantQuery = None) -> ScheduleRemoved:
    return engine().delete_schedule(name, schedule_tenant(tenant))
