"""Modules imported on first use, and dataclasses generated on first use: what a Lambda
function's requests never call costs nothing at its cold start.

    if TYPE_CHECKING:
        from tierq.logic import schedules
    else:
        schedules = lazy_module("tierq.logic.schedules")

mypy reads the real import; at run time the name is a stand-in that imports the module the
first time one of its attributes is read and forwards every read to it (nothing is copied,
so a module global rebound later is seen). Python's import lock makes the first import
thread-safe. ``frozen_dataclass`` does the same for a dataclass's generated methods. See
docs/architecture.md (the Lambda runtime).
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from types import ModuleType
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


class LazyModule(ModuleType):
    """A stand-in for module ``name``: reading an attribute imports it (once) and reads it
    there."""

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") and attribute.endswith("__"):
            # copy, pickle and introspection probe dunders: answer them without importing
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self.__name__), attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


def lazy_module(name: str) -> ModuleType:
    """Module ``name`` itself when it is already imported, else a :class:`LazyModule`."""
    return importlib.import_module(name) if _imported(name) else LazyModule(name)


def _imported(name: str) -> bool:
    import sys

    return name in sys.modules


_made = threading.RLock()


@dataclass_transform(frozen_default=True)
def frozen_dataclass(cls: type[T]) -> type[T]:
    """``@dataclass(frozen=True)`` whose methods are generated when its first instance is
    made: a module of many small call objects (``tierq.dal.lua_calls``) costs a function's
    cold start only the ones its requests build.

    Generating a dataclass's methods compiles their source, most of what defining one
    costs. Until the first instance, ``dataclasses.fields`` and ``is_dataclass`` do not know
    the class; from then on it is the dataclass ``@dataclass(frozen=True)`` makes. A class
    with its own ``__init__`` or ``__slots__`` is refused (the methods replace the one, and
    the other needs a new class)."""
    if "__init__" in cls.__dict__ or "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: frozen_dataclass takes no own __init__ or __slots__")
    setattr(cls, "__init__", _first_init)  # noqa: B010 (mypy refuses assigning a method)
    return cls


def _first_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """The first instance's ``__init__``: generates the methods of its class (its bases'
    first), then runs the generated ``__init__``."""
    for klass in reversed(type(self).__mro__):
        _generate(klass)
    type(self).__init__(self, *args, **kwargs)


def _generate(klass: type) -> None:
    with _made:  # two threads' first instances: one generates, the other finds it done
        if klass.__dict__.get("__init__") is _first_init:
            delattr(klass, "__init__")
            dataclasses.dataclass(frozen=True)(klass)
