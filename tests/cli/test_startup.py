"""The ``tierq`` command starts without the engine: psycopg, redis and the SQL are imported
only by the commands that use them (about half a second of every command's start)."""

from __future__ import annotations

import json
import subprocess
import sys

ENGINE_MODULES = ("tierq.engine", "tierq.dal", "psycopg", "redis", "boto3")


def test_the_command_line_starts_without_the_engine() -> None:
    code = ("import json, sys; from tierq.cli import app; "
            f"print(json.dumps([m for m in {ENGINE_MODULES!r} if m in sys.modules]))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert json.loads(loaded) == []


def test_the_engine_is_still_importable_from_the_package() -> None:
    code = ("import tierq; from tierq import Tierq; from tierq.engine import Tierq as E; "
            "print(Tierq is E and tierq.Tierq is E)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "True"
