"""Reliability tests kill and restart servers: each test module gets its own private
PostgreSQL and Valkey under /tmp (never the shared ones, never DATABASE_URL/VALKEY_URL)."""

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


@pytest.fixture
def clean(stack: Stack) -> Stack:
    reset(stack)
    return stack


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "journals"
    folder.mkdir()
    return folder
