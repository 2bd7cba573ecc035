"""Where Valkey's time goes in a worker's loop, script by script: one process enqueues 500
at a time and claims and acks plain tasks, and the server's slow log (every command logged
with its own duration) says which script took what, per task.

    .venv/bin/python -m bench.valkey_loop                  # claims of 10, 100 and 400
    .venv/bin/python -m bench.valkey_loop --claims 10      # one size

A fresh database and Valkey (a given server must take ``CONFIG SET``; its slow-log settings
are put back at the end). For each claim size, ``--tasks`` tasks of one (queue, tenant) go
through the engine's default loop (enqueue 500, then claim that many and ack each claim as
it comes) once to warm up and ``--repeat`` times measured. Per task:

| column          | what                                                             |
| --------------- | ---------------------------------------------------------------- |
| a script's name | its EVALSHAs' own time (the script's file, lua/<name>.lua)       |
| other commands  | the top-level commands that are not scripts (pipelined reads)    |
| command time    | the sum: what Valkey's clock says its commands took              |
| server CPU      | ``INFO cpu`` before and after: the commands, the network and the |
|                 | event loop                                                       |

The slow log also lists the commands a script calls, each on its own line: they are in
their script's time, and are counted only as how many a task costs (``inner calls``). What
a script's call costs whatever it does (its keys, its arguments, defining the pieces it
includes: lua/README.md) is the gap between its time and its commands' own. The last line
is ``valkey_us_per_task_claims_of_<smallest>=X`` (command time), after one per other size.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import redis

from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import add_store_arguments, machine_info, opened_stores
from bench.valkey_commands import script_names, slowlog_reset

QUEUE = "loop"
ENQUEUE = 500  # tasks per enqueue (the largest request)
OTHER = "other commands"
COMMAND_TIME = "command time"
SERVER_CPU = "server CPU"
INNER = "scripts' commands"
# The slow log's length while measuring: every command of a pass, scripts' inner ones too.
SLOWLOG_LEN = 1_000_000


def server_cpu_us(client: redis.Redis) -> float:
    """The server's CPU so far (user and system), µs."""
    cpu = client.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


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


# The client a script's own commands are logged under in the slow log (Valkey's Lua client).
SCRIPT_CLIENT = b"?:0"


def split_slowlog(entries: list[Any], names: dict[str, str]
                  ) -> tuple[dict[str, list[float]], float, int]:
    """The slow log of a pass (newest first, as SLOWLOG GET gives it), split: each script's
    [calls, time, its own commands' time] (µs; a script's commands are logged under
    SCRIPT_CLIENT just before it), the other top-level commands' time, and how many
    commands the scripts called."""
    scripts: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    other = 0.0
    inner = 0.0  # (the commands of the script logged next)
    inner_calls = 0
    for entry in reversed(entries):
        args, took = entry[3], float(entry[2])
        if not args:
            continue
        if len(entry) > 4 and entry[4] == SCRIPT_CLIENT:
            inner += took
            inner_calls += 1
            continue
        name = bytes(args[0]).upper()
        if name in (b"EVALSHA", b"EVAL"):
            script = scripts[names.get(bytes(args[1]).decode(), "eval")]
            script[0] += 1
            script[1] += took
            script[2] += inner
        elif name not in (b"SLOWLOG", b"CONFIG", b"INFO"):
            other += took
        inner = 0.0
    return dict(scripts), other, inner_calls


def measure(tq: Any, client: redis.Redis, names: dict[str, str], tasks: int, claim: int,
            repeat: int) -> dict[str, Any]:
    """One claim size: medians over ``repeat`` passes of µs (or calls) a task, each script's
    time and its commands' share, the other commands' time, and the server's CPU."""
    one_pass(tq, tasks, claim)  # (warm: scripts loaded, pair made)
    runs: list[dict[str, float]] = []
    for r in range(repeat):
        slowlog_reset(client)
        cpu = server_cpu_us(client)
        one_pass(tq, tasks, claim)
        cpu = server_cpu_us(client) - cpu
        scripts, other, inner_calls = split_slowlog(
            client.execute_command("SLOWLOG", "GET", -1), names)
        run: dict[str, float] = {}
        for name, (calls, took, own_commands) in scripts.items():
            run[f"{name}"] = took / tasks
            run[f"{name} commands"] = own_commands / tasks
            run[f"{name} calls"] = calls / tasks
        run[OTHER] = other / tasks
        run[COMMAND_TIME] = (sum(s[1] for s in scripts.values()) + other) / tasks
        run[SERVER_CPU] = cpu / tasks
        run[INNER] = inner_calls / tasks
        runs.append(run)
        say(f"  claims of {claim}: pass {r + 1}/{repeat}: command time "
            f"{run[COMMAND_TIME]:.1f} µs a task, server CPU {run[SERVER_CPU]:.1f}")
    keys = sorted({k for run in runs for k in run})
    return {k: statistics.median([run.get(k, 0.0) for run in runs]) for k in keys}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.valkey_loop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, nargs="+", default=[10, 100, 400],
                        help="claim sizes (10 100 400)")
    parser.add_argument("--tasks", type=int, default=5000, help="tasks a pass (5000)")
    parser.add_argument("--repeat", type=int, default=3, help="measured passes (3)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.repeat < 1 or any(c < 1 for c in args.claims):
        parser.error("--tasks, --repeat and --claims must be positive")
    return run(args)


def run(args: argparse.Namespace) -> int:
    from tierq import Tierq
    from tierq.config import Settings
    from tierq.dal.migrate import migrate

    results: dict[int, dict[str, float]] = {}
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        url = stores.fresh_database("valkey_loop")
        migrate(url)
        stores.clear_valkey()
        client = redis.Redis.from_url(stores.valkey_url)
        kept = _slowlog_settings(client)
        tq = Tierq(settings=Settings(database_url=url, valkey_url=stores.valkey_url))
        try:
            names = script_names(tq)
            client.config_set("slowlog-max-len", SLOWLOG_LEN)
            client.config_set("slowlog-log-slower-than", 0)
            for claim in args.claims:
                results[claim] = measure(tq, client, names, args.tasks, claim, args.repeat)
        finally:
            slowlog_reset(client)
            for name, value in kept.items():
                client.config_set(name, value)
            tq.close()
            client.close()
    _report(results, args)
    write_json(args.json, {"machine": info, "tasks": args.tasks, "repeat": args.repeat,
                           "per_task": {str(c): r for c, r in results.items()}})
    smallest = min(results)
    print_figures(*[f"valkey_us_per_task_claims_of_{c}={results[c][COMMAND_TIME]:.1f}"
                    for c in sorted(results, reverse=True) if c != smallest],
                  f"valkey_us_per_task_claims_of_{smallest}="
                  f"{results[smallest][COMMAND_TIME]:.1f}")
    return 0


def _slowlog_settings(client: redis.Redis) -> dict[str, str]:
    """The slow-log settings to put back at the end."""
    found: dict[str, str] = {}
    for name in ("slowlog-max-len", "slowlog-log-slower-than"):
        for key, value in client.config_get(name).items():
            found[str(key)] = str(value)
    return found


def _scripts(results: dict[int, dict[str, float]]) -> list[str]:
    """The scripts measured, the costliest first."""
    names = {k for r in results.values() for k in r
             if k not in (OTHER, COMMAND_TIME, SERVER_CPU, INNER)
             and not k.endswith((" commands", " calls"))}
    return sorted(names, key=lambda n: -max(r.get(n, 0.0) for r in results.values()))


def _report(results: dict[int, dict[str, float]], args: argparse.Namespace) -> None:
    scripts = _scripts(results)
    say("")
    say(f"Valkey µs a task (command time, medians of {args.repeat} passes of {args.tasks:,} "
        f"tasks, enqueues of {ENQUEUE}); a script's cell: its time (its own commands' "
        "share), and its calls a task")
    rows = []
    for claim, r in results.items():
        rows.append([str(claim), *(
            f"{r.get(n, 0.0):.2f} ({r.get(n + ' commands', 0.0):.2f}) "
            f"x{r.get(n + ' calls', 0.0):.3f}" for n in scripts),
            f"{r[OTHER]:.2f}", f"{r[COMMAND_TIME]:.1f}", f"{r[SERVER_CPU]:.1f}",
            f"{r[INNER]:.1f}"])
    print_table(["claims of", *scripts, OTHER, COMMAND_TIME, SERVER_CPU, INNER], rows)
    say("what a script's call costs beyond its commands (µs a call, time less its commands' "
        "over its calls): " + "; ".join(
            f"claims of {claim}: " + ", ".join(
                f"{n} {(r[n] - r[n + ' commands']) / r[n + ' calls']:.1f}"
                for n in scripts if r.get(n + " calls"))
            for claim, r in results.items()))


if __name__ == "__main__":
    raise SystemExit(main())
