"""Find a handler named ``module:function`` (``module:object.method`` works too), as
``tierq worker`` takes it."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any


class HandlerNotFound(ValueError):
    """The name does not lead to a callable."""


def load_handler(spec: str, *, search_path: str | None = None) -> Callable[..., Any]:
    """Import ``module`` and return its ``function``. ``search_path`` (default: the current
    directory) is put first on ``sys.path`` so a module beside the caller is found."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise HandlerNotFound(f"{spec!r}: name the handler as module:function, "
                              "e.g. examples.worker:handle")
    path = os.path.abspath(search_path or os.getcwd())
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise HandlerNotFound(f"{spec!r}: cannot import module {module_name!r} ({exc})") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HandlerNotFound(f"{spec!r}: {module_name!r} has no attribute "
                                  f"{attribute!r}") from None
    if not callable(target):
        raise HandlerNotFound(f"{spec!r}: {attribute!r} is not callable")
    return target
