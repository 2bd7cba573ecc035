"""Cron schedules: ``PUT /v1/schedules/{name}`` (create or replace, and install the next
occurrences at once), ``GET /v1/schedules/{name}``, ``DELETE /v1/schedules/{name}`` (withdraw
the pending occurrences; a claimed one finishes) and ``GET /v1/schedules`` (each with its
next occurrences). Occurrences are keyed delayed tasks ``name/config_hash/epoch_ms``; the
rules, daylight saving included, are in :mod:`tierq.logic.schedules`.

A caller pinned to a tenant sees and touches only the schedules of its tenant; a schedule it
puts without a tenant gets the pinned one, and naming another is 403.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from tierq.api import request
from tierq.api.errors import responses
from tierq.api.runtime import engine
from tierq.errors import Forbidden, NotFound
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
    description="Schedule name: letters, digits, _ . - (at most 64).",
)]


def visible_schedule(name: str) -> ScheduleView:
    """The schedule, or NotFound when there is none or it belongs to another tenant."""
    view = engine().get_schedule(name)
    if not request.visible(view.tenant):
        raise NotFound(f"no schedule named {name!r}")
    return view


@router.get(
    "/v1/schedules",
    summary="List cron schedules",
    operation_id="listSchedules",
    tags=["schedules"],
    responses=responses("Every schedule, each with its next occurrences and the occurrences "
                        "installed as tasks."),
)
def list_schedules() -> ScheduleList:
    return ScheduleList(schedules=[s for s in engine().list_schedules()
                                   if request.visible(s.tenant)])


@router.put(
    "/v1/schedules/<name>",
    summary="Create or replace a cron schedule",
    description="Body: queue, payload, optional tenant, priority (0-9), horizon (future "
                "occurrences kept installed, default 4), enabled, and exactly one of cron "
                "(5 fields, or 6 with seconds first, e.g. '30 2 * * *'), every_seconds "
                "(at least 1, e.g. 60) or daily (e.g. ['02:30', '14:00']); timezone (IANA, "
                "default UTC) applies to cron and daily. Occurrences are keyed delayed tasks "
                "'name/config_hash/epoch_ms'; a change of anything that decides them "
                "replaces the pending ones (a claimed one finishes). A nonexistent local "
                "time (spring forward) fires once when the clocks jump; a repeated one "
                "(fall back) fires once, at its first occurrence.",
    operation_id="putSchedule",
    tags=["schedules"],
    responses=responses("The schedule as stored, with its next occurrences.", 403, 413),
)
def put_schedule(name: SchedulePath, body: Annotated[ScheduleIn, Body()]) -> ScheduleView:
    tenant = request.check_tenant(body.tenant)
    if tenant != body.tenant:
        body = body.model_copy(update={"tenant": tenant})
    if request.pinned_tenant() is not None:
        try:
            existing: ScheduleView | None = engine().get_schedule(name)
        except NotFound:
            existing = None
        if existing is not None and not request.visible(existing.tenant):
            raise Forbidden(
                f"schedule {name!r} belongs to another tenant",
                details=[{"field": "name", "message": "taken by another tenant's schedule"}],
            )
    return engine().put_schedule(name, body)


@router.get(
    "/v1/schedules/<name>",
    summary="A cron schedule and its next occurrences",
    operation_id="getSchedule",
    tags=["schedules"],
    responses=responses("The schedule as stored, with its next occurrences.", 404),
)
def get_schedule(name: SchedulePath) -> ScheduleView:
    return visible_schedule(name)


@router.delete(
    "/v1/schedules/<name>",
    summary="Remove a cron schedule",
    description="Withdraws its pending occurrences; an occurrence a worker has claimed "
                "runs to its end.",
    operation_id="deleteSchedule",
    tags=["schedules"],
    responses=responses("How many pending occurrences were withdrawn.", 404),
)
def delete_schedule(name: SchedulePath) -> ScheduleRemoved:
    visible_schedule(name)
    return engine().delete_schedule(name)
