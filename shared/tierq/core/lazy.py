"""Modules imported on first use, and dataclasses generated on first use: what a Lambda
function's requests never call costs nothing at its cold start.

    if TYPE_CHECKING:
        from tierq.logic import schedules
    else:
        schedules = lazy_module("tierq.logic.schedules")

mypy reads the real import; at run time the name is a stand-in that imports the module the
first time one of its attributes is read and forwards every read to it (nothing is copied,
so a module global rebound later is seen). Python's import lock makes the first import
thread-safe. ``lazy_dataclass`` does the same for a dataclass's generated methods. See
docs/architecture.md (the Lambda runtime).
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


_TARGET = "_lazy_target"


class LazyModule(ModuleType):
    """A stand-in for module ``name``: reading an attribute imports it (once) and reads it
    there."""

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") and attribute.endswith("__"):
            # copy, pickle and introspection probe dunders: answer them without importing
            raise AttributeError(attribute)
        # the module once imported, kept: a read on the hot path (per item of an ack) costs
        # a dictionary look-up, not importlib's
        target = self.__dict__.get(_TARGET)
        if target is None:
            target = importlib.import_module(self.__name__)
            self.__dict__[_TARGET] = target
        return getattr(target, attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


def lazy_module(name: str) -> ModuleType:
    """Module ``name`` itself when it is already imported, else a :class:`LazyModule`."""
    return importlib.import_module(name) if _imported(name) else LazyModule(name)


def _imported(name: str) -> bool:
    import sys

    return name in sys.modules



_made = threading.RLock()


@overload
def lazy_dataclass(cls: type[T], /) -> type[T]: ...


@overload
def lazy_dataclass(*, frozen: bool = False, eq: bool = True, order: bool = False,
                   kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def lazy_dataclass(cls: type[T] | None = None, /, *, frozen: bool = False, eq: bool = True,
                   order: bool = False, kw_only: bool = False,
                   ) -> type[T] | Callable[[type[T]], type[T]]:
    """``@dataclass`` (these of its options) whose methods are generated when the class's
    first instance is made: a module of many small classes (``tierq.dal.lua_calls``) costs
    a function's cold start only the ones its requests make.

    Generating a dataclass's methods compiles their source, most of what defining one
    costs. Until the first instance, ``dataclasses.fields`` and ``is_dataclass`` do not know
    the class; from then on it is the dataclass ``@dataclass`` makes with these options. A
    class with its own ``__init__`` or ``__slots__`` is refused (the methods replace the
    one, and the other needs a new class). A dataclass subclass of one must be a
    ``lazy_dataclass`` too: ``@dataclass`` would not find the fields of a base not yet
    generated."""
    options = {"frozen": frozen, "eq": eq, "order": order, "kw_only": kw_only}

    def defer(klass: type[T]) -> type[T]:
        if "__init__" in klass.__dict__ or "__slots__" in klass.__dict__:
            raise TypeError(f"{klass.__name__}: lazy_dataclass takes no own __init__ or "
                            f"__slots__")

        def first_init(self: Any, *args: Any, **kwargs: Any) -> None:
            # the first instance's: generates the methods of its class (its bases' first),
            # then runs this class's generated __init__ (a subclass's own __init__ may have
            # called this one through super())
            for base in reversed(type(self).__mro__):
                _generate(base)
            klass.__dict__["__init__"](self, *args, **kwargs)

        first_init.lazy_dataclass_options = options  # type: ignore[attr-defined]
        setattr(klass, "__init__", first_init)  # noqa: B010 (mypy refuses assigning a method)
        return klass

    return defer if cls is None else defer(cls)


def is_deferred_dataclass(klass: type) -> bool:
    """Whether ``klass`` is a ``lazy_dataclass`` whose methods are not generated yet."""
    return getattr(klass.__dict__.get("__init__"), "lazy_dataclass_options", None) is not None


def generate(klass: type) -> None:
    """Generate the methods of ``klass`` and of its bases now (tierq.core.warm_up), as its
    first instance would."""
    for base in reversed(klass.__mro__):
        _generate(base)


def _generate(klass: type) -> None:
    with _made:  # two threads' first instances: one generates, the other finds it done
        options = getattr(klass.__dict__.get("__init__"), "lazy_dataclass_options", None)
        if options is not None:
            delattr(klass, "__init__")
            dataclasses.dataclass(**options)(klass)
