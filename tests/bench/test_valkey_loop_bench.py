"""Smoke run of bench.valkey_loop (seconds): every task of each pass is claimed and acked (the
benchmark itself fails otherwise), the slow log is read back into the loop's scripts, and the
run ends with a figure a claim size. Numbers are not judged here."""

from __future__ import annotations

import re
from pathlib import Path

from bench.valkey_loop import SCRIPT_CLIENT, split_slowlog
from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_valkey_loop_bench_splits_the_loop_by_script(services: LocalServices,
                                                     tmp_path: Path) -> None:
    lines, result = run_bench("bench.valkey_loop", services, tmp_path / "loop.json",
                              "--tasks", "200", "--repeat", "1", "--claims", "10", "50")
    assert re.fullmatch(r"valkey_us_per_task_claims_of_10=\d+\.\d", lines[-1]), lines[-1]
    assert re.fullmatch(r"valkey_us_per_task_claims_of_50=\d+\.\d", lines[-2]), lines[-2]
    for claim, calls in (("10", 0.1), ("50", 0.02)):
        per_task = result["per_task"][claim]
        # one claim and one drop a claim's tasks: the scripts are told apart by their sha
        assert per_task["claim calls"] == calls and per_task["lease_drop calls"] == calls
        assert 0 < per_task["claim commands"] < per_task["claim"]
        assert per_task["command time"] > per_task["claim"] + per_task["lease_drop"]
        assert per_task["server CPU"] > 0
    # (the slow-log entries restored by the benchmark: nothing is left logging every command)
    assert "valkey" in result["machine"]


def test_a_scripts_own_commands_go_to_the_script_logged_after_them() -> None:
    """Entries newest first, as SLOWLOG GET gives them: a script's commands (Lua's client)
    come just before it; a top-level command between two scripts is the others'."""
    entries = [
        [6, 0, 40, [b"EVALSHA", b"bbb", b"0"], b"127.0.0.1:1", b""],
        [5, 0, 7, [b"ZREM", b"k", b"m"], SCRIPT_CLIENT, b""],
        [4, 0, 3, [b"GET", b"x"], b"127.0.0.1:1", b""],
        [3, 0, 30, [b"EVALSHA", b"aaa", b"0"], b"127.0.0.1:1", b""],
        [2, 0, 5, [b"HGET", b"k", b"f"], SCRIPT_CLIENT, b""],
        [1, 0, 4, [b"HSET", b"k", b"f", b"v"], SCRIPT_CLIENT, b""],
        [0, 0, 9, [b"SLOWLOG", b"RESET"], b"127.0.0.1:1", b""],
    ]
    scripts, other, inner = split_slowlog(entries, {"aaa": "claim", "bbb": "lease_drop"})
    assert scripts == {"claim": [1, 30.0, 9.0], "lease_drop": [1, 40.0, 7.0]}
    assert other == 3.0 and inner == 3
