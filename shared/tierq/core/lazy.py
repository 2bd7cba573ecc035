"""Modules imported on first use: what a Lambda function's requests never call is never
imported at its cold start.

    if TYPE_CHECKING:
        from tierq.logic import schedules
    else:
        schedules = lazy_module("tierq.logic.schedules")

mypy reads the real import; at run time the name is a stand-in that imports the module the
first time one of its attributes is read and forwards every read to it (nothing is copied,
so a module global rebound later is seen). Python's import lock makes the first import
thread-safe. See docs/architecture.md (the Lambda runtime).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


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
