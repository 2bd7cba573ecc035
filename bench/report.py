"""How the benchmarks print: progress lines, figures, tables, the machine and the JSON file.

Standard library only: the peers' driver (bench/peers/driver.py) prints with it too, in an
environment without tierq.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def say(message: str) -> None:
    """One line of progress on stdout, flushed at once."""
    print(message, flush=True)


def load_average() -> str:
    """The 1/5/15-minute load averages: how busy the machine was besides the benchmark."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def print_machine(info: dict[str, str]) -> None:
    say("machine:")
    for key, value in info.items():
        say(f"  {key:<9} {value}")


def fmt_rate(value: float | None) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return f"{value:,.0f}"


def fmt_ms(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    return f"{seconds * 1000:.1f}"


def fmt_per_task(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def fmt_cpu(per_task: dict[str, float | None]) -> str:
    """client/postgres/valkey CPU microseconds per task."""
    return "/".join("-" if v is None else f"{v:.0f}" for v in per_task.values())


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1024
    return f"{n:,.1f} GiB"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    say("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(
        headers, widths, strict=True))))
    say("  ".join("-" * w for w in widths))
    for row in rows:
        say("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(
            row, widths, strict=True))))


def write_json(path: Path | None, results: dict[str, Any]) -> None:
    """The results as JSON at ``path`` (``--json``), when one was given."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))


def print_figures(*lines: str) -> None:
    """A benchmark's closing lines: the load average at the end, then its figures (the last
    line is the one callers read)."""
    say(f"load average at the end: {load_average()}")
    for line in lines:
        say(line)
