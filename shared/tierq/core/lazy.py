"""Modules imported on first use, and dataclasses generated on first use: what a Lambda
function's requests never call costs nothing at its cold start.

    if TYPE_CHECKING:
        from tierq.logic import schedules
    else:
        schedules = lazy_module("tierq.logic.schedules")

mypy reads the real import; at run time the name is a stand-in that imports the module the
first time one of its attributes is read, then rebinds the importer's global to the module
itself: later reads cost what any module's do (on the hot path, an ack reads several per
item). A reference to the stand-in kept elsewhere still forwards every read to the module
(nothing is copied, so a module global rebound later is seen). Python's import lock makes
the first import thread-safe; a thread that reads the global while another rebinds it finds
either the stand-in or the module, both of which answer. ``lazy_dataclass`` does the same
for a dataclass's generated methods. See docs/architecture.md (the Lambda runtime).
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import sys
import threading
from _collections import _tuplegetter  # type: ignore[import-not-found]
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


_TARGET = "_lazy_target"


_IMPORTER = "_lazy_importer"


class LazyModule(ModuleType):
    """A stand-in for module ``name``: reading an attribute imports it (once), rebinds the
    importer's globals that hold this stand-in to it, and reads it there."""

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__") and attribute.endswith("__"):
            # copy, pickle and introspection probe dunders: answer them without importing
            raise AttributeError(attribute)
        target = self.__dict__.get(_TARGET)
        if target is None:
            target = importlib.import_module(self.__name__)
            self.__dict__[_TARGET] = target
            importer: dict[str, Any] | None = self.__dict__.get(_IMPORTER)
            if importer is not None:
                # (a snapshot: another thread may bind a global meanwhile; each store of
                # the module is a single dictionary write, atomic under the GIL)
                for global_name, value in list(importer.items()):
                    if value is self:
                        importer[global_name] = target
        return getattr(target, attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name__!r}>"


def lazy_module(name: str) -> ModuleType:
    """Module ``name`` itself when it is already imported, else a :class:`LazyModule` that
    rebinds the caller's global holding it to the module at its first use."""
    if _imported(name):
        return importlib.import_module(name)
    stand_in = LazyModule(name)
    stand_in.__dict__[_IMPORTER] = sys._getframe(1).f_globals
    return stand_in


def _imported(name: str) -> bool:
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
    """Make ``klass`` the dataclass its options say, keeping an ``__init__`` on it at every
    moment: another thread's instance made meanwhile runs the first one, which waits here,
    then the generated one (a moment without would make it ``object``'s, which takes no
    arguments). ``@dataclass`` sets no ``__init__`` over one the class has, so the class is
    made with ``init=False`` and its ``__init__`` generated on a throwaway subclass, then
    set in one assignment. A class without a docstring gets the one ``@dataclass`` writes
    (its name and signature), read once, from the subclass."""
    with _made:  # two threads' first instances: one generates, the other finds it done
        options = getattr(klass.__dict__.get("__init__"), "lazy_dataclass_options", None)
        if options is None:
            return
        undocumented = klass.__dict__.get("__doc__") is None
        if undocumented:  # (else @dataclass would write the first __init__'s signature)
            klass.__doc__ = klass.__name__
        dataclasses.dataclass(init=False, **options)(klass)
        # the __init__ alone (and, frozen as the class must be, __setattr__ and __delattr__)
        bare = type(klass.__name__, (klass,), {
            "__module__": klass.__module__, "__qualname__": klass.__qualname__,
            "__doc__": None if undocumented else klass.__doc__})
        scratch: type = dataclasses.dataclass(frozen=options["frozen"], repr=False, eq=False,
                                              match_args=False)(bare)
        init = scratch.__dict__["__init__"]
        init.__qualname__ = f"{klass.__qualname__}.__init__"
        if undocumented:
            klass.__doc__ = scratch.__doc__
        setattr(klass, "__init__", init)  # noqa: B010 (mypy refuses assigning a method)


# What ``collections.namedtuple`` generates that a LazyNamedTuple class takes from it on
# its first instance (``_fields``, ``_field_defaults``, ``__match_args__`` and the fields'
# properties are set when the class is defined).
_NAMEDTUPLE_METHODS = ("__new__", "_make", "_replace", "__repr__", "_asdict", "__getnewargs__",
                       "__replace__")


class _LazyNamedTupleMeta(type):
    """Defines a LazyNamedTuple class as ``typing.NamedTuple`` would, without compiling its
    ``__new__``: a tuple subclass with its fields' properties and defaults."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any],
                ) -> _LazyNamedTupleMeta:
        if namespace.get("_lazy_root"):
            return super().__new__(mcs, name, bases, namespace)
        if bases != (LazyNamedTuple,):
            raise TypeError(f"{name}: a LazyNamedTuple class has no other base")
        fields = tuple(namespace.get("__annotations__", {}))
        defaults: dict[str, Any] = {}
        for index, field in enumerate(fields):
            if field.startswith("_"):
                raise ValueError(f"{name}: field names cannot start with an underscore: "
                                 f"{field!r}")
            if field in namespace:
                defaults[field] = namespace[field]
            elif defaults:
                raise TypeError(f"{name}: non-default namedtuple field {field} cannot "
                                f"follow default field{'s' if len(defaults) > 1 else ''} "
                                f"{', '.join(defaults)}")
            namespace[field] = _tuplegetter(index, f"Alias for field number {index}")
        namespace.update(__slots__=(), _fields=fields, _field_defaults=defaults,
                         __match_args__=fields)
        return super().__new__(mcs, name, bases, namespace)


class LazyNamedTuple(tuple, metaclass=_LazyNamedTupleMeta):  # type: ignore[type-arg]
    """Base of a ``typing.NamedTuple``-like class whose methods ``collections.namedtuple``
    generates on its first instance (``cls(...)`` or ``cls._make``): defining one costs a
    fraction of a NamedTuple, whose ``__new__`` is compiled from source, so a module of many
    row classes (``tierq.dal.store.rows``) costs a cold start little.

    Declare fields by annotations, with defaults last, as in a NamedTuple; no other base.
    mypy reads it as ``typing.NamedTuple`` (import it under ``TYPE_CHECKING``). Until the
    first instance the class has its fields' properties, ``_fields`` and
    ``_field_defaults``; from then on it has every method a NamedTuple has."""

    _lazy_root = True
    __slots__ = ()
    _fields: tuple[str, ...]
    _field_defaults: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        _generate_namedtuple(cls)
        return cls(*args, **kwargs)

    @classmethod
    def _make(cls, iterable: Any) -> Any:
        _generate_namedtuple(cls)
        return cls._make(iterable)


def is_deferred_namedtuple(klass: type) -> bool:
    """Whether ``klass`` is a ``LazyNamedTuple`` whose methods are not generated yet."""
    return issubclass(klass, LazyNamedTuple) and klass is not LazyNamedTuple \
        and "_make" not in klass.__dict__


def generate_namedtuple(klass: type) -> None:
    """Generate the methods of LazyNamedTuple ``klass`` now (tierq.core.warm_up), as its
    first instance would."""
    _generate_namedtuple(klass)


def _generate_namedtuple(klass: type) -> None:
    with _made:
        if "_make" in klass.__dict__:
            return
        fields: tuple[str, ...] = klass._fields  # type: ignore[attr-defined]
        defaults: dict[str, Any] = klass._field_defaults  # type: ignore[attr-defined]
        make: Any = collections.namedtuple  # (mypy takes only literal arguments to it)
        made = make(klass.__name__, fields, defaults=tuple(defaults.values()) or None,
                    module=klass.__module__)
        for name in _NAMEDTUPLE_METHODS:  # (as they are stored: __new__ a staticmethod)
            if name in made.__dict__:  # (__replace__: Python 3.13 on)
                setattr(klass, name, made.__dict__[name])
