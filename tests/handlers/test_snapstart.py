"""SnapStart's after-restore hook (``tierq.aws.runtime.after_restore``), with a restore
simulated by ``fork()``: each child starts from a copy of the parent's memory, as every
execution environment resumed from one snapshot does, and runs the hook first.

Against the session's real PostgreSQL and Valkey: the children open connections of their
own (other backend pids, other Valkey client ids than the parent's pooled ones) and draw
distinct task ids and random numbers; without the hook, ``random`` repeats in every copy.
(``fork()`` itself re-seeds ``random`` in the child, which a restore does not: each child
first puts back the generator's state from before the fork, as the snapshot holds it.)
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tierq.aws import runtime
from tierq.core.ids import uuid7_strings

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def _stores_of_this_process() -> dict[str, Any]:
    tq = runtime.default_engine()
    with tq.db.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
    assert row is not None
    return {"backend_pid": row["pid"], "valkey_client_id": tq.warm.client.client_id()}


def _in_child(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()`` run in a forked child; its JSON result (or the error it raised)."""
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():  # (fork of a process with the pool's threads)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_fd)
        try:
            payload = json.dumps({"ok": work()})
        except BaseException as exc:  # reported to the parent
            payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        with os.fdopen(write_fd, "w") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as source:
        text = source.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    result = json.loads(text)
    assert "error" not in result, result["error"]
    ok: dict[str, Any] = result["ok"]
    return ok


def _restored(snapshot: Any) -> dict[str, Any]:
    random.setstate(snapshot)  # the generator as the snapshot holds it (see the docstring)
    started = time.monotonic()
    runtime.after_restore()
    hook_s = time.monotonic() - started
    return {**_stores_of_this_process(), "hook_s": hook_s,
            "ids": uuid7_strings(200), "random": [random.random() for _ in range(4)]}


def test_restored_copies_open_their_own_connections_and_draw_distinct_ids(
        lambda_env: None) -> None:
    parent = _stores_of_this_process()  # the parent's pools hold open connections now
    random.seed(20260)
    snapshot = random.getstate()  # the state every copy of this memory starts from
    children = [_in_child(lambda: _restored(snapshot)) for _ in range(2)]

    pids = {parent["backend_pid"], *(c["backend_pid"] for c in children)}
    assert len(pids) == 3, "a restored copy reused a pooled PostgreSQL connection"
    clients = {parent["valkey_client_id"], *(c["valkey_client_id"] for c in children)}
    assert len(clients) == 3, "a restored copy reused a pooled Valkey connection"
    first, second = (set(c["ids"]) for c in children)
    assert len(first) == len(second) == 200 and not first & second
    assert children[0]["random"] != children[1]["random"]
    assert all(c["hook_s"] < 2.0 for c in children), children  # Lambda allows 10 s


def test_without_the_hook_every_copy_repeats_random(lambda_env: None) -> None:
    """The control: what the hook re-seeds is really shared by the copies."""
    random.seed(20260)
    snapshot = random.getstate()

    def restored_without_hook() -> dict[str, Any]:
        random.setstate(snapshot)
        return {"random": [random.random() for _ in range(4)]}

    draws = [_in_child(restored_without_hook) for _ in range(2)]
    assert draws[0] == draws[1]


def test_the_hook_drops_an_engine_and_the_next_request_builds_one(lambda_env: None) -> None:
    before = runtime.engine()
    runtime.after_restore()
    after = runtime.engine()
    assert after is not before
    _stores_of_this_process()  # the new engine answers


def test_hooks_register_with_snapshot_restore_py_where_it_exists(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Lambda's Python runtimes ship ``snapshot_restore_py``; elsewhere it is missing and
    registering does nothing."""
    monkeypatch.delitem(sys.modules, "snapshot_restore_py", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert runtime.register_snapshot_hooks() is False

    # the runtime library's interface: register_after_restore(func, *args, **kwargs)
    (tmp_path / "snapshot_restore_py.py").write_text(
        "after_restore_hooks = []\n"
        "def register_after_restore(func, *args, **kwargs):\n"
        "    after_restore_hooks.append((func, args, kwargs))\n"
        "    return func\n")
    assert runtime.register_snapshot_hooks() is True
    module = sys.modules["snapshot_restore_py"]
    assert isinstance(module, types.ModuleType)
    assert module.after_restore_hooks == [(runtime.after_restore, (), {})]
