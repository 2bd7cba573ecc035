"""tierq.aws.http.paging: pages filled to the byte budget as the runtime counts the body, and
cursors that only decode for the list that made them."""

from __future__ import annotations

import json
from typing import Annotated

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


PAIRS = paging.CursorForm("pairs", (paging.CursorPart("queue", paging.NAME_PART),
                                    paging.CursorPart("tenant", paging.NAME_PART)))
LEASES = paging.CursorForm("leases", (
    paging.CursorPart("queue", paging.NAME_PART), paging.CursorPart("tenant", paging.NAME_PART),
    paging.CursorPart("ms", paging.COUNT_PART, int),
    paging.CursorPart("id", f"({paging.UUID_PART})?")))


def test_cursors_round_trip_and_refuse_anything_else() -> None:
    cursor = PAIRS.encode("q.1", "t_2")
    assert cursor == "q.1~t_2"
    assert PAIRS.decode(cursor) == ["q.1", "t_2"]
    assert LEASES.decode(LEASES.encode("q", "t", 17, "")) == ["q", "t", 17, ""]
    assert PAIRS.decode(None) is None and PAIRS.decode("") is None
    bad = ["q", "q~t~u", "q~t~", "~t", "q~t\n", "q~t\u00e9", "q t~t", ".q~t",
           "eyJxIjoxfQ", "q~" + "t" * 65]
    for text in bad:
        with pytest.raises(InvalidInput) as caught:
            PAIRS.decode(text)
        assert caught.value.details[0]["field"] == "after"
    for text in ["q~t~x~", "q~t~12345678901234567~", "q~t~1~ABCDEF12-0000-0000-0000-000000000000"]:
        with pytest.raises(InvalidInput):
            LEASES.decode(text)


@pytest.mark.parametrize("form", [PAIRS, LEASES])
def test_the_documented_pattern_is_exactly_what_decodes(form: paging.CursorForm) -> None:
    """The API document gives ``after`` the form's pattern, which the request validation
    checks (pydantic's regular expressions: ``$`` is the end of the text, as in ECMA-262);
    the decoder agrees with it."""
    from pydantic import StringConstraints, TypeAdapter, ValidationError

    documented = TypeAdapter(Annotated[str, StringConstraints(pattern=form.pattern)])
    samples = ["", "q~t", "q~t~0~", "q~t~9999999999999999~00000000-0000-0000-0000-00000000000a",
               "q~t~1~x", "q~t\n", "\nq~t", "Q-1.x~_"]
    for text in samples:
        try:
            form.decode(text)
            decodes = True
        except InvalidInput:
            decodes = False
        try:
            documented.validate_python(text)
            valid = True
        except ValidationError:
            valid = False
        assert valid is decodes, repr(text)
