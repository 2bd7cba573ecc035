"""tierq.core.lazy.lazy_module: a stand-in that imports its module on the first read of an
attribute, then forwards every read to it (a global rebound later is seen)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierq.core.lazy import LazyModule, lazy_module

NAME = "tierq_lazy_probe"


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / f"{NAME}.py").write_text("VALUE = 1\nIMPORTS = [1]\n")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop(NAME, None)


def test_the_module_is_imported_at_the_first_read_and_rebinding_is_seen(probe: Path) -> None:
    stand_in = lazy_module(NAME)
    assert isinstance(stand_in, LazyModule) and NAME not in sys.modules
    with pytest.raises(AttributeError):
        stand_in.__wrapped__  # noqa: B018 - a probe of a dunder does not import
    assert NAME not in sys.modules
    assert stand_in.VALUE == 1 and NAME in sys.modules
    sys.modules[NAME].VALUE = 2  # a global rebound later (a test's monkeypatch)
    assert stand_in.VALUE == 2
    with pytest.raises(AttributeError):
        stand_in.MISSING  # noqa: B018


def test_an_imported_module_is_handed_out_itself(probe: Path) -> None:
    lazy_module(NAME).VALUE  # noqa: B018
    assert lazy_module(NAME) is sys.modules[NAME]
