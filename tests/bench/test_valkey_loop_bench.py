"""Smoke run of bench.valkey_loop (seconds): every task of each pass is claimed and acked (the
benchmark itself fails otherwise), the slow log is read back into the loop's scripts, the
server's slow-log settings are put back, and the run ends with a figure a claim size. Numbers
are not judged here; the slow log's split and the fit are checked on given figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from bench.valkey_loop import SCRIPT_CLIENT, Pass, fitted, log_cost_of, per_task, split_slowlog
from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def _slowlog_settings(url: str) -> dict[str, str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        return {**client.config_get("slowlog-max-len"),
                **client.config_get("slowlog-log-slower-than")}
    finally:
        client.close()


def test_valkey_loop_bench_splits_the_loop_by_script(services: LocalServices,
                                                     tmp_path: Path) -> None:
    before = _slowlog_settings(services.valkey.url)
    lines, result = run_bench("bench.valkey_loop", services, tmp_path / "loop.json",
                              "--tasks", "200", "--repeat", "1", "--claims", "10", "50")
    assert re.fullmatch(r"valkey_us_per_task_claims_of_10=\d+\.\d", lines[-1]), lines[-1]
    assert re.fullmatch(r"valkey_us_per_task_claims_of_50=\d+\.\d", lines[-2]), lines[-2]
    for claim, calls in (("10", 0.1), ("50", 0.02)):
        per_task = result["per_task"][claim]
        # one claim and one drop a claim's tasks: the scripts are told apart by their sha
        assert per_task["claim calls"] == pytest.approx(calls)
        assert per_task["lease_drop calls"] == pytest.approx(calls)
        assert 0 < per_task["claim commands"] < per_task["claim"]
        assert per_task["command time"] > 0 and per_task["server CPU"] > 0
    assert "claim" in result["fitted"] and "lease_drop" in result["fitted"]
    assert _slowlog_settings(services.valkey.url) == before  # (put back)


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
    assert scripts == {"claim": [1, 30.0, 9.0, 2], "lease_drop": [1, 40.0, 7.0, 1]}
    assert other == 3.0 and inner == 3


def test_the_fit_splits_a_scripts_own_time_into_a_call_and_a_task() -> None:
    """50 µs a call and 1 a task beyond 2 µs a task of commands: at 0.1 calls a task (claims
    of 10) 8 µs a task in all, at 0.004 (claims of 400: two calls a 500) 3.2."""
    results = {
        10: {"claim": 8.0, "claim commands": 2.0, "claim calls": 0.1},
        400: {"claim": 3.2, "claim commands": 2.0, "claim calls": 0.004},
    }
    ((name, (per_call, per_task)),) = fitted(results).items()
    assert name == "claim"
    assert per_call == pytest.approx(50.0) and per_task == pytest.approx(1.0)
    assert fitted({10: results[10]}) == {}


def test_the_logging_cost_is_one_figure_for_the_server_taken_off_every_size() -> None:
    """Logged passes 30 and 2 µs slower than unlogged ones over 100 and 20 commands: 0.27
    µs a command for both sizes, not 0.30 for one and 0.10 for the other."""
    small = Pass({"claim": [10, 1000.0, 200.0, 100]}, 0.0, 100, 1030.0, 1000.0, 2000.0)
    large = Pass({"claim": [1, 500.0, 100.0, 20]}, 0.0, 20, 502.0, 500.0, 900.0)
    measured = {10: [small], 400: [large]}
    assert log_cost_of(measured) == pytest.approx(32 / 120)
    results = per_task(measured, 100)
    assert results[10]["claim"] == pytest.approx((1000 - 100 * 32 / 120) / 100)
    assert results[400]["claim"] == pytest.approx((500 - 20 * 32 / 120) / 100)
    assert results[10]["command time"] == pytest.approx(10.0)
