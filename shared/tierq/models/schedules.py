"""Cron schedules: the body of ``PUT /v1/schedules/{name}`` and how a schedule is shown.
A schedule is (tenant, name): names are scoped per tenant.

A schedule says *when* in exactly one of three ways:

- ``cron``: a cron expression of 5 fields (minute hour day-of-month month day-of-week), or 6
  with seconds first (second minute hour day-of-month month day-of-week, as Quartz, Spring and
  BullMQ write them), or one of ``@yearly @annually @monthly @weekly @daily @midnight
  @hourly``. Evaluated on the wall clock of ``timezone`` (default UTC). Parsed by croniter.
- ``every_seconds``: a fixed period of at least 1 second, on a grid anchored at the Unix
  epoch (``every_seconds: 3600`` fires on the hour, UTC), so every tick computes the same
  instants.
- ``daily``: times of day (``"HH:MM"`` or ``"HH:MM:SS"``) on the wall clock of ``timezone``.

How daylight-saving changes are handled is described in :mod:`tierq.logic.schedules`.
"""

from __future__ import annotations

import re
from datetime import datetime, time
from functools import cache
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID
from zoneinfo import ZoneInfo, available_timezones

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict, JsonValue

from tierq.models.base import Model
from tierq.models.names import QueueName, TenantName
from tierq.models.strict import RequestModel

if TYPE_CHECKING:
    from croniter import croniter

SCHEDULE_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
MAX_HORIZON = 1000
# A view lists at most max(horizon, this) installed occurrences, soonest first.
MIN_INSTALLED_SHOWN = 20
MAX_DAILY_TIMES = 288
MIN_EVERY_SECONDS = 1.0
MAX_EVERY_SECONDS = 366 * 86_400.0
DEFAULT_TIMEZONE = "UTC"
CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight",
                "@hourly")
_DAILY_TIME = re.compile(r"([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?")  # whole string, ASCII
# what the API document says of a time of day: exactly the strings parse_daily_time takes
DAILY_TIME_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$"
# what the API document says of a cron expression's form: one of the aliases (any case), or
# 5 or 6 fields between white space (whether croniter reads the fields and the calendar has
# a date they match is for normalize_cron to say)
CRON_PATTERN = ("^\\s*(" + "|".join(
    "@" + "".join(f"[{c.upper()}{c}]" for c in alias[1:]) for alias in CRON_ALIASES)
    + "|\\S+(\\s+\\S+){4,5})\\s*$")
# names zoneinfo can load that are not zones: the host's own setting and a tzdata alias
_NOT_ZONES = frozenset({"localtime", "posixrules"})


@cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones()) - _NOT_ZONES


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError when there is no such zone."""
    if name not in _zone_names():
        raise ValueError(f"{name!r} is not an IANA time zone name (e.g. 'Europe/Berlin', 'UTC')")
    return ZoneInfo(name)


def cron_iterator(expression: str, start: datetime) -> croniter[datetime]:
    """A croniter over naive wall-clock datetimes from ``start`` (exclusive). Six fields
    put the seconds first."""
    # croniter is imported where a schedule is parsed or fired: most functions never do,
    # and it costs ~20 ms of every cold start otherwise
    from croniter import croniter

    seconds_first = len(expression.split()) == 6
    return croniter(expression, start, ret_type=datetime, second_at_beginning=seconds_first)


def normalize_cron(expression: str) -> str:
    """The expression with single spaces; ValueError (naming it) when it is not valid or
    never matches."""
    text = " ".join(expression.split())
    fields = text.split()
    if not text:
        raise ValueError("is empty; give 5 fields (minute hour day month weekday) or 6 "
                         "(second first)")
    if text.startswith("@"):
        if text.lower() not in CRON_ALIASES:
            raise ValueError(f"{expression!r} is not a valid cron expression: unknown alias "
                             f"(use one of {', '.join(CRON_ALIASES)})")
        return text.lower()
    if len(fields) not in (5, 6):
        raise ValueError(f"{expression!r} is not a valid cron expression: it has "
                         f"{len(fields)} fields; give 5 (minute hour day month weekday) or 6 "
                         "(second minute hour day month weekday)")
    from croniter import CroniterError

    try:
        cron_iterator(text, datetime(2000, 1, 1)).get_next()
    except (CroniterError, ValueError, OverflowError) as exc:
        reason = re.sub(r"^\[.*?\]\s*", "", str(exc)).removeprefix("is not acceptable").strip(" ,")
        if "failed to find" in reason:
            reason = "it never matches a date"
        detail = f" ({reason})" if reason else ""
        raise ValueError(f"{expression!r} is not a valid cron expression{detail}") from None
    return text


def parse_daily_time(text: str) -> time:
    """``HH:MM`` or ``HH:MM:SS`` (24-hour clock); ValueError otherwise."""
    match = _DAILY_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a time of day; use 'HH:MM' or 'HH:MM:SS' "
                         "(24-hour clock, e.g. '02:30')")
    hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{text!r} is not a time of day (hours 00-23, minutes and seconds "
                         "00-59)")
    return time(hour, minute, second)


def format_daily_time(value: time) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


def zone_pattern() -> str:
    """The time zone names :func:`zone` takes, as one pattern: exactly those names (``+`` is
    the only character in them with a meaning in a regular expression)."""
    return "^(" + "|".join(name.replace("+", "\\+") for name in sorted(_zone_names())) + ")$"


def _zone_names_pattern(schema: dict[str, Any]) -> None:
    """The string branch takes exactly the names :func:`zone` takes. A pattern, not an enum:
    tools that try every value of an enum (schemathesis' coverage phase) would send each of
    the ~600 names."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch.pop("maxLength", None)
            branch["pattern"] = zone_pattern()


# Exactly one way of saying when (the validator _one_timing), and a timezone only with cron
# or daily (_timezone), in the API document's words.
_NULL: JsonDict = {"type": "null"}
_ONE_TIMING: list[JsonValue] = [
    {"required": ["cron"], "properties": {"cron": {"type": "string"},
                                          "every_seconds": _NULL, "daily": _NULL}},
    {"required": ["every_seconds"], "properties": {"every_seconds": {"type": "number"},
                                                    "cron": _NULL, "daily": _NULL,
                                                    "timezone": _NULL}},
    {"required": ["daily"], "properties": {"daily": {"type": "array"},
                                           "cron": _NULL, "every_seconds": _NULL}},
]


class ScheduleIn(RequestModel):
    """``PUT /v1/schedules/{name}``: the whole schedule (a PUT replaces it)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": _ONE_TIMING})

    queue: QueueName = Field(description="The queue its occurrences are enqueued to.")
    payload: Any = Field(description="The payload of every occurrence (any JSON value).")
    tenant: TenantName | None = Field(
        default=None, description="The tenant the schedule belongs to and its occurrences "
                                  "run for (default '_'). Names are scoped per tenant: "
                                  "(tenant, name) is the schedule.")
    priority: int = Field(default=0, ge=0, le=9, description="0..9; 9 is claimed first.")
    horizon: int = Field(
        default=4, ge=1, le=MAX_HORIZON,
        description="How many future occurrences to keep installed (at least; occurrences "
                    "due before the next few ticks are always installed), none more than "
                    "366 days ahead; horizon x payload bytes may not exceed "
                    "TIERQ_SCHEDULE_MAX_INSTALLED_BYTES (default 1 MiB), else 422.",
    )
    enabled: bool = Field(default=True, strict=True,
                          description="A disabled schedule installs nothing.")
    cron: str | None = Field(
        default=None, max_length=200,
        description="Cron expression: 5 fields, or 6 with seconds first, e.g. '30 2 * * *', "
                    "or an alias (@hourly, @daily, …), as croniter reads it; one that never "
                    "matches a date (e.g. '0 0 30 2 *') is refused.",
        json_schema_extra={"pattern": CRON_PATTERN},
    )
    every_seconds: float | None = Field(
        default=None, description="A fixed period, at least 1 second, e.g. 60.",
        json_schema_extra={"minimum": MIN_EVERY_SECONDS, "maximum": MAX_EVERY_SECONDS},
    )
    daily: list[str] | None = Field(
        default=None, description="Times of day on the wall clock of timezone, e.g. "
                                  "['02:30', '14:00'].",
        json_schema_extra={"minItems": 1, "maxItems": MAX_DAILY_TIMES,
                           "items": {"type": "string", "pattern": DAILY_TIME_PATTERN}},
    )
    timezone: str | None = Field(
        default=None, max_length=64,
        description="IANA time zone of cron and daily (default UTC), e.g. 'Europe/Berlin': "
                    "one of the names the pattern lists.",
        json_schema_extra=lambda schema: _zone_names_pattern(schema),
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return None if value is None else normalize_cron(value)

    @field_validator("every_seconds")
    @classmethod
    def _every(cls, value: float | None) -> float | None:
        if value is None:
            return None
        if not value >= MIN_EVERY_SECONDS:  # also catches NaN
            raise ValueError(f"must be at least {MIN_EVERY_SECONDS:g} second, got {value:g}")
        if value > MAX_EVERY_SECONDS:
            raise ValueError(f"must be at most {MAX_EVERY_SECONDS:g} seconds (a year)")
        return round(value, 3)

    @field_validator("daily")
    @classmethod
    def _daily(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one time of day, e.g. ['02:30']")
        if len(value) > MAX_DAILY_TIMES:
            raise ValueError(f"at most {MAX_DAILY_TIMES} times of day")
        times = sorted({parse_daily_time(v) for v in value})
        return [format_daily_time(t) for t in times]

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if info.data.get("every_seconds") is not None:
            raise ValueError("applies to cron and daily schedules only, not to every_seconds")
        zone(value)
        return value

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleIn:
        given = [f for f in ("cron", "every_seconds", "daily") if getattr(self, f) is not None]
        if len(given) != 1:
            got = f"got {', '.join(given)}" if given else "got none"
            raise ValueError(f"give exactly one of cron, every_seconds or daily ({got})")
        return self

    @property
    def kind(self) -> Literal["cron", "every", "daily"]:
        if self.cron is not None:
            return "cron"
        return "every" if self.every_seconds is not None else "daily"


class InstalledOccurrence(Model):
    """An occurrence installed as a task that is still live."""

    at: datetime
    key: str
    task_id: UUID
    queue: str
    tenant: str
    state: Literal["delayed", "cold", "warm"]
    current: bool = Field(description="Of the schedule's current configuration (a claimed "
                                      "occurrence of an older one keeps running).")


class ScheduleView(Model):
    """A schedule as stored, with its next occurrences."""

    name: str
    queue: str
    tenant: str
    payload: Any
    priority: int
    cron: str | None = None
    every_seconds: float | None = None
    daily: list[str] | None = None
    timezone: str | None = None
    horizon: int
    enabled: bool
    config_hash: str
    created_at: datetime
    updated_at: datetime
    last_tick_at: datetime | None = None
    next_occurrences: list[datetime] = Field(
        default_factory=list,
        description="The next `horizon` instants it fires at (UTC); empty when disabled.",
    )
    installed: list[InstalledOccurrence] = Field(
        default_factory=list,
        description="Occurrences installed as tasks and still live, soonest first: at most "
                    "the soonest max(horizon, 20) (a schedule nobody claims from gains more "
                    "every tick); `installed_count` counts them all.",
    )
    installed_count: int = Field(
        default=0, description="How many occurrences are installed as tasks and still live "
                               "(`installed` shows the soonest of them).")


class ScheduleRemoved(Model):
    """``DELETE /v1/schedules/{name}``."""

    name: str
    tenant: str = Field(default="_", description="The tenant whose schedule it was.")
    removed_occurrences: int = Field(description="Pending occurrences withdrawn; a claimed "
                                                 "one is left to finish.")


class ScheduleList(Model):
    """``GET /v1/schedules``: one page, in (tenant, name) order."""

    schedules: list[ScheduleView]
    next: str | None = Field(
        default=None, description="Cursor of the next page (pass it as `after`); null on the "
                                  "last page.")
