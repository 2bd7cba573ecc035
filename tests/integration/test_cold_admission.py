"""An enqueue into a pair whose warm set cannot take its first task writes its rows cold at
once (lua/admission_begin.lua, logic/admission.begin): no row is inserted warm and then
rewritten cold (``mark_cold``), whatever this process remembers of the pair's mode, and
the pair's line keeps enqueue order across both tiers (guarantee 3)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pytest
import redis

from tests.integration.helpers import count_rows, count_state, drain, mode_of, ready_size
from tierq.dal.warm_tier import PairKeys
from tierq.engine import Tierq

PAD = "x" * 300  # a task's blob is then about 380 bytes


class MarkCold:
    """The ids each ``mark_cold`` statement of an engine rewrote (the real statement runs)."""

    def __init__(self) -> None:
        self.ids: list[str] = []


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Tierq], MarkCold]]:
    def watch(tq: Tierq) -> MarkCold:
        seen = MarkCold()
        real = tq.ctx.store.mark_cold

        def counted(ids: Sequence[str], *args: Any, **kwargs: Any) -> Any:
            seen.ids.extend(ids)
            return real(ids, *args, **kwargs)

        monkeypatch.setattr(tq.ctx.store, "mark_cold", counted)
        return seen

    yield watch


def versions(pg: psycopg.Connection[Any]) -> tuple[int, int]:
    """(tasks PostgreSQL holds, task versions written): rows and batch members alike. Since
    the tables' TRUNCATE (each test starts with one) an insert of a row adds one version
    and each update of it one more (left dead behind it): the line pointers used on each
    page of ``tierq_tasks``, summed; a batch row writes each member once (its places), and
    a member moved out is a row's insert more."""
    highest: dict[int, int] = {}
    for (ctid,) in pg.execute("SELECT ctid::text FROM tierq_tasks").fetchall():
        page, line = (int(part) for part in ctid.strip("()").split(","))
        highest[page] = max(highest.get(page, 0), line)
    members = pg.execute("SELECT coalesce(sum(tasks), 0) FROM tierq_batches").fetchone()
    assert members is not None
    return count_rows(pg), sum(highest.values()) + int(members[0])


# the statement a uniform batch admitted warm takes where the engine writes batch rows
ON_BATCH_ROWS = {"insert_tasks_uniform": "insert_batch"}


def insert_taken(tq: Tierq, statement: str) -> str:
    """The statement an enqueue of ``tq`` takes where it would take ``statement`` with a
    row per task: a uniform batch admitted warm is one batch row where ``tq`` writes them
    (``TIERQ_BATCH_ROWS``), so a race or a failure staged on its insert is staged there."""
    if tq.ctx.settings.batch_rows and tq.ctx.store.batch_rows_ready():
        return ON_BATCH_ROWS.get(statement, statement)
    return statement


def test_an_enqueue_into_a_full_warm_set_writes_its_rows_cold_at_once(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        marked: Callable[[Tierq], MarkCold]) -> None:
    producer = make_tq(warm_max=10)
    other = make_tq(warm_max=10)  # a second process: it saw the pair warm, then filled it
    assert [o.state for o in producer.enqueue("q", [{"payload": i} for i in range(3)])] \
        == ["warm"] * 3
    assert producer.ctx.modes[("q", "_")] == "warm"
    other.enqueue("q", [{"payload": i} for i in range(3, 10)])
    assert ready_size(valkey, "q") == 10 and mode_of(valkey, "q") == "cold"
    seen = marked(producer)
    out = producer.enqueue("q", [{"payload": i} for i in range(10, 15)])
    assert [o.state for o in out] == ["cold"] * 5
    assert seen.ids == []  # no row written warm and then marked cold
    assert versions(pg) == (15, 15)
    assert count_state(pg, "q", "cold") == 5 and ready_size(valkey, "q") == 10
    assert [t.payload for t in drain(producer, "q", batch=4)] == list(range(15))
    assert count_state(pg, "q", "cold") == 0


def test_a_warm_set_without_the_bytes_for_the_first_task_sends_the_batch_cold(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        marked: Callable[[Tierq], MarkCold]) -> None:
    tq = make_tq(warm_max=1000, warm_max_bytes=4096)
    seen = marked(tq)
    tq.enqueue("b", [{"payload": {"n": i, "pad": PAD}} for i in range(9)])
    assert mode_of(valkey, "b") == "warm" and ready_size(valkey, "b") == 9
    assert 2900 < tq.ctx.warm.ready_bytes("b", "_") < 3500
    out = tq.enqueue("b", [{"payload": {"n": i, "pad": PAD * 4}} for i in range(9, 12)])
    assert [o.state for o in out] == ["cold"] * 3
    assert seen.ids == [] and mode_of(valkey, "b") == "cold"
    assert versions(pg) == (12, 12)
    # later work waits behind the cold line, and the line keeps enqueue order
    assert tq.enqueue_one("b", {"n": 12}).state == "cold"
    assert [t.payload["n"] for t in drain(tq, "b", batch=2)] == list(range(13))


def test_a_batch_that_fits_in_part_still_fills_the_set_first(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        marked: Callable[[Tierq], MarkCold]) -> None:
    """The split a push makes is kept: the first tasks that fit go warm, the rest cold
    (the only case left where rows are marked cold after their insert, besides a race
    with another enqueue between this one's check and its push)."""
    tq = make_tq(warm_max=10)
    seen = marked(tq)
    out = tq.enqueue("p", [{"payload": i} for i in range(15)])
    assert [o.state for o in out] == ["warm"] * 10 + ["cold"] * 5
    assert len(seen.ids) == 5
    assert tq.enqueue_one("p", 15).state == "cold"
    assert len(seen.ids) == 5  # the next one went cold at once
    assert [t.payload for t in drain(tq, "p", batch=3)] == list(range(16))


def test_a_new_pair_and_an_empty_set_still_take_a_task_warm(
        make_tq: Callable[..., Tierq], valkey: redis.Redis,
        marked: Callable[[Tierq], MarkCold]) -> None:
    tq = make_tq(warm_max_bytes=1024)
    seen = marked(tq)
    # an empty warm set takes its first task whatever its size
    assert [o.state for o in tq.enqueue("big", [{"payload": "y" * 3000}])] == ["warm"]
    assert [o.state for o in tq.enqueue("big", [{"payload": "z"}])] == ["cold"]
    assert seen.ids == []
    assert [t.payload for t in drain(tq, "big")] == ["y" * 3000, "z"]
    tq.run_cold_to_warm()
    assert tq.enqueue_one("big", "w").state == "warm"


def test_a_batch_over_several_tenants_checks_each_pair(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        marked: Callable[[Tierq], MarkCold]) -> None:
    tq = make_tq(warm_max=4)
    tq.enqueue("t", [{"payload": i, "tenant": "full"} for i in range(4)])
    assert mode_of(valkey, "t", "full") == "cold"
    tq.ctx.modes[("t", "full")] = "warm"  # as a process that saw it last warm remembers it
    seen = marked(tq)
    out = tq.enqueue("t", [{"payload": i, "tenant": tenant}
                           for i in range(4, 8) for tenant in ("full", "room")])
    assert {(o.tenant, o.state) for o in out} == {("full", "cold"), ("room", "warm")}
    assert seen.ids == []
    assert versions(pg) == (12, 12)
    assert [t.payload for t in drain(tq, "t", tenant="full")] == list(range(8))


# each insert statement a batch may take: a uniform batch's, and the general one's (a task
# with other max_attempts than the rest)
INSERTS = [("insert_tasks_uniform", {}), ("insert_tasks_keyless", {"max_attempts": 9})]


@pytest.mark.parametrize(("statement", "last"), INSERTS)
def test_an_enqueue_that_found_room_is_pushed_though_others_filled_the_set_meanwhile(
        make_tq: Callable[..., Tierq], valkey: redis.Redis, pg: psycopg.Connection[Any],
        marked: Callable[[Tierq], MarkCold], monkeypatch: pytest.MonkeyPatch,
        statement: str, last: dict[str, Any]) -> None:
    """Between one enqueue's check and its push, another process enqueues twice: the room
    the first one found stays its own (its tasks count as coming), so the other's second
    batch goes cold at once and the first one's push is taken though the pair is cold by
    then. No row is marked cold, and each producer's tasks keep their order."""
    producer = make_tq(warm_max=10)
    other = make_tq(warm_max=10)
    producer.enqueue("r", [{"payload": ["p", i]} for i in range(4)])
    statement = insert_taken(producer, statement)
    real = getattr(producer.ctx.store, statement)
    outcomes: list[list[str]] = []

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not outcomes:  # (once) the other process enqueues twice before this insert
            for start in (0, 3):
                out = other.enqueue("r", [{"payload": ["o", i]} for i in range(start, start + 3)])
                outcomes.append([o.state for o in out])
        return real(*args, **kwargs)

    monkeypatch.setattr(producer.ctx.store, statement, meanwhile)
    seen = [marked(producer), marked(other)]
    out = producer.enqueue("r", [{"payload": ["p", i]} for i in range(4, 6)]
                           + [{"payload": ["p", 6], **last}])
    assert outcomes == [["warm"] * 3, ["cold"] * 3]
    assert [o.state for o in out] == ["warm"] * 3
    assert ready_size(valkey, "r") == 10 and mode_of(valkey, "r") == "cold"
    assert [s.ids for s in seen] == [[], []]
    assert versions(pg) == (13, 13)
    assert not [f for f in valkey.hkeys(PairKeys.of("r", "_").meta) if f.startswith(b"rsv:")]
    drained = [tuple(t.payload) for t in drain(producer, "r", batch=3)]
    for who, count in (("p", 7), ("o", 6)):
        assert [i for w, i in drained if w == who] == list(range(count))


@pytest.mark.parametrize(("statement", "last"), INSERTS)
def test_a_record_of_tasks_about_to_be_pushed_goes_when_the_insert_fails(
        make_tq: Callable[..., Tierq], valkey: redis.Redis,
        monkeypatch: pytest.MonkeyPatch, statement: str, last: dict[str, Any]) -> None:
    tq = make_tq(warm_max=10)
    tq.enqueue("f", [{"payload": i} for i in range(2)])

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the insert failed")

    monkeypatch.setattr(tq.ctx.store, insert_taken(tq, statement), failing)
    with pytest.raises(RuntimeError):
        tq.enqueue("f", [{"payload": i} for i in range(2, 9)] + [{"payload": 9, **last}])
    meta = PairKeys.of("f", "_").meta
    assert not [f for f in valkey.hkeys(meta) if f.startswith(b"rsv:")]
    monkeypatch.undo()
    # the room it had found is free again: a batch that fills it goes warm
    assert [o.state for o in tq.enqueue("f", [{"payload": i} for i in range(2, 10)])] \
        == ["warm"] * 8
