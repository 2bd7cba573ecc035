"""Each typed script call (dal/lua_calls.py) declares what its script reads: as many keys
and fixed arguments as the highest ``KEYS[n]`` and ``ARGV[n]`` its Lua text names, and the
items after them where the script starts reading them, in steps of ``ITEM``."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from tierq.core.ordering import Place, place
from tierq.dal.command_limit import CALL_ARGS
from tierq.dal.lua_calls import CALLS, LeaseExtend, LuaCall, PushReady
from tierq.dal.warm_tier import PUSH_CALL_BYTES, PUSH_CALL_TASKS, SCRIPTS, PairKeys
from tierq.logic.admission import push_chunks

LUA = resources.files("tierq.dal").joinpath("lua")


def body(name: str) -> str:
    """The script's own code (its comments and included pieces left out)."""
    text = LUA.joinpath(f"{name}.lua").read_text("utf-8")
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def highest(code: str, table: str) -> int:
    return max((int(n) for n in re.findall(rf"\b{table}\[(\d+)\]", code)), default=0)


def reads_items_from(code: str, start: int, width: int, grouped: bool = False) -> bool:
    """Whether the script reads its items from ``ARGV[start]`` on, ``width`` at a time
    (``grouped``: groups of their own length)."""
    if grouped:
        return re.search(rf"pool_groups\(ARGV, {start}\)|local i = {start}\s+while i <= #ARGV",
                         code) is not None
    step = "" if width == 1 else rf",\s*{width}"
    if re.search(rf"for \w+ = {start}, #ARGV{step}\s+do", code):
        return True
    if re.search(rf"\(#ARGV - {start - 1}\) / {width}\b", code):
        return True
    # handed to a shared piece from there, one item an argument (lua/lease_marks.lua)
    if width == 1 and re.search(rf"\bARGV, {start}\)", code):
        return True
    # the whole ARGV as the items (no fixed argument)
    return start == 1 and width == 1 and re.search(r"ipairs\(ARGV\)|[(,]\s*ARGV\s*\)", code) \
        is not None


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.SCRIPT)
def test_a_call_declares_the_keys_and_arguments_its_script_reads(call: type[LuaCall[object]]):
    assert call.SCRIPT in SCRIPTS
    code = body(call.SCRIPT)
    assert highest(code, "KEYS") == len(call.KEYS) + len(call.EXTRA_KEYS)
    fixed = len(call.ARGS) + len(call.EXTRA_ARGS)
    assert highest(code, "ARGV") == fixed
    if call.ITEM:
        assert reads_items_from(code, fixed + 1, len(call.ITEM), call.GROUPED), (
            f"{call.SCRIPT}.lua does not read items of {len(call.ITEM)} from ARGV[{fixed + 1}]")
    else:
        assert "#ARGV" not in code


@pytest.mark.parametrize("call", [c for c in CALLS if c.ITEM], ids=lambda c: c.SCRIPT)
def test_a_bulk_call_fits_the_argument_limit(call: type[LuaCall[object]]):
    fixed = 3 + len(call.KEYS) + len(call.EXTRA_KEYS) + len(call.ARGS) + len(call.EXTRA_ARGS)
    n = call.items_per_call()
    width = 1 if call.GROUPED else len(call.ITEM)
    assert fixed + n * width <= CALL_ARGS < fixed + (n + 1) * width


def test_a_call_refuses_an_item_of_the_wrong_width():
    with pytest.raises(ValueError, match="member, extend_ms"):
        LeaseExtend(PairKeys.of("q", "t"), 0, [("m",)]).build()


def test_an_admission_pushes_at_most_its_count_and_bytes_a_call():
    """push_chunks: 500 tasks or 512 KiB of blobs a push_ready call, whichever comes first,
    and a task larger than the bound alone; every call within the argument limit."""
    assert PushReady.items_per_call() >= PUSH_CALL_TASKS

    def items(sizes: list[int]) -> list[tuple[str, Place, bytes]]:
        return [(str(i), place(0, i + 1, str(i)), b"x" * n) for i, n in enumerate(sizes)]

    assert list(push_chunks(items([100] * 1200))) == [(0, 500), (500, 1000), (1000, 1200)]
    assert list(push_chunks(items([200_000] * 5))) == [(0, 2), (2, 4), (4, 5)]
    assert list(push_chunks(items([10, 2 * PUSH_CALL_BYTES, 10]))) == [(0, 1), (1, 2), (2, 3)]
    assert list(push_chunks(items([PUSH_CALL_BYTES // 2] * 2 + [1]))) == [(0, 2), (2, 3)]
    assert list(push_chunks([])) == []
    # at the bounds: one call (its count or its bytes just reached), then two
    assert list(push_chunks(items([100] * 500))) == [(0, 500)]
    assert list(push_chunks(items([100] * 501))) == [(0, 500), (500, 501)]
    assert list(push_chunks(items([PUSH_CALL_BYTES // 2] * 2))) == [(0, 2)]
    assert list(push_chunks(items([PUSH_CALL_BYTES // 2] * 2 + [0]))) == [(0, 3)]
    assert list(push_chunks(items([PUSH_CALL_BYTES // 2 + 1] * 2))) == [(0, 1), (1, 2)]
    assert list(push_chunks(items([2 * PUSH_CALL_BYTES]))) == [(0, 1)]


def test_a_pairs_keys_are_kept_and_the_same_as_built() -> None:
    from tierq.dal.warm_tier import PAIR_KEYS_KEPT, _make_pair_keys

    keys = PairKeys.of("q", "t")
    assert PairKeys.of("q", "t") is keys  # (kept: not built again)
    assert keys == _make_pair_keys(PairKeys, "q", "t")
    assert keys.ready == "tq:{q|t}:ready" and PairKeys.of("q", "u").ready == "tq:{q|u}:ready"
    for i in range(PAIR_KEYS_KEPT):  # (bounded: the least recently used goes first)
        PairKeys.of("q", f"t{i}")
    assert PairKeys.of("q", "t") is not keys and PairKeys.of("q", "t") == keys
