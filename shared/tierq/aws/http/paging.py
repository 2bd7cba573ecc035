"""Pages of list responses that fit a Lambda response, and the cursors between them.

A list route fills its page item by item until the next item would overrun
:data:`tierq.core.sizing.RESPONSE_BODY_BUDGET` (each item counted as
:func:`tierq.core.sizing.body_cost` of its orjson bytes, exactly as the body is written) or
its ``limit`` is reached, and answers ``next``: an opaque cursor to pass back as ``?after=``,
or null on the last page. Items are read from the stores lazily, in small chunks, so a page
of large items never reads far past what it returns.

Cursors are URL-safe base64 (no padding) of a JSON array ``[kind, position…]``: the kind
names the list it came from, the position is the last item returned (sort key and id). A
cursor that does not decode, names another list or holds a malformed position is 422 naming
``after``. Cursors carry no tenant: what a caller may see is decided by the request, never by
the cursor, so a forged cursor only moves the starting point.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel

from tierq.core import sizing
from tierq.errors import InvalidInput, TierqError

CURSOR_FIELD = "after"
CURSOR_MAX_LENGTH = 512
# A comma between two items of a JSON list.
_SEPARATOR_COST = 1

Item = TypeVar("Item", bound=BaseModel)
Position = TypeVar("Position")


class ResponseTooLarge(TierqError):
    """One item alone is larger than a Lambda response can carry."""

    status = 500
    code = "response_too_large"


@dataclass(frozen=True)
class Resume(Generic[Position]):
    """Yielded by a source between items when it has scanned enough for one request: the
    page ends there, with ``next`` pointing at ``position``."""

    position: Position


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


def encode_cursor(kind: str, *position: str | int) -> str:
    raw = orjson.dumps([kind, *position])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _bad_cursor(kind: str) -> InvalidInput:
    return InvalidInput.field(CURSOR_FIELD,
                              f"not a cursor returned by a previous page of this list ({kind})")


def decode_cursor(cursor: str, kind: str, shape: tuple[type, ...]) -> list[Any]:
    """The position a cursor of list ``kind`` holds, each part of the type ``shape`` gives;
    anything else is 422 naming ``after``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = orjson.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise _bad_cursor(kind) from exc
    if (not isinstance(value, list) or len(value) != len(shape) + 1 or value[0] != kind
            or encode_cursor(*value) != cursor.rstrip("=")):
        raise _bad_cursor(kind)
    parts = value[1:]
    for part, wanted in zip(parts, shape, strict=True):
        # bool is an int to Python; no cursor holds one
        if not isinstance(part, wanted) or isinstance(part, bool):
            raise _bad_cursor(kind)
    return parts


def decoded_or_none(cursor: str | None, kind: str, shape: tuple[type, ...]) -> list[Any] | None:
    return None if cursor is None or cursor == "" else decode_cursor(cursor, kind, shape)
