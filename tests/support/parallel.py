"""How the suite runs under pytest-xdist (``-n N --dist loadfile --no-loadscope-reorder``,
infra/local/test.sh; loaded as a plugin by tests/conftest.py).

Each worker is a test session of its own, with its own private servers (stores.py). Work
goes out a whole file at a time, in collection order, so a file's module fixtures start
once and a package's (local stacks, dev servers) once per worker. The Spark files are one
unit, run first (the longest), so one worker starts the run's only JVM; files are told
apart by path because the controller never sees markers (and xdist 3.8's ``xdist_group``
has no effect under pytest 9.2, which no longer reads the node id it rewrites).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

SPARK_UNIT = "spark"


def worker_index() -> int | None:
    """This xdist worker's number (``gw2`` -> 2); None outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def in_spark_unit(nodeid: str) -> bool:
    """Whether the test's file belongs to the Spark unit: under tests/spark/, or ``spark`` in
    its file name."""
    path = nodeid.split("::", 1)[0]
    return path.startswith("tests/spark/") or "spark" in path.rsplit("/", 1)[-1]


# The controller's readline (imported with pdb) exports COLUMNS and LINES to its children, so
# workers start with them, and rich fixes a console's width when it is made: the CLI's tables
# would be 80 columns wide under xdist only. A worker takes the controller's os.environ's.
TERMINAL_SIZE = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["tierq_terminal_size"] = {name: os.environ.get(name)
                                               for name in TERMINAL_SIZE}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """On a worker: the controller's COLUMNS and LINES (see TERMINAL_SIZE)."""
    given = getattr(config, "workerinput", {}).get("tierq_terminal_size")
    for name, value in (given or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def needs_spark(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("spark")
                or "spark" in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    strays = [item.nodeid for item in items if needs_spark(item)
              and not in_spark_unit(item.nodeid)]
    if strays:
        raise pytest.UsageError(f"{strays[0]} needs Spark: its file must be under tests/spark/"
                                " or have `spark` in its name (tests/support/parallel.py)")
    if worker_index() is not None:
        items.sort(key=lambda item: not in_spark_unit(item.nodeid))  # (a stable sort)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``: a unit per file, the Spark files' one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SparkUnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SPARK_UNIT if in_spark_unit(nodeid) else super()._split_scope(nodeid)

    return SparkUnitScheduling(config, log)
