"""tierq.core.lazy.lazy_module: a stand-in that imports its module on the first read of an
attribute, then forwards every read to it (a global rebound later is seen)."""

from __future__ import annotations

import sys
import threading
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


IMPORTER = "tierq_lazy_importer"


@pytest.fixture
def importer(probe: Path) -> Iterator[Path]:
    """A module whose global ``target`` is ``lazy_module(NAME)``."""
    (probe / f"{IMPORTER}.py").write_text(
        "from tierq.core.lazy import lazy_module\n"
        f"target = lazy_module({NAME!r})\n"
        "def read():\n    return target.VALUE\n")
    yield probe
    sys.modules.pop(IMPORTER, None)


def test_the_first_read_rebinds_the_importers_global_to_the_module(importer: Path) -> None:
    import tierq_lazy_importer as module  # type: ignore[import-not-found]

    stand_in = module.target
    assert isinstance(stand_in, LazyModule) and NAME not in sys.modules
    assert module.read() == 1
    # later reads go to the module itself, no stand-in in between
    assert module.target is sys.modules[NAME]
    # a stand-in kept elsewhere still forwards, and sees a global rebound later
    sys.modules[NAME].VALUE = 3
    assert stand_in.VALUE == 3 and module.read() == 3


def test_threads_reading_at_once_import_once_and_all_answer(importer: Path) -> None:
    (importer / f"{NAME}.py").write_text("import time\nIMPORTS = []\nIMPORTS.append(1)\n"
                                         "time.sleep(0.05)\nVALUE = 1\n")
    import tierq_lazy_importer as module

    barrier = threading.Barrier(8)
    seen: list[int] = []

    def read() -> None:
        barrier.wait()
        seen.append(module.read())

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [1] * 8
    assert sys.modules[NAME].IMPORTS == [1] and module.target is sys.modules[NAME]


def test_a_lease_outcome_read_through_the_lease_models_is_kept_there() -> None:
    from tierq.models import lease_outcomes, leases

    assert leases.AckResult is lease_outcomes.AckResult
    # (the next read finds it in the module, not through its __getattr__)
    assert vars(leases)["AckResult"] is lease_outcomes.AckResult
