"""Where a task's microseconds go (``python -m bench.vs_bare --breakdown``), for each system
of a shape, in its end-to-end phase:

* **CPU per task** of the client (split into the producer processes per task enqueued, the
  consumer processes per task acked, and the rest: the parent, where tierq's maintenance
  jobs run), of PostgreSQL and of Valkey; medians over the measured runs;
* **PostgreSQL's work per task**, medians over the measured runs:

  | figure        | from                                                               |
  | ------------- | ------------------------------------------------------------------ |
  | statements    | pg_stat_statements, top-level, of the system's database            |
  | commits       | ``pg_stat_database.xact_commit``                                   |
  | rows written  | tuples inserted + updated + deleted, ``pg_stat_database``          |
  | WAL bytes     | ``pg_current_wal_insert_lsn`` before and after (whole server)      |
  | WAL flushes   | ``pg_stat_wal.wal_sync`` (whole server)                            |

  The whole server's figures are, on a private server, the benchmark alone (and
  autovacuum). Then each statement of the median run: calls, rows, execution time
  (pg_stat_statements': wall time in the server, lock waits included) and WAL bytes per
  task;
* **the client's CPU by stage**, from one more run of each system whose first producer and
  first consumer are profiled with cProfile, timed by their main thread's CPU clock (so a
  process waiting on a socket or a sleep costs nothing). Each function's own time (not its
  callees') goes to one stage by ``RULES`` below. The first pattern that matches the
  function's place (``<module path>:<function>``, or cProfile's name of a built-in) wins.
  A function no pattern matches (``list.append``, ``len``, ``contextlib``, ...) is split
  between its callers in proportion to the time each call site spent in it, and takes their
  stages. The profiler's own overhead (per call) inflates every figure, Python-heavy stages
  most, so each stage is reported as its share of the profiled process's time and as that
  share of the role's CPU per task measured without a profiler (``≈ µs/task``).

Stages:

* **validation**: checking the caller's input (pydantic's validators of request models,
  tierq.models, the payload checks);
* **arguments**: turning validated input into statement parameters and script arguments
  (ids, scores, blobs, JSON encoding, psycopg's dumpers and query conversion, Redis
  command packing, tierq's data-access layer);
* **round trips**: the drivers' per-call machinery and the socket system calls (psycopg's
  cursors, generators and pool, libpq calls, redis-py's connection, tierq's call helpers);
* **replies**: turning what came back into Python (psycopg's loaders and rows, hiredis'
  parser, JSON decoding, UUIDs, result models: pydantic validators called other than to
  check input);
* **tierq logic**: tierq's own code otherwise (routing, tenants, leases, settings cache);
* **bench loop**: the benchmark's loop and shared counters, the sleeps after empty claims;
* **first calls**: one-time work on the clock (pydantic building a deferred model, regular
  expressions compiled, modules imported);
* **other**: time with no caller to inherit from.

``python -m bench.breakdown FILE.prof [--tasks N] [--top K]`` prints one profile's split with
the functions that weigh most in each stage (to check the rules against a profile).
"""

from __future__ import annotations

import argparse
import json
import pstats
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.measure import PG_KINDS, PG_ROLES, Measured, percentile
from bench.report import print_table, say
from bench.runs import SystemRun

VALIDATION = "validation"
ARGUMENTS = "arguments"
ROUND_TRIPS = "round trips"
REPLIES = "replies"
LOGIC = "tierq logic"
BENCH = "bench loop"
FIRST = "first calls"
OTHER = "other"
STAGES = (VALIDATION, ARGUMENTS, ROUND_TRIPS, REPLIES, LOGIC, BENCH, FIRST, OTHER)
MODEL = "model"  # a pydantic validation: validation when checking input, else replies

RULES: tuple[tuple[str, str], ...] = (
    # one-time work on the clock
    (FIRST, r"^pydantic/(_internal|plugin|deprecated)/"),
    (FIRST, r"^pydantic/type_adapter\.py:(?!validate_|dump_)"),
    (FIRST, r"^pydantic/main\.py:model_rebuild$"),
    (FIRST, r"^pydantic_core/core_schema\.py:"),
    (FIRST, r"^(re/_(parser|compiler|casefix)|sre_\w+|inspect|tokenize|ast|linecache"
            r"|dataclasses|typing|textwrap)\.py:(?!expand_template$)"),
    (FIRST, r"^(email|importlib)/|^<frozen importlib"),
    (FIRST, r"^~:<built-in method (marshal\.loads|posix\.\w+|builtins\.(compile|exec"
            r"|__build_class__)|_imp\.\w+|io\.open_code)>"),
    # pydantic validating (input or results: decided by the caller)
    (MODEL, r"^~:<method 'validate_\w+' of 'pydantic_core"),
    (MODEL, r"^pydantic/(type_adapter|main)\.py:(validate_\w+|model_validate\w*|__init__)$"),
    # the bare table's client: its lists of parameters, its calls
    (ARGUMENTS, r"^bench/systems/bare_table\.py:(bare_produce|<listcomp>)$"),
    (ROUND_TRIPS, r"^bench/systems/bare_table\.py:(claim|ack)$"),
    # the benchmark itself
    (BENCH, r"^bench/|^multiprocessing/"),
    (BENCH, r"^~:<method '\w+' of '_multiprocessing\.SemLock' objects>"),
    # tierq
    (REPLIES, r"^tierq/models/base\.py:made$"),  # (answers' models from tierq's own values)
    (VALIDATION, r"^tierq/models/"),
    (VALIDATION, r"^tierq/core/json_text\.py:"),
    (VALIDATION, r"^tierq/engine\.py:(_models|<genexpr>|<listcomp>)$"),
    (ARGUMENTS, r"^tierq/core/(ids|ordering)\.py:"),
    (ARGUMENTS, r"^tierq/logic/admission\.py:task_blob$"),
    (ARGUMENTS, r"^tierq/logic/enqueue\.py:(prepare|row_columns|_insert_round|<listcomp>"
                r"|<genexpr>)$"),
    (ARGUMENTS, r"^tierq/logic/leases\.py:(by_tenant|<listcomp>|<genexpr>)$"),
    (REPLIES, r"^tierq/logic/claim\.py:(_fields|models)$"),
    (ROUND_TRIPS, r"^tierq/dal/(direct_calls|postgres)\.py:"),
    (ROUND_TRIPS, r"^tierq/dal/store/base\.py:(_fetch|_rows|_execute)$"),
    (ARGUMENTS, r"^tierq/dal/"),
    (LOGIC, r"^tierq/"),
    # psycopg
    (ARGUMENTS, r"^psycopg/(_queries|_py_transformer)\.py:(?!load)"),
    (ARGUMENTS, r"^psycopg/(types/\w+|adapt|_adapters_map)\.py:(\w*dump\w*|quote|upgrade|get_key"
                r"|get_dumper\w*)$"),
    (REPLIES, r"^psycopg/(types/\w+|adapt|_adapters_map|_py_transformer)\.py:"
              r"(\w*load\w*|get_loader)$"),
    (REPLIES, r"^psycopg/(rows|_column)\.py:"),
    (REPLIES, r"^psycopg/\w+\.py:(fetch\w*|_make_row_maker|_check_result_for_fetch"
              r"|description)$"),
    (ARGUMENTS, r"^~:<method '\w*dump\w*' of 'psycopg_binary"),
    (REPLIES, r"^~:<method '\w*load\w*' of 'psycopg_binary"),
    (ROUND_TRIPS, r"^psycopg(_pool)?/|psycopg_binary"),
    # redis-py and hiredis
    (ARGUMENTS, r"^redis/.*:(pack_command|pack_commands|_pack\w*|encode)$"),
    (ARGUMENTS, r"hiredis\.hiredis\.pack_command"),
    (REPLIES, r"of 'hiredis\.Reader' objects"),
    (ROUND_TRIPS, r"^redis/"),
    # the system calls of a round trip
    (ROUND_TRIPS, r"of '_socket\.socket' objects|<built-in method (select|_socket)\.|poll"),
    # JSON, UUIDs, times
    (ARGUMENTS, r"<orjson\.dumps>|^json/encoder\.py:"),
    (REPLIES, r"<orjson\.loads>|^json/decoder\.py:|^uuid\.py:|fromtimestamp"),
)
_COMPILED = tuple((stage, re.compile(pattern)) for stage, pattern in RULES)
_INPUT_SIDE = (VALIDATION, FIRST, BENCH)  # a model built there stays there

Func = tuple[str, int, str]
_BENCH_ROOT = f"{Path(__file__).resolve().parent}/"


def place(func: Func) -> str:
    """``<module path>:<function>`` (``~:<name>`` for a built-in), the path cut after its
    root: site-packages, the standard library, or the checkout (``tierq/``, ``bench/``)."""
    file, _, name = func
    if file == "~":
        return f"~:{name}"
    for marker in ("site-packages/", "/shared/", "/lib/python3."):
        if marker in file:
            file = file.split(marker, 1)[1]
            if marker == "/lib/python3.":
                file = file.split("/", 1)[1] if "/" in file else file
            break
    else:
        if file.startswith(_BENCH_ROOT):
            file = "bench/" + file[len(_BENCH_ROOT):]
    return f"{file}:{name}"


def rule_of(func: Func) -> str | None:
    where = place(func)
    for stage, pattern in _COMPILED:
        if pattern.search(where):
            return stage
    return None


class StageSplit:
    """One profile's own times, each function's split between the stages. With the
    profiler's ``overhead`` per call (bench.phases.profiler_overhead), each function's own
    time is first lowered by what the profiler added: per call of it, and per call it made."""

    def __init__(self, stats: pstats.Stats, overhead: dict[str, float] | None = None) -> None:
        self.entries: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
        self._memo: dict[Func, dict[str, float]] = {}
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.functions: dict[str, dict[str, float]] = {s: {} for s in STAGES}
        self.raw_total = sum(e[2] for e in self.entries.values())
        own = self._corrected(overhead) if overhead else {
            f: e[2] for f, e in self.entries.items()}
        for func, tt in own.items():
            for stage, share in self.fractions(func, frozenset()).items():
                self.seconds[stage] += tt * share
                where = place(func)
                self.functions[stage][where] = self.functions[stage].get(where, 0.0) + tt * share
        self.total = sum(self.seconds.values())

    def _corrected(self, overhead: dict[str, float]) -> dict[Func, float]:
        def kind(func: Func) -> str:
            return "c" if func[0] == "~" else "py"

        made: dict[Func, float] = {}  # the profiler's time in each function's calls out
        for callee, (_cc, _nc, _tt, _ct, callers) in self.entries.items():
            cost = overhead[f"caller_{kind(callee)}"]
            for caller, (nc, *_rest) in callers.items():
                made[caller] = made.get(caller, 0.0) + nc * cost
        return {func: max(0.0, tt - nc * overhead[f"callee_{kind(func)}"] - made.get(func, 0.0))
                for func, (_cc, nc, tt, _ct, _callers) in self.entries.items()}

    def fractions(self, func: Func, visiting: frozenset[Func]) -> dict[str, float]:
        """What share of ``func``'s own time goes to each stage."""
        known = self._memo.get(func)
        if known is not None:
            return known
        stage = rule_of(func)
        if stage is not None and stage != MODEL:
            out = {stage: 1.0}
        else:
            out = self._inherited(func, visiting | {func})
            if stage == MODEL:
                folded: dict[str, float] = {}
                for s, share in out.items():
                    key = s if s in _INPUT_SIDE else REPLIES
                    folded[key] = folded.get(key, 0.0) + share
                out = folded
        if not visiting:  # a result reached through a cycle may be partial: not kept
            self._memo[func] = out
        return out

    def _inherited(self, func: Func, visiting: frozenset[Func]) -> dict[str, float]:
        callers = self.entries[func][4]
        weights = {c: v[2] for c, v in callers.items() if c not in visiting and c in self.entries}
        total = sum(weights.values())
        if total <= 0:  # no time measured per call site: split by calls
            weights = {c: float(v[0]) for c, v in callers.items()
                       if c not in visiting and c in self.entries}
            total = sum(weights.values())
        if total <= 0:
            return {OTHER: 1.0}
        out: dict[str, float] = {}
        for caller, weight in weights.items():
            for stage, share in self.fractions(caller, visiting).items():
                out[stage] = out.get(stage, 0.0) + share * weight / total
        return out

    def top(self, stage: str, k: int) -> list[tuple[str, float]]:
        return sorted(self.functions[stage].items(), key=lambda kv: kv[1], reverse=True)[:k]


def load(path: Path) -> StageSplit:
    """A profile written by bench.phases, with its overhead file when there is one."""
    beside = Path(f"{path}.overhead.json")
    overhead = json.loads(beside.read_text()) if beside.exists() else None
    return StageSplit(pstats.Stats(str(path)), overhead)


# --------------------------------------------------------------------------- the report


def e2e_phases(runs: Sequence[SystemRun]) -> list[Measured]:
    return [r.e2e for r in runs if r.e2e is not None and r.e2e.counts]


def median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return percentile(known, 50) if known else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def work_per_task(runs: Sequence[SystemRun]) -> dict[str, float | None]:
    """The medians over the measured runs of what one task costs, end to end."""
    phases = e2e_phases(runs)
    cpu = [m.cpu_us_per_task() for m in phases]
    roles = [m.role_cpu_us_per_task() for m in phases]
    out: dict[str, float | None] = {
        "client_us": median([c["client"] for c in cpu]),
        "producer_us": median([r["producer"] for r in roles]),
        "consumer_us": median([r["consumer"] for r in roles]),
        "postgres_us": median([c["postgres"] for c in cpu]),
        "valkey_us": median([c["valkey"] for c in cpu]),
        "statements": median([m.statements_per_task() for m in phases]),
        "commits": median([m.commits_per_task() for m in phases]),
        "rows_written": median([m.rows_written_per_task() for m in phases]),
        "wal_bytes": median([m.wal_bytes_per_task() for m in phases]),
        "wal_flushes": median([m.wal_syncs_per_task() for m in phases]),
    }
    for kind in PG_KINDS:
        out[f"pg_{kind}_us"] = median([
            m.pg_by_kind[kind] * 1e6 / m.phase.total for m in phases
            if m.pg_by_kind is not None])
    for role in PG_ROLES:
        out[f"pg_{role}_us"] = median([
            m.pg_by_role[role] * 1e6 / m.phase.total for m in phases
            if m.pg_by_role is not None])
    out["pg_connections"] = median([float(m.pg_connections) for m in phases
                                    if m.pg_connections is not None])
    client, producer, consumer = out["client_us"], out["producer_us"], out["consumer_us"]
    out["rest_us"] = (None if client is None or producer is None or consumer is None
                      else client - producer - consumer)
    return out


def median_run(runs: Sequence[SystemRun]) -> Measured | None:
    phases = sorted(e2e_phases(runs), key=lambda m: m.rate)
    return phases[len(phases) // 2] if phases else None


def statement_rows(measured: Measured, k: int = 8) -> list[dict[str, Any]]:
    n = measured.phase.total
    out = []
    for s in (measured.statements or [])[:k]:
        out.append({"query": s.query, "calls_per_task": s.calls / n,
                    "rows_per_call": s.rows / s.calls if s.calls else 0.0,
                    "exec_us_per_task": s.exec_ms * 1000 / n,
                    "wal_bytes_per_task": s.wal_bytes / n})
    return out


def profiled_roles(where: Path, run: SystemRun) -> dict[str, dict[str, Any]]:
    """The stage split of the profiled producer and consumer of ``run`` (its first of each:
    the ones measure_phase profiles), per task that process handled."""
    out: dict[str, dict[str, Any]] = {}
    e2e = run.e2e
    if e2e is None:
        return out
    for role, count in (("producer", "enqueued"), ("consumer", "acked")):
        path = where / f"e2e-{role}.prof"
        result = next((r for r in e2e.phase.results if count in r), None)
        if not path.exists() or result is None or not result[count]:
            say(f"  {run.system}: the profiled {role} handled no task: no split for it")
            continue
        split = load(path)
        tasks = int(result[count])
        out[role] = {
            "tasks": tasks, "profiled_us": split.total * 1e6 / tasks,
            "profiled_raw_us": split.raw_total * 1e6 / tasks,
            "process_cpu_us": result.get("cpu", 0.0) * 1e6 / tasks,
            "share": {s: (split.seconds[s] / split.total if split.total else 0.0)
                      for s in STAGES},
            "top": {s: [(name, sec * 1e6 / tasks) for name, sec in split.top(s, 3)]
                    for s in STAGES},
        }
    return out


def report(shape: str, runs: dict[str, list[SystemRun]],
           profiled: dict[str, tuple[Path, SystemRun]]) -> dict[str, Any]:
    """Print where a task's microseconds go at one shape; the same as a dict (JSON)."""
    say("")
    say(f"== where a task's microseconds go, shape {shape} (end-to-end phase; medians of "
        "the measured runs)")
    work = {name: work_per_task(r) for name, r in runs.items()}
    print_table(
        ["system", "client us (producers/consumers/rest)", "PG us", "Valkey us",
         "PG stmts", "commits", "rows written", "WAL bytes", "WAL flushes"],
        [[name, f"{fmt(w['client_us'], 0)} ({fmt(w['producer_us'], 0)}/"
                f"{fmt(w['consumer_us'], 0)}/{fmt(w['rest_us'], 0)})",
          fmt(w["postgres_us"], 0), fmt(w["valkey_us"], 0), fmt(w["statements"], 4),
          fmt(w["commits"], 4), fmt(w["rows_written"], 2), fmt(w["wal_bytes"], 0),
          fmt(w["wal_flushes"], 4)] for name, w in work.items()])
    say("(per task; WAL bytes and flushes are the whole server's)")
    if any(w.get("pg_connections") is not None for w in work.values()):
        say("PostgreSQL's CPU by process (us per task, sampled every 20 ms from "
            "/proc/<pid>/schedstat; 'backends' are the system's database's, 'sampled' their "
            "sum against the PG us above; connections: backends of the database opened "
            "during the phase)")
        print_table(["system", *PG_KINDS, "sampled", "connections"],
                    [[name, *(fmt(w.get(f"pg_{k}_us")) for k in PG_KINDS),
                      fmt(sum(w.get(f"pg_{k}_us") or 0.0 for k in PG_KINDS)),
                      fmt(w.get("pg_connections"), 0)] for name, w in work.items()])
    if any(w.get("pg_producers_us") is not None for w in work.values()):
        say("the database's backends by whose connections they serve (us per task): the "
            "producer processes' (enqueues), the consumer processes' (claims and acks), "
            "the rest (the benchmark's process, with tierq's maintenance jobs, and any "
            "connection that does not name its role: asyncpg's, an HTTP server's)")
        print_table(["system", *PG_ROLES],
                    [[name, *(fmt(w.get(f"pg_{r}_us")) for r in PG_ROLES)]
                     for name, w in work.items()])
    statements: dict[str, list[dict[str, Any]]] = {}
    for name, r in runs.items():
        m = median_run(r)
        statements[name] = statement_rows(m) if m is not None else []
        if statements[name]:
            say(f"{name}: statements of the median run, busiest first (per task)")
            print_table(["calls", "rows/call", "exec us (wall)", "WAL bytes", "statement"],
                        [[fmt(s["calls_per_task"], 4), fmt(s["rows_per_call"], 1),
                          fmt(s["exec_us_per_task"], 2), fmt(s["wal_bytes_per_task"], 0),
                          s["query"][:90]] for s in statements[name]])
    stages: dict[str, dict[str, Any]] = {}
    rows = []
    for name, (where, run) in profiled.items():
        stages[name] = profiled_roles(where, run)
        for role, p in stages[name].items():
            unprofiled = work[name].get(f"{role}_us")
            rows.append([f"{name} {role}",
                         *(f"{fmt(p['share'][s] * unprofiled if unprofiled else None)} "
                           f"({p['share'][s] * 100:.0f}%)" for s in STAGES),
                         fmt(unprofiled),
                         f"{fmt(p['profiled_raw_us'], 0)} / {fmt(p['profiled_us'])}"])
    if rows:
        say("client CPU by stage: ~us per task (the stage's share of the profiled process's "
            "time x its role's CPU per task in the measured runs) and (share); then that CPU "
            "per task, and the profiled process's: as profiled / less the profiler's overhead")
        print_table(["process", *STAGES, "us/task", "profiled raw / corrected"], rows)
        for name, by_role in stages.items():
            for role, p in by_role.items():
                heavy = [s for s in STAGES if p["share"][s] >= 0.05]
                say(f"{name} {role}, the heaviest functions of each stage (own us per "
                    "task, profiled): " + "; ".join(
                        f"{s}: " + ", ".join(f"{n} {us:.1f}" for n, us in p["top"][s])
                        for s in heavy))
    return {"shape": shape, "work_per_task": work, "statements": statements, "stages": stages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.breakdown",
                                     description="One profile's time by stage (see the "
                                                 "module's docstring for the rules).")
    parser.add_argument("profile", type=Path)
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks the process handled: also print microseconds per task")
    parser.add_argument("--top", type=int, default=8, help="functions shown per stage")
    args = parser.parse_args(argv)
    split = load(args.profile)
    per = 1e6 / args.tasks if args.tasks else None
    say(f"{args.profile}: {split.raw_total * 1000:.1f} ms of profiled CPU, "
        f"{split.total * 1000:.1f} ms less the profiler's overhead")
    for stage in STAGES:
        seconds = split.seconds[stage]
        if seconds <= 0:
            continue
        say(f"{stage}: {seconds * 1000:.2f} ms ({seconds / split.total * 100:.1f}%)"
            + (f", {seconds * per:.2f} us/task" if per else ""))
        for name, sec in split.top(stage, args.top):
            say(f"    {sec * 1000:8.3f} ms  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
