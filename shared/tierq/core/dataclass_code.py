"""Dataclasses' generated methods compiled when the Lambda layer is built, not at each cold
start.

``dataclasses`` writes a class's ``__init__``, ``__repr__``, ``__eq__`` and the rest as
source text and compiles it when the class is defined: 0.2 to 0.9 ms a class, some 60 classes
in a function's import (pydantic's and annotated_types' included), about a fifth of what a
function imports beyond its libraries. The layer build (``layers/tierq/build_layer.py``)
imports every function once inside :func:`recording` and stores each text with its
code object, in ``marshal`` (the format of ``.pyc`` files), beside this module as
``dataclass_code.marshal``, each code object marshalled on its own and read only when its
text is met (a function meets some 70 of the layer's 100). During a function's
initialisation (:func:`precompiled`, from ``tierq.core.cold_start.initialising``) each text
is looked up there first.

| the file | a dataclass defined inside ``precompiled()`` |
| --- | --- |
| absent (running from sources) | compiled as usual |
| written by another Python (another bytecode magic number) | compiled as usual |
| holds the class's exact source text | the stored code object: what compiling gives |
| lacks the text (the class differs from the built one) | compiled as usual |

A file that cannot be read (truncated, another shape) is skipped with a warning: it is a
cache, and a cold start that fails over it would stop the function. The hook is the name
``exec`` in the ``dataclasses`` module's globals, where it shadows the builtin for that
module alone, set by the first of overlapping blocks and taken away by the last. A text is
compiled as ``exec`` of a string compiles it: as ``<string>``, without the caller's
``__future__`` flags.
"""

from __future__ import annotations

import dataclasses
import logging
import marshal
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.util import MAGIC_NUMBER
from typing import Any

CODE_FILE = os.path.join(os.path.dirname(__file__), "dataclass_code.marshal")

logger = logging.getLogger(__name__)


class _State:
    """The texts and code objects in use while the hook is set, and what it found."""

    lock = threading.Lock()
    depth = 0  # the blocks open (the hook is set while above 0)
    codes: dict[str, bytes] | None = None
    recording = False
    hits = 0
    misses = 0


def counts() -> tuple[int, int]:
    """Texts found in the file and texts compiled, since the process started."""
    return _State.hits, _State.misses


def _exec(source: Any, globals_: dict[str, Any], locals_: Mapping[str, Any] | None = None,
          ) -> None:
    """``exec`` as ``dataclasses`` calls it, with the code of a known text taken as stored."""
    if type(source) is str:
        codes = _State.codes  # (None in a thread that found the hook as a block ended)
        stored = codes.get(source) if codes is not None else None
        if stored is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            _State.misses += 1
            if _State.recording and codes is not None:
                codes[source] = marshal.dumps(code)
        else:
            code = marshal.loads(stored)
            _State.hits += 1
        source = code
    exec(source, globals_, locals_)


def load(path: str = CODE_FILE) -> dict[str, bytes] | None:
    """The stored texts and their code objects, marshalled; None when the file is absent,
    another Python's or unreadable (the last logged)."""
    try:
        with open(path, "rb") as stored:
            data = stored.read()
    except FileNotFoundError:
        return None
    if data[:len(MAGIC_NUMBER)] != MAGIC_NUMBER:
        return None
    try:
        codes = marshal.loads(data[len(MAGIC_NUMBER):])
    except (EOFError, ValueError, TypeError) as exc:
        logger.warning("dataclass code store %s unreadable (%s): compiling as usual", path, exc)
        return None
    if not (isinstance(codes, dict) and all(
            type(text) is str and type(code) is bytes for text, code in codes.items())):
        logger.warning("dataclass code store %s holds no texts and code: compiling as usual",
                       path)
        return None
    return codes


@contextmanager
def _hook(codes: dict[str, bytes] | None, recording: bool) -> Iterator[None]:
    """The hook set with ``codes`` by the first of overlapping blocks, taken away by the
    last; ``codes`` None sets nothing."""
    with _State.lock:
        if _State.depth == 0:
            if codes is None:
                hooked = False
            else:
                _State.codes, _State.recording = codes, recording
                dataclasses.exec = _exec  # type: ignore[attr-defined]
                hooked = True
        else:
            hooked = True
        if hooked:
            _State.depth += 1
    try:
        yield
    finally:
        if hooked:
            with _State.lock:
                _State.depth -= 1
                if _State.depth == 0:
                    del dataclasses.exec  # type: ignore[attr-defined]
                    _State.codes = None  # (the texts are freed; the classes keep their code)
                    _State.recording = False


@contextmanager
def precompiled(path: str = CODE_FILE) -> Iterator[None]:
    """Dataclasses defined in the block take their methods' code from ``path`` when it holds
    their text; inside a recording or another such block, that block's texts are used."""
    with _hook(load(path) if _State.depth == 0 else None, recording=False):
        yield


@contextmanager
def recording(path: str = CODE_FILE) -> Iterator[None]:
    """Keeps every dataclass text compiled in the block, with those ``path`` already holds,
    and writes them all to ``path`` at its end (the layer build's recorder, never inside
    another block)."""
    if _State.depth:
        raise RuntimeError("recording inside another block of tierq.core.dataclass_code")
    codes = load(path) or {}
    with _hook(codes, recording=True):
        yield
        _save(codes, path)


def _save(codes: dict[str, bytes], path: str) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as out:
        out.write(MAGIC_NUMBER)
        marshal.dump(codes, out)
    os.replace(temporary, path)


def held(path: str = CODE_FILE) -> int:
    """How many texts ``path`` holds (0 when absent or another Python's)."""
    return len(load(path) or {})
