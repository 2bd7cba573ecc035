"""Pages of list responses that fit a Lambda response, and the cursors between them.

A list route fills its page item by item until the next item would overrun
:data:`tierq.core.sizing.RESPONSE_BODY_BUDGET` (each item counted as
:func:`tierq.core.sizing.body_cost` of its orjson bytes, exactly as the body is written) or
its ``limit`` is reached, and answers ``next``: an opaque cursor to pass back as ``?after=``,
or null on the last page. Items are read from the stores lazily, in small chunks, so a page
of large items never reads far past what it returns.

A cursor is the position of a page's last item, its parts joined by ``~`` (which no name,
number or id holds), e.g. ``jobs~acme`` after the pair (jobs, acme): :class:`CursorForm`
gives each list's parts, and the API document gives ``?after=`` exactly that form as its
pattern, so any text of that form is a valid starting point (an empty one is the first
page) and anything else is 422 naming ``after``. Cursors carry no tenant: what a caller
may see is decided by the request, never by the cursor, so a forged cursor only moves the
starting point.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel

from tierq.core import sizing
from tierq.errors import InvalidInput, TierqError
from tierq.models.names import NAME_PATTERN

CURSOR_FIELD = "after"
SEPARATOR = "~"  # no regular-expression meaning either
# The parts a cursor may hold (none can hold the separator).
NAME_PART = NAME_PATTERN.removeprefix("^").removesuffix("$")
SCHEDULE_NAME_PART = r"[A-Za-z0-9_.-]{1,64}"
# non-negative integers (milliseconds or microseconds since the epoch: to the year 2286 and
# beyond), small enough for any datetime and any 64-bit column
COUNT_PART = r"[0-9]{1,16}"
UUID_PART = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# A comma between two items of a JSON list.
_SEPARATOR_COST = 1

Item = TypeVar("Item", bound=BaseModel)
Position = TypeVar("Position")
Position_co = TypeVar("Position_co", covariant=True)  # a Resume is read-only


class ResponseTooLarge(TierqError):
    """One item alone is larger than a Lambda response can carry."""

    status = 500
    code = "response_too_large"


@dataclass(frozen=True)
class Resume(Generic[Position_co]):
    """Yielded by a source between items when it has scanned enough for one request: the
    page ends there, with ``next`` pointing at ``position``."""

    position: Position_co


def item_json(item: BaseModel) -> bytes:
    """An item's bytes in the response body: what the resolver's orjson serializer writes
    for it (Powertools dumps the returned model in JSON mode, by alias)."""
    return orjson.dumps(item.model_dump(mode="json", by_alias=True))


def fill(source: Iterable[Item | Resume[Position]], position: Callable[[Item], Position], *,
         limit: int, budget: int | None = None) -> tuple[list[Item], Position | None]:
    """Take items from ``source`` while they fit: at most ``limit``, their body cost at most
    ``budget`` (default: the whole response body budget). Returns the page and the position
    the next page starts after, or None when the source ran out."""
    room = sizing.RESPONSE_BODY_BUDGET if budget is None else budget
    items: list[Item] = []
    used = 0
    for entry in source:
        if isinstance(entry, Resume):
            return items, entry.position
        if len(items) >= limit:
            return items, position(items[-1])
        cost = sizing.body_cost(item_json(entry)) + (_SEPARATOR_COST if items else 0)
        if used + cost > room:
            if not items:
                raise ResponseTooLarge(
                    f"one item of this list is {cost:,} bytes as a Lambda response, more than "
                    f"the {room:,} a response body may take")
            return items, position(items[-1])
        items.append(entry)
        used += cost
    return items, None


# --------------------------------------------------------------------------- cursors


@dataclass(frozen=True)
class CursorPart:
    """One part of a cursor: the text it may be (a regular expression) and what it reads as."""

    name: str
    pattern: str
    read: Callable[[str], Any] = str


@dataclass(frozen=True)
class CursorForm:
    """The cursors of one list: the parts of its position, in order."""

    kind: str
    parts: tuple[CursorPart, ...]

    @property
    def pattern(self) -> str:
        """What ``?after=`` takes: this form, or nothing (the first page)."""
        return "^(" + SEPARATOR.join(f"({part.pattern})" for part in self.parts) + ")?$"

    @property
    def shown(self) -> str:
        return SEPARATOR.join(f"<{part.name}>" for part in self.parts)

    def query(self) -> Any:
        """The ``after`` query parameter of this list (Powertools validates the pattern)."""
        return Query(pattern=self.pattern, description=(
            f"`next` of the previous page: the position of its last item, `{self.shown}`. "
            "Any text of that form is a valid starting point; left out or empty, the first "
            "page."))

    def encode(self, *position: str | int) -> str:
        return SEPARATOR.join(str(part) for part in position)

    def decode(self, cursor: str | None) -> list[Any] | None:
        """The position a cursor holds, each part as its :class:`CursorPart` reads it; None
        for no cursor; 422 naming ``after`` for text not of this form."""
        if not cursor:
            return None
        if re.fullmatch(self.pattern, cursor) is None:
            raise InvalidInput.field(CURSOR_FIELD,
                                     f"not a cursor of this list ({self.kind}): give "
                                     f"{self.shown}, the `next` of the previous page")
        texts = cursor.split(SEPARATOR)
        return [part.read(text) for part, text in zip(self.parts, texts, strict=True)]
