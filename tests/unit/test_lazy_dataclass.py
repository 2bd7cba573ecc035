"""``tierq.core.lazy.lazy_dataclass``: nothing generated until the first instance, then
the dataclass ``@dataclass(frozen=True)`` makes, once, even from several threads."""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any, ClassVar

import pytest

from tierq.core.lazy import lazy_dataclass


def make_classes() -> tuple[Any, Any]:
    """A lazy base and a lazy subclass, fresh for each test (generation happens once)."""

    @lazy_dataclass(frozen=True)
    class Base:
        KIND: ClassVar[str] = "base"
        a: int
        b: str = "b"

        def twice(self) -> int:
            return 2 * self.a

    @lazy_dataclass(frozen=True)
    class Child(Base):
        c: tuple[int, ...] = ()

    return Base, Child


def test_nothing_is_generated_before_the_first_instance() -> None:
    base, child = make_classes()
    assert not dataclasses.is_dataclass(base) and not dataclasses.is_dataclass(child)
    assert "__repr__" not in base.__dict__ and "__eq__" not in base.__dict__


def test_the_first_instance_makes_the_lazy_dataclass() -> None:
    base, _ = make_classes()
    one = base(1)
    assert dataclasses.is_dataclass(base)
    assert [f.name for f in dataclasses.fields(base)] == ["a", "b"]
    assert repr(one) == "make_classes.<locals>.Base(a=1, b='b')"
    assert one == base(1) and one != base(2) and hash(one) == hash(base(1))
    assert one.twice() == 2 and base.KIND == "base"
    assert dataclasses.replace(one, b="x") == base(1, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.a = 5
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'a'"):
        base()


def test_a_subclass_first_generates_its_bases() -> None:
    base, child = make_classes()
    made = child(1, c=(2,))  # the base never had an instance of its own
    assert [f.name for f in dataclasses.fields(child)] == ["a", "b", "c"]
    assert made == child(1, "b", (2,)) and made.twice() == 2
    assert base(3) == base(3) and dataclasses.is_dataclass(base)


def test_a_plain_subclass_with_its_own_init_reaches_the_generated_one() -> None:
    base, _ = make_classes()

    class Doubled(base):  # type: ignore[misc]  # (base is a lazy dataclass made in a function)
        def __init__(self, a: int) -> None:
            super().__init__(2 * a, "doubled")

    made = Doubled(4)
    assert (made.a, made.b) == (8, "doubled") and made == Doubled(4)


def test_threads_racing_to_the_first_instance_generate_it_once() -> None:
    base, _ = make_classes()
    start = threading.Barrier(8)
    made: list[object] = []

    def first() -> None:
        start.wait()
        made.append(base(7))

    threads = [threading.Thread(target=first) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [base(7)] * 8
    assert base.__init__.__qualname__.endswith("Base.__init__")  # the generated one


def test_an_instance_made_while_another_thread_generates_the_class_is_whole() -> None:
    """A thread that makes an instance while another generates the class's methods gets the
    generated ``__init__`` (or waits for it), never ``object``'s: the class has an
    ``__init__`` at every moment. Threads switch every microsecond here, so that some land
    inside the generation of some of the 60 classes."""
    errors: list[BaseException] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(60):
            base, _child = make_classes()
            start = threading.Barrier(4)

            def first(base: Any = base, start: threading.Barrier = start) -> None:
                start.wait()
                try:
                    assert base(7).a == 7
                except BaseException as exc:  # (reported below, with the others)
                    errors.append(exc)

            threads = [threading.Thread(target=first) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_a_class_with_its_own_init_or_slots_is_refused() -> None:
    with pytest.raises(TypeError, match="no own __init__ or __slots__"):
        @lazy_dataclass(frozen=True)
        class Initialised:
            def __init__(self) -> None:
                pass
    with pytest.raises(TypeError, match="no own __init__ or __slots__"):
        @lazy_dataclass(frozen=True)
        class Slotted:
            __slots__ = ("a",)


def test_the_options_reach_the_dataclass() -> None:
    @lazy_dataclass(order=True, kw_only=True)
    class Ordered:
        a: int
        items: list[int] = dataclasses.field(default_factory=list)

    @lazy_dataclass
    class Plain:
        a: int

    first = Ordered(a=1)
    assert first < Ordered(a=2) and first.items == [] and first.items is not Ordered(a=1).items
    first.a = 3  # not frozen
    with pytest.raises(TypeError):
        Ordered(1)  # type: ignore[call-arg]  # keywords only
    plain = Plain(1)
    plain.a = 2
    assert plain == Plain(2) and Plain.__hash__ is None  # eq without frozen: unhashable
