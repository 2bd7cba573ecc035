"""How the delayed mover shares a batch's room among the pairs with rows due
(``delayed_mover.shares``): the pairs with the fewest rows so far come out level, and the
rows that do not divide go to the first pairs in turn."""

from __future__ import annotations

import random

import pytest

from tierq.maintenance.delayed_mover import DuePairs, shares


@pytest.mark.parametrize(("have", "room", "wanted"), [
    ([0, 0, 0], 10, [4, 3, 3]),        # equal shares, the odd row to the first in turn
    ([0, 0, 0, 0, 0], 3, [1, 1, 1, 0, 0]),  # fewer rows than pairs: the first in turn
    ([0, 0, 5], 4, [2, 2, 0]),         # the pair that has more waits
    ([4, 3], 2, [1, 1]),               # level at 4, the odd row to the first in turn
    ([3, 4], 1, [1, 0]),
    ([1, 1, 3], 6, [3, 3, 0]),
    ([2, 0, 2], 1, [0, 1, 0]),
    ([7], 5, [5]),
])
def test_the_room_lifts_the_pairs_with_the_fewest_first(have, room, wanted):
    assert shares(have, room) == wanted


def test_the_room_is_shared_whole_and_level():
    rng = random.Random(7)
    for _ in range(2000):
        have = [rng.randrange(6) for _ in range(rng.randrange(1, 8))]
        room = rng.randrange(1, 40)
        got = shares(have, room)
        assert sum(got) == room and min(got) >= 0
        totals = [h + g for h, g in zip(have, got, strict=True)]
        lifted = [t for t, g in zip(totals, got, strict=True) if g > 0]
        # the pairs given rows end within one row of each other, and no pair left out is
        # more than one row below them (the room went to the pairs with the fewest)
        assert max(lifted) - min(lifted) <= 1
        assert all(t >= max(lifted) - 1 for t, g in zip(totals, got, strict=True) if g == 0)

def test_the_pairs_take_turns_after_the_cursor_round_to_the_start():
    due = DuePairs()
    due.pairs = [("q", "a"), ("q", "b"), ("q", "c"), ("r", "a")]
    due.known = set(due.pairs)
    assert list(due.after(("q", "b"))) == [("q", "c"), ("r", "a"), ("q", "a"), ("q", "b")]
    assert list(due.after(("", ""))) == due.pairs
    assert list(due.after(("z", "z"))) == due.pairs
    assert list(due.after(("q", "bb"))) == [("q", "c"), ("r", "a"), ("q", "a"), ("q", "b")]
    due.drop({("q", "c"), ("x", "y")})
    assert due.pairs == [("q", "a"), ("q", "b"), ("r", "a")]
