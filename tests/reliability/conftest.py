"""Reliability tests kill and restart servers: each test module gets its own private
PostgreSQL and Valkey under /tmp (never the shared ones, never DATABASE_URL/VALKEY_URL).
Each test runs on both of the engine's layouts: a row per task, and batch rows."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.harness import Stack, private_stack, reset


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    base = Path(tempfile.mkdtemp(prefix="tierq-rel-", dir="/tmp"))
    try:
        with private_stack(base) as made:
            yield made
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=[False, True], ids=["rows", "batch-rows"])
def clean(stack: Stack, request: pytest.FixtureRequest) -> Stack:
    """The module's stack, emptied, its engines writing a row per task or, the second
    time, batch rows (``TIERQ_BATCH_ROWS``): each guarantee is checked on both layouts."""
    reset(stack)
    stack.batch_rows = request.param
    return stack


@pytest.fixture
def clean_rows(stack: Stack) -> Stack:
    """The module's stack, emptied, with a row per task only: for a test whose engines
    never write a task in a way the layout changes."""
    reset(stack)
    stack.batch_rows = False
    return stack


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "journals"
    folder.mkdir()
    return folder
