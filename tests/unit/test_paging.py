"""tierq.aws.http.paging: pages filled to the byte budget as the runtime counts the body, and
cursors that only decode for the list that made them."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from tierq.aws.http import paging
from tierq.core import sizing
from tierq.errors import InvalidInput


class Item(BaseModel):
    n: int
    text: str


def body_of(items: list[Item]) -> str:
    """What the resolver writes for a list of items."""
    return json.dumps([i.model_dump(mode="json") for i in items], ensure_ascii=False,
                      separators=(",", ":"))


def test_fill_stops_before_the_item_that_would_overrun_the_budget() -> None:
    items = [Item(n=i, text='"\\\x01\U0001F600' * (i + 1)) for i in range(20)]
    budget = 700
    page, last = paging.fill(iter(items), lambda i: i.n, limit=100, budget=budget)
    # the page's cost on the wire: its body text inside the runtime's JSON string, minus
    # the list's brackets, which the envelope reserve covers
    cost = len(json.dumps(body_of(page), ensure_ascii=False).encode()) - 2 - 2
    assert cost <= budget
    assert cost + sizing.body_cost(paging.item_json(items[len(page)])) + 1 > budget
    assert last == page[-1].n and 0 < len(page) < 20


def test_fill_ends_at_the_limit_and_knows_when_nothing_follows() -> None:
    items = [Item(n=i, text="x") for i in range(5)]
    assert paging.fill(iter(items), lambda i: i.n, limit=3) == (items[:3], 2)
    assert paging.fill(iter(items), lambda i: i.n, limit=5) == (items, None)
    assert paging.fill(iter([]), lambda i: i.n, limit=5) == ([], None)


def test_a_source_may_end_a_page_at_a_resting_point() -> None:
    first = Item(n=1, text="x")
    source = iter([first, paging.Resume(("q", "t")), Item(n=2, text="y")])
    assert paging.fill(source, lambda i: i.n, limit=10) == ([first], ("q", "t"))
    assert paging.fill(iter([paging.Resume(7)]), lambda i: i.n, limit=10) == ([], 7)


def test_an_item_alone_over_the_budget_is_an_error() -> None:
    with pytest.raises(paging.ResponseTooLarge):
        paging.fill(iter([Item(n=1, text="x" * 100)]), lambda i: i.n, limit=10, budget=50)


def test_cursors_round_trip_and_refuse_anything_else() -> None:
    cursor = paging.encode_cursor("pairs", "q", "t\u00e9")
    assert paging.decode_cursor(cursor, "pairs", (str, str)) == ["q", "t\u00e9"]
    assert "=" not in cursor and "+" not in cursor and "/" not in cursor
    bad = [
        "not base64 !",
        paging.encode_cursor("dlq", "q", "t"),          # another list's
        paging.encode_cursor("pairs", "q"),             # wrong length
        paging.encode_cursor("pairs", "q", 3),          # wrong type
        paging.encode_cursor("leases", "q", "t", True, "i"),  # a bool is not an int here
        cursor + "AA",                                   # trailing bytes
    ]
    for text in bad:
        with pytest.raises(InvalidInput) as caught:
            paging.decode_cursor(text, "pairs", (str, str))
        assert caught.value.details[0]["field"] == "after"
    with pytest.raises(InvalidInput):
        paging.decode_cursor(paging.encode_cursor("leases", "q", "t", True, "i"), "leases",
                             (str, str, int, str))
