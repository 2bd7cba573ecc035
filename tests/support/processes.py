"""Child processes whose failures reach the test as themselves.

An assertion that fails in a ``multiprocessing`` child only ends that child: the parent,
waiting on a queue or a join, saw a timeout minutes later, without the child's message.
:class:`Children` starts each target under :func:`_child_main`, which writes the child's
traceback to a file of its own before the child exits; the parent's waits (:meth:`get`,
:meth:`join`, :meth:`check`) look at those files and raise :class:`ChildFailed` with the
child's traceback as soon as one appears.

Targets and their arguments must be picklable (``spawn`` is the default start method):
module-level functions of an importable module.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_module
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any


class ChildFailed(AssertionError):
    """A child process raised (the message ends with its traceback), or exited non-zero."""


def _child_main(target: Callable[..., Any], args: tuple[Any, ...], report: str) -> None:
    try:
        target(*args)
    except BaseException:
        Path(report).write_text(traceback.format_exc())
        raise  # the child still exits non-zero, its traceback on its stderr


class Children:
    """The child processes of one test: ``start`` them, wait on them with ``get``/``join``
    (or poll ``check`` inside a wait of your own), ``close`` at the end."""

    def __init__(self, start_method: str = "spawn") -> None:
        self.ctx = mp.get_context(start_method)
        self._reports = Path(tempfile.mkdtemp(prefix="tierq-children-"))
        self._started: list[tuple[BaseProcess, Path]] = []

    def queue(self) -> Any:
        """A queue children can put results on (``multiprocessing.Queue`` of this context)."""
        return self.ctx.Queue()

    def start(self, target: Callable[..., Any], *args: Any, daemon: bool = False) -> BaseProcess:
        report = self._reports / f"child-{len(self._started) + 1}.txt"
        name = f"{getattr(target, '__name__', 'child')}-{len(self._started) + 1}"
        proc = self.ctx.Process(target=_child_main, args=(target, args, str(report)),
                                name=name, daemon=daemon)
        proc.start()
        self._started.append((proc, report))
        return proc

    def check(self, *, exit_codes: bool = False) -> None:
        """Raise ChildFailed for a child that raised; with ``exit_codes``, also for one
        that ended with a non-zero exit code (killed, crashed) without a traceback."""
        for proc, report in self._started:
            if report.exists():
                proc.join(timeout=5)  # the traceback is written just before the exit
                raise ChildFailed(f"child process {proc.name} (pid {proc.pid}) failed:\n"
                                  f"{report.read_text().rstrip()}")
        if exit_codes:
            for proc, _ in self._started:
                if proc.exitcode not in (None, 0):
                    raise ChildFailed(f"child process {proc.name} (pid {proc.pid}) exited "
                                      f"with code {proc.exitcode}")

    def get(self, results: Any, count: int, timeout: float) -> list[Any]:
        """``count`` items from ``results``, raising ChildFailed as soon as a child failed
        (a child that ends non-zero without putting its item included)."""
        deadline = time.monotonic() + timeout
        got: list[Any] = []
        while len(got) < count:
            self.check()
            try:
                got.append(results.get(timeout=0.2))
                continue
            except queue_module.Empty:
                pass
            self.check(exit_codes=True)
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(got)} of {count} results from the child "
                                     f"processes within {timeout:g}s")
        return got

    def join(self, timeout: float) -> None:
        """Wait for every child to end; ChildFailed if one failed, AssertionError if one is
        still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        for proc, _ in self._started:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
            self.check(exit_codes=True)
        running = [proc.name for proc, _ in self._started if proc.is_alive()]
        assert not running, f"child processes still running after {timeout:g}s: {running}"

    def close(self) -> None:
        """Kill what still runs and forget the reports."""
        for proc, _ in self._started:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        shutil.rmtree(self._reports, ignore_errors=True)
