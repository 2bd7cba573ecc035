"""Dataclasses' generated methods compiled when the Lambda layer is built, not at each cold
start.

``dataclasses`` writes a class's ``__init__``, ``__repr__``, ``__eq__`` and the rest as
source text and compiles it when the class is defined: 0.2 to 0.9 ms a class, some 60 classes
in a function's import (pydantic's and annotated_types' included), about a fifth of what a
function imports beyond its libraries. The layer build (``layers/tierq/build_layer.py``)
imports every function once inside :func:`recording` and stores each text with its
code object, in ``marshal`` (the format of ``.pyc`` files), beside this module as
``dataclass_code.marshal``. During a function's initialisation (:func:`precompiled`, from
``tierq.core.cold_start.initialising``) each text is looked up there first.

| the file | a dataclass defined inside ``precompiled()`` |
| --- | --- |
| absent (running from sources) | compiled as usual |
| written by another Python (another bytecode magic number) | compiled as usual |
| holds the class's exact source text | the stored code object: what compiling gives |
| lacks the text (the class differs from the built one) | compiled as usual |

The hook is the name ``exec`` in the ``dataclasses`` module's globals, where it shadows the
builtin for that module alone, set for the block only. A text is compiled as ``exec`` of a
string compiles it: as ``<string>``, without the caller's ``__future__`` flags.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.util import MAGIC_NUMBER
from types import CodeType
from typing import Any

CODE_FILE = os.path.join(os.path.dirname(__file__), "dataclass_code.marshal")


class _State:
    """The texts and code objects in use while the hook is set, and what it found."""

    codes: dict[str, CodeType] | None = None
    recording = False
    hits = 0
    misses = 0


def counts() -> tuple[int, int]:
    """Texts found in the file and texts compiled, since the process started."""
    return _State.hits, _State.misses


def _exec(source: Any, globals_: dict[str, Any], locals_: Mapping[str, Any] | None = None,
          ) -> None:
    """``exec`` as ``dataclasses`` calls it, with the code of a known text taken as stored."""
    codes = _State.codes
    if type(source) is str and codes is not None:
        code = codes.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            _State.misses += 1
            if _State.recording:
                codes[source] = code
        else:
            _State.hits += 1
        source = code
    exec(source, globals_, locals_)


def load(path: str = CODE_FILE) -> dict[str, CodeType] | None:
    """The stored texts and code objects; None when the file is absent or another Python's."""
    try:
        with open(path, "rb") as stored:
            data = stored.read()
    except FileNotFoundError:
        return None
    if data[:len(MAGIC_NUMBER)] != MAGIC_NUMBER:
        return None
    codes: dict[str, CodeType] = marshal.loads(data[len(MAGIC_NUMBER):])
    return codes


def _hooked() -> bool:
    return "exec" in vars(dataclasses)


@contextmanager
def precompiled(path: str = CODE_FILE) -> Iterator[None]:
    """Dataclasses defined in the block take their methods' code from ``path`` when it holds
    their text; inside a recording or another such block, nothing more is set."""
    if _hooked():
        yield
        return
    codes = load(path)
    if codes is None:
        yield
        return
    _State.codes = codes
    dataclasses.exec = _exec  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
        _State.codes = None  # (the texts are freed; the classes keep their code)


@contextmanager
def recording(path: str = CODE_FILE) -> Iterator[None]:
    """Keeps every dataclass text compiled in the block, with those ``path`` already holds,
    and writes them all to ``path`` at its end (the layer build's recorder)."""
    _State.codes = load(path) or {}
    _State.recording = True
    dataclasses.exec = _exec  # type: ignore[attr-defined]
    try:
        yield
        _save(_State.codes, path)
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
        _State.codes = None
        _State.recording = False


def _save(codes: dict[str, CodeType], path: str) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as out:
        out.write(MAGIC_NUMBER)
        marshal.dump(codes, out)
    os.replace(temporary, path)


def held(path: str = CODE_FILE) -> int:
    """How many texts ``path`` holds (0 when absent or another Python's)."""
    return len(load(path) or {})
