"""Where Valkey's time goes in a worker's loop, script by script: one process enqueues 500
at a time and claims and acks plain tasks, and the server's slow log (every command logged
with its own duration) says which script took what, per task.

    .venv/bin/python -m bench.valkey_loop                  # claims of 10, 100 and 400
    .venv/bin/python -m bench.valkey_loop --claims 10      # one size

A fresh database and Valkey (private servers unless given; a given server must take
``CONFIG SET``, should serve nothing else meanwhile, since every client's commands are
logged, and loses its slow log's entries and its ``INFO`` statistics, reset at each pass:
its slow-log settings are put back at the end).
For each claim size, ``--tasks`` tasks of one (queue, tenant) go through the engine's
default loop (an enqueue of 500, then claims of that size, each acked as it comes, until
those 500 are done: claims of 400 are one of 400 and one of 100) once to warm up, then
``--repeat`` times two passes: one with the slow log at 0, one with it off. Per task:

| column           | what                                                            |
| ---------------- | --------------------------------------------------------------- |
| a script's name  | its EVALSHAs' time less what logging its own commands cost      |
|                  | (logged pass), with its own commands' share and its calls       |
| other commands   | the top-level commands that are not scripts (logged pass)       |
| command time     | the scripts' and the other commands' time, the log off          |
| server CPU       | ``INFO cpu`` before and after the pass with the log off: the    |
|                  | commands, the network and the event loop                        |
| log cost         | what the slow log adds to a script per command it calls, one    |
|                  | figure for the server: the scripts' time logged less unlogged   |
|                  | (``INFO commandstats``) over their commands, every pass of      |
|                  | every size summed                                               |

A script's commands are logged under Lua's client just before the script itself; they are
in its time. What a script costs beyond them (its keys and arguments, the pieces it
includes, each ``redis.call`` and its own Lua: lua/README.md) is fitted, from the smallest
and the largest claim size, to a cost a call and a cost a task. The last line is
``valkey_us_per_task_claims_of_<smallest>=X`` (command time), after one per other size.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import add_store_arguments, machine_info, opened_stores
from bench.valkey_commands import script_names, slowlog_reset, take_slowlog

QUEUE = "loop"
ENQUEUE = 500  # tasks per enqueue (the largest request)
OTHER = "other commands"
COMMAND_TIME = "command time"
SERVER_CPU = "server CPU"
INNER = "scripts' commands"
LOG_COST = "log cost"
# The columns that are not a script's (a script's own keys end in " commands" and " calls").
TOTALS = (OTHER, COMMAND_TIME, SERVER_CPU, INNER, LOG_COST)
# The slow log's length while measuring: every command of a pass, scripts' own ones too.
SLOWLOG_LEN = 1_000_000
# The client a script's own commands are logged under in the slow log (Valkey's Lua client).
SCRIPT_CLIENT = b"?:0"
# Commands of the benchmark itself, never the engine's.
OWN_COMMANDS = (b"SLOWLOG", b"CONFIG", b"INFO")


def server_cpu_us(client: redis.Redis) -> float:
    """The server's CPU so far (user and system), µs."""
    cpu = client.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def scripts_usec(client: redis.Redis) -> float:
    """The scripts' time since the last ``CONFIG RESETSTAT`` (their commands' included), µs."""
    stats = client.info("commandstats")
    return sum(float(stats.get(name, {}).get("usec", 0))
               for name in ("cmdstat_evalsha", "cmdstat_eval"))


def one_pass(tq: Any, tasks: int, claim: int) -> None:
    """``tasks`` tasks through the loop: an enqueue of ENQUEUE, then claims of ``claim``
    acked one by one until those are done."""
    left = tasks
    while left > 0:
        n = min(ENQUEUE, left)
        tq.enqueue(QUEUE, [{"payload": {"i": i}} for i in range(n)])
        done = 0
        while done < n:
            got = tq.claim(QUEUE, max=min(claim, n - done))
            if not got:
                raise RuntimeError(f"a claim found nothing with {n - done} tasks ready")
            acked = tq.ack(QUEUE, got)
            if len(acked.acked) != len(got):
                raise RuntimeError(f"an ack of {len(got)} acked {len(acked.acked)}")
            done += len(got)
        left -= n


def split_slowlog(entries: list[Any], names: dict[str, str]
                  ) -> tuple[dict[str, list[float]], float, int]:
    """The slow log of a pass (newest first, as SLOWLOG GET gives it), split: each script's
    [calls, time, its own commands' time, its own commands] (µs; a script's commands are
    logged under SCRIPT_CLIENT just before it), the other top-level commands' time, and
    how many commands the scripts called."""
    scripts: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0])
    other = 0.0
    inner, inner_n = 0.0, 0  # (the commands of the script logged next)
    inner_calls = 0
    for entry in reversed(entries):
        args, took = entry[3], float(entry[2])
        if not args:
            continue
        if len(entry) > 4 and entry[4] == SCRIPT_CLIENT:
            inner += took
            inner_n += 1
            inner_calls += 1
            continue
        name = bytes(args[0]).upper()
        if name in (b"EVALSHA", b"EVAL"):
            script = scripts[names.get(bytes(args[1]).decode(), "eval")]
            script[0] += 1
            script[1] += took
            script[2] += inner
            script[3] += inner_n
        elif name not in OWN_COMMANDS:
            other += took
        inner, inner_n = 0.0, 0
    return dict(scripts), other, inner_calls


@dataclass
class Pass:
    """One pair of passes of a claim size, as measured (µs and counts, not yet a task's)."""

    scripts: dict[str, list[float]]  # name -> [calls, time, own commands' time, own commands]
    other: float                     # the other top-level commands' time (logged pass)
    inner: int                       # the commands the scripts called (logged pass)
    logged: float                    # the scripts' time, logged pass (INFO commandstats)
    unlogged: float                  # the same, the log off
    cpu: float                       # the server's CPU, the log off


def logged_pass(tq: Any, client: redis.Redis, names: dict[str, str], tasks: int,
                claim: int) -> tuple[dict[str, list[float]], float, int, float]:
    """A pass with every command logged: ``split_slowlog``'s parts and the scripts' time
    as ``INFO commandstats`` counts it."""
    client.config_set("slowlog-log-slower-than", 0)
    slowlog_reset(client)
    client.config_resetstat()
    one_pass(tq, tasks, claim)
    client.config_set("slowlog-log-slower-than", -1)
    entries = client.execute_command("SLOWLOG", "GET", -1)
    if len(entries) >= SLOWLOG_LEN:
        raise RuntimeError(f"the slow log filled up ({SLOWLOG_LEN:,} entries): the pass's "
                           "first commands are lost; run fewer --tasks")
    return (*split_slowlog(entries, names), scripts_usec(client))


def measure(tq: Any, client: redis.Redis, names: dict[str, str], tasks: int, claim: int,
            repeat: int) -> list[Pass]:
    """One claim size: ``repeat`` pairs of passes, one logged, one with the log off."""
    one_pass(tq, tasks, claim)  # (warm: scripts loaded, pair made)
    passes: list[Pass] = []
    for r in range(repeat):
        scripts, other, inner, logged = logged_pass(tq, client, names, tasks, claim)
        client.config_resetstat()
        cpu = server_cpu_us(client)
        one_pass(tq, tasks, claim)  # (the log off)
        cpu = server_cpu_us(client) - cpu
        passes.append(Pass(scripts, other, inner, logged, scripts_usec(client), cpu))
        say(f"  claims of {claim}: pass {r + 1}/{repeat}: command time "
            f"{(passes[-1].unlogged + other) / tasks:.1f} µs a task, server CPU "
            f"{cpu / tasks:.1f}")
    return passes


def log_cost_of(measured: dict[int, list[Pass]]) -> float:
    """What logging adds to a script per command it calls, µs: one figure for the server,
    from every pass of every size (a pass's own difference is within its spread)."""
    added = sum(max(0.0, p.logged - p.unlogged) for ps in measured.values() for p in ps)
    return added / max(1, sum(p.inner for ps in measured.values() for p in ps))


def per_task(measured: dict[int, list[Pass]], tasks: int) -> dict[int, dict[str, float]]:
    """Each claim size's medians of µs (or calls) a task, each pass's figures derived first:
    a script's time less its logging (``log_cost_of``), its commands' time and its calls;
    the other commands' time; the command time and server CPU with the log off."""
    log_cost = log_cost_of(measured)
    out: dict[int, dict[str, float]] = {}
    for claim, passes in measured.items():
        runs: list[dict[str, float]] = []
        for p in passes:
            run: dict[str, float] = {}
            for name, (calls, took, own, own_n) in p.scripts.items():
                run[name] = (took - own_n * log_cost) / tasks
                run[f"{name} commands"] = own / tasks
                run[f"{name} calls"] = calls / tasks
            run[OTHER] = p.other / tasks
            run[COMMAND_TIME] = (p.unlogged + p.other) / tasks
            run[SERVER_CPU] = p.cpu / tasks
            run[INNER] = p.inner / tasks
            run[LOG_COST] = log_cost
            runs.append(run)
        keys = sorted({k for run in runs for k in run})
        out[claim] = {k: statistics.median([run.get(k, 0.0) for run in runs]) for k in keys}
    return out


def fitted(results: dict[int, dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Each script's time beyond its commands as (µs a call, µs a task), from the smallest
    and the largest claim size: own time a task = a call's cost * calls a task + a task's
    cost. Empty with one claim size."""
    if len(results) < 2:
        return {}
    small, large = results[min(results)], results[max(results)]
    out: dict[str, tuple[float, float]] = {}
    for name in _scripts(results):
        calls_small, calls_large = small.get(f"{name} calls", 0.0), large.get(f"{name} calls",
                                                                             0.0)
        if calls_small <= calls_large:
            continue  # (not called once a claim: no cost a call to tell apart)
        own_small = small[name] - small[f"{name} commands"]
        own_large = large[name] - large[f"{name} commands"]
        per_call = (own_small - own_large) / (calls_small - calls_large)
        out[name] = (per_call, own_large - per_call * calls_large)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.valkey_loop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, nargs="+", default=[10, 100, 400],
                        help="claim sizes (10 100 400)")
    parser.add_argument("--tasks", type=int, default=5000, help="tasks a pass (5000)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="measured pairs of passes (3)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.repeat < 1 or any(c < 1 for c in args.claims):
        parser.error("--tasks, --repeat and --claims must be positive")
    return run(args)


def run(args: argparse.Namespace) -> int:
    from tierq import Tierq
    from tierq.config import Settings

    measured: dict[int, list[Pass]] = {}
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        url = stores.fresh_tierq("valkey_loop")
        client = redis.Redis.from_url(stores.valkey_url)
        kept = take_slowlog(client, SLOWLOG_LEN)
        tq = Tierq(settings=Settings(database_url=url, valkey_url=stores.valkey_url))
        try:
            names = script_names(tq)
            for claim in dict.fromkeys(args.claims):
                measured[claim] = measure(tq, client, names, args.tasks, claim, args.repeat)
        finally:
            tq.close()
            with contextlib.suppress(redis.RedisError):  # (a server gone: the error is above)
                slowlog_reset(client)
                for name, value in kept.items():
                    client.config_set(name, value)
            client.close()
    results = per_task(measured, args.tasks)
    fits = fitted(results)
    _report(results, fits, args)
    write_json(args.json, {"machine": info, "tasks": args.tasks, "repeat": args.repeat,
                           "per_task": {str(c): r for c, r in results.items()},
                           "fitted": {n: {"us_a_call": c, "us_a_task": t}
                                      for n, (c, t) in fits.items()}})
    smallest = min(results)
    print_figures(*[f"valkey_us_per_task_claims_of_{c}={results[c][COMMAND_TIME]:.1f}"
                    for c in sorted(results, reverse=True) if c != smallest],
                  f"valkey_us_per_task_claims_of_{smallest}="
                  f"{results[smallest][COMMAND_TIME]:.1f}")
    return 0


def _scripts(results: dict[int, dict[str, float]]) -> list[str]:
    """The scripts measured, the costliest first."""
    names = {k for r in results.values() for k in r
             if k not in TOTALS and not k.endswith((" commands", " calls"))}
    return sorted(names, key=lambda n: -max(r.get(n, 0.0) for r in results.values()))


def _report(results: dict[int, dict[str, float]], fits: dict[str, tuple[float, float]],
            args: argparse.Namespace) -> None:
    scripts = _scripts(results)
    say("")
    say(f"Valkey µs a task (medians of {args.repeat} pairs of passes of {args.tasks:,} "
        f"tasks, enqueues of {ENQUEUE}); a script's cell: its time less its logging, in "
        "brackets its own commands' share, then its calls a task")
    rows = []
    for claim, r in results.items():
        rows.append([str(claim), *(
            f"{r.get(n, 0.0):.2f} ({r.get(n + ' commands', 0.0):.2f}) "
            f"x{r.get(n + ' calls', 0.0):.3f}" for n in scripts),
            f"{r[OTHER]:.2f}", f"{r[COMMAND_TIME]:.1f}", f"{r[SERVER_CPU]:.1f}",
            f"{r[INNER]:.1f}", f"{r[LOG_COST]:.2f}"])
    print_table(["claims of", *scripts, OTHER, COMMAND_TIME, SERVER_CPU, INNER, LOG_COST],
                rows)
    if fits:
        say(f"each script beyond its own commands, fitted from claims of {min(results)} and "
            f"{max(results)}: " + "; ".join(
                f"{n} {c:.1f} µs a call + {t:.2f} a task" for n, (c, t) in fits.items()))


if __name__ == "__main__":
    raise SystemExit(main())
