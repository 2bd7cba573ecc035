"""``tierq.core.collector``: ``tune`` raises the young generation's threshold (never lowers
it, never turns a stopped collector on), freezes what is alive when asked, and ``restore``
undoes both."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from tierq.core import collector


@pytest.fixture(autouse=True)
def collector_as_found() -> Iterator[None]:
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    yield
    gc.set_threshold(*thresholds)
    if gc.get_freeze_count() > frozen:
        gc.unfreeze()


class Cycle:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_tune_raises_the_young_threshold_and_freezes_then_restore_undoes_it() -> None:
    gc.set_threshold(700, 10, 10)
    frozen = gc.get_freeze_count()
    # garbage not collected yet: tune frees it rather than freezing it for good
    garbage = [weakref.ref(Cycle()) for _ in range(100)]
    gc.disable()  # (no collection of its own before tune's)
    try:
        state = collector.tune()
    finally:
        gc.enable()
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 10, 10)
    assert collector.young_threshold() == collector.YOUNG_THRESHOLD
    assert gc.get_freeze_count() > frozen
    assert all(ref() is None for ref in garbage)
    collector.restore(state)
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


@pytest.mark.parametrize(("found", "kept"), [(200_000, 200_000), (0, 0)])
def test_tune_keeps_a_higher_threshold_and_a_stopped_collector(found: int, kept: int) -> None:
    gc.set_threshold(found, 5, 7)
    frozen = gc.get_freeze_count()
    state = collector.tune(freeze=False)
    assert gc.get_threshold() == (kept, 5, 7) and gc.get_freeze_count() == frozen
    assert state == collector.CollectorState((found, 5, 7), froze=False)


def test_tune_refuses_a_threshold_below_one() -> None:
    with pytest.raises(ValueError, match="young must be at least 1, not 0"):
        collector.tune(0)
