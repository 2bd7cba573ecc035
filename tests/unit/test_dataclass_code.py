"""Dataclasses built from stored code (``tierq.core.dataclass_code``) are the classes a
compile gives, and the store is used only when it is this Python's and holds the text."""

from __future__ import annotations

import dataclasses
import marshal
import sys
import threading
import types
from collections.abc import Iterator
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any

import pytest

from tierq.core import dataclass_code

# Every option that changes the generated methods; the test module's own
# `from __future__ import annotations` must not leak into their compile.
CLASSES = '''
import dataclasses
from dataclasses import dataclass, field

@dataclass
class Plain:
    """A class with defaults and a factory."""
    name: str
    count: int = 0
    tags: list[str] = field(default_factory=list)

@dataclass(frozen=True, order=True)
class Frozen:
    """A frozen, ordered class."""
    rank: int
    label: str = "x"

@dataclass(slots=True, kw_only=True)
class Slotted:
    """A class with slots and keyword-only fields."""
    left: float
    right: float = 1.5
'''

NAMES = ("Plain", "Frozen", "Slotted")


def define(module_name: str) -> types.ModuleType:
    """CLASSES run as a module of its own (dataclasses read the module of each class)."""
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    exec(compile(CLASSES, module_name, "exec", dont_inherit=True), module.__dict__)
    return module


@pytest.fixture
def modules() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        sys.modules.pop(name, None)


def methods(cls: type) -> dict[str, types.CodeType]:
    return {name: value.__code__ for name, value in vars(cls).items()
            if isinstance(value, types.FunctionType)}


def recorded(path: Path, modules: list[str]) -> int:
    """CLASSES defined while recording into ``path``; answers how many texts they made (one
    a class on Python 3.13, one a method before)."""
    modules.append("recorded_classes")
    misses = dataclass_code.counts()[1]
    with dataclass_code.recording(str(path)):
        define("recorded_classes")
    return dataclass_code.counts()[1] - misses


def test_classes_built_from_the_store_equal_those_compiled(
        tmp_path: Path, modules: list[str]) -> None:
    store = tmp_path / "dataclass_code.marshal"
    texts = recorded(store, modules)
    assert texts >= len(NAMES) and dataclass_code.held(str(store)) == texts
    modules += ["compiled_classes", "stored_classes"]
    compiled = define("compiled_classes")
    hits, misses = dataclass_code.counts()
    with dataclass_code.precompiled(str(store)):
        stored = define("stored_classes")
    assert dataclass_code.counts() == (hits + texts, misses)
    assert "exec" not in vars(dataclasses)
    for name in NAMES:
        ours, theirs = getattr(stored, name), getattr(compiled, name)
        assert methods(ours).keys() == methods(theirs).keys(), name
        for method, code in methods(ours).items():
            assert code == methods(theirs)[method], (name, method)
            # (annotations evaluated as the compiled class's: no __future__ flag leaked in)
            assert (getattr(ours, method).__annotations__
                    == getattr(theirs, method).__annotations__), (name, method)
    plain = stored.Plain("a")
    assert plain == stored.Plain("a", 0, []) and repr(plain) == "Plain(name='a', count=0, tags=[])"
    assert stored.Frozen(1) < stored.Frozen(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stored.Frozen(1).rank = 3  # type: ignore[misc]
    assert stored.Slotted(left=1.0).right == 1.5 and not hasattr(stored.Slotted(left=1.0),
                                                                  "__dict__")


def test_a_text_the_store_lacks_is_compiled_and_not_added(
        tmp_path: Path, modules: list[str]) -> None:
    store = tmp_path / "dataclass_code.marshal"
    texts = recorded(store, modules)
    before = store.read_bytes()
    modules.append("changed_classes")
    hits, misses = dataclass_code.counts()
    with dataclass_code.precompiled(str(store)):
        module = types.ModuleType("changed_classes")
        sys.modules["changed_classes"] = module
        exec(compile(CLASSES.replace("count: int", "total: int"), "changed_classes",
                     "exec", dont_inherit=True), module.__dict__)
    # the renamed field's class compiled (each of its texts naming the field), the rest found
    found, compiled = (now - then for now, then in zip(dataclass_code.counts(), (hits, misses),
                                                       strict=True))
    assert compiled >= 1 and found + compiled == texts
    assert module.Plain("a").total == 0
    assert store.read_bytes() == before


@pytest.mark.parametrize("content", [None, b"\x00\x00\r\n" + b"rest"],
                         ids=["absent", "another_python"])
def test_an_absent_or_foreign_store_sets_no_hook(tmp_path: Path, content: bytes | None,
                                                 modules: list[str]) -> None:
    store = tmp_path / "dataclass_code.marshal"
    if content is not None:
        store.write_bytes(content)
    modules.append("unhooked_classes")
    hits, misses = dataclass_code.counts()
    with dataclass_code.precompiled(str(store)):
        assert "exec" not in vars(dataclasses)
        define("unhooked_classes")
    assert dataclass_code.counts() == (hits, misses)


def test_a_block_inside_another_leaves_the_hook_to_the_outer_one(
        tmp_path: Path, modules: list[str]) -> None:
    store = tmp_path / "dataclass_code.marshal"
    recorded(store, modules)
    with dataclass_code.precompiled(str(store)):
        with dataclass_code.precompiled(str(store)):
            pass
        assert "exec" in vars(dataclasses)
    assert "exec" not in vars(dataclasses)


def test_a_failing_block_still_takes_the_hook_away(tmp_path: Path,
                                                   modules: list[str]) -> None:
    store = tmp_path / "dataclass_code.marshal"
    recorded(store, modules)
    with pytest.raises(RuntimeError), dataclass_code.precompiled(str(store)):
        raise RuntimeError("import failed")
    assert "exec" not in vars(dataclasses)


# The text dataclasses writes for one `x: int` field's __init__ (as of Python 3.13).
ONE_FIELD_TEXT = ("def __create_fn__(__dataclass_type_x__):\n"
                  " def __init__(self, x:__dataclass_type_x__):\n  self.x=x\n"
                  " return (__init__,)")


def test_a_text_compiled_without_a_store_takes_no_future_flag() -> None:
    """A thread that found the hook just as a block ended compiles without the store: as
    ``dataclasses`` would, not with this package's ``from __future__ import annotations``."""
    ours: dict[str, Any] = {}
    dataclass_code._exec(ONE_FIELD_TEXT, {}, ours)
    theirs: dict[str, Any] = {}
    exec(compile(ONE_FIELD_TEXT, "<string>", "exec", dont_inherit=True), {}, theirs)
    assert (ours["__create_fn__"](int)[0].__annotations__
            == theirs["__create_fn__"](int)[0].__annotations__ == {"x": int})


def truncated(data: bytes, share: float) -> bytes:
    return data[:int(len(data) * share)]


SPOILT = {
    "cut_in_half": (lambda data: truncated(data, 0.5), "unreadable"),
    "last_bytes_missing": (lambda data: truncated(data, 0.99), "unreadable"),
    "another_shape": (lambda _: MAGIC_NUMBER + marshal.dumps(["not", "a", "dict"]),
                      "holds no texts and code"),
}


@pytest.mark.parametrize("spoilt", sorted(SPOILT))
def test_a_spoilt_store_is_skipped_with_a_warning(
        tmp_path: Path, spoilt: str, modules: list[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """A cache, not a part of the function: a store that cannot be read leaves the classes
    compiled as usual rather than fail the cold start."""
    store = tmp_path / "dataclass_code.marshal"
    recorded(store, modules)
    spoil, warning = SPOILT[spoilt]
    store.write_bytes(spoil(store.read_bytes()))
    modules.append("after_spoiling")
    with dataclass_code.precompiled(str(store)):
        assert "exec" not in vars(dataclasses)
        module = define("after_spoiling")
    assert module.Plain("a").count == 0
    assert warning in caplog.text


def test_overlapping_blocks_of_two_threads_leave_no_hook_and_raise_nothing(
        tmp_path: Path, modules: list[str]) -> None:
    """The first block to open sets the hook, the last to close takes it away, whatever
    the order in which two threads open and close theirs."""
    store = tmp_path / "dataclass_code.marshal"
    recorded(store, modules)
    first_in, second_in, first_may_leave = (threading.Event() for _ in range(3))
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with dataclass_code.precompiled(str(store)):
                first_in.set()
                second_in.wait(10)
                first_may_leave.wait(10)
        except BaseException as exc:  # (reported by the test thread)
            errors.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with dataclass_code.precompiled(str(store)):
        second_in.set()
        first_may_leave.set()
        thread.join(10)  # the first block closes while this one is open
        assert "exec" in vars(dataclasses)
    assert not errors and "exec" not in vars(dataclasses)


def test_a_recording_inside_another_block_is_refused(tmp_path: Path,
                                                      modules: list[str]) -> None:
    store = tmp_path / "dataclass_code.marshal"
    recorded(store, modules)
    with (dataclass_code.precompiled(str(store)), pytest.raises(RuntimeError, match="recording"),
          dataclass_code.recording(str(tmp_path / "other.marshal"))):
        pass
    assert "exec" not in vars(dataclasses)
