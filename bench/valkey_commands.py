"""Valkey's slowest command against one large pair: with 100k leases of 1 KB tasks in one
(queue, tenant) and claims of up to 100, no command should take over 10 ms — a script runs
alone on its server, so a slow one stalls every tenant served there.

    .venv/bin/python -m bench.valkey_commands              # 100,000 leases
    .venv/bin/python -m bench.valkey_commands --quick      # 10,000 leases

A fresh database and an empty private Valkey with ``slowlog-log-slower-than 0`` (every
command is logged with its duration, measured by the server itself; a given server must
take ``CONFIG SET``, and gets its settings back at the end). The pair is built
through the engine: ``--leases`` tasks of ``--task-bytes`` enqueued 500 at a time, then
claimed 100 at a time (leases of an hour), and ``--extra`` more tasks left ready. Then each
operation runs ``--repeat`` times on that pair:

| operation                                   | on                                         |
| ------------------------------------------- | ------------------------------------------ |
| claim, ack, nack, heartbeat, release        | 100 leases each                            |
| a task's view and its cancel                | one leased task                            |
| a replace that moves a task into the future | one leased task                            |
| reaper passes                               | lease expiry of 1,000 leases; the          |
|                                             | reconciler walking every warm row of the   |
|                                             | pair, its clock past the grace             |

After each phase the slow log is read whole and reset. The slowest command of each phase is
printed with its name; a script goes by its file name. Redis 7 also logs the commands a
script calls, each on its own line, never slower than the script. Also printed: what the
pair's lease keys hold per lease. The last line is ``slowest_valkey_command_ms=<x>``: the
slowest of every phase but the build (enqueues into an empty pair and claims, measured too
and printed). Before it, ``valkey_calibration_ms``: what one script of 1,000 ``HSETNX``
takes on the server at the time, to read the figures against (a machine busy with other work
runs every script slower, and the slow log counts the time the server was not scheduled).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import Stores, add_store_arguments, machine_info, opened_stores

QUEUE = "big"
TENANT = "_"
CLAIM = 100  # tasks per claim, ack, nack, heartbeat, release
ENQUEUE = 500  # tasks per enqueue (the largest request)
EXPIRING = 1000  # leases that expire before the reaper phase
KEYED = 200  # keyed tasks, leased, replaced into the future
TARGET_MS = 10.0


@dataclass
class Slowest:
    phase: str
    commands: int  # commands the slow log kept for the phase
    slowest_us: int
    name: str  # the command, or the script's file name for an EVALSHA
    args: str  # its first arguments as the slow log keeps them


def take_slowlog(client: redis.Redis, max_len: int) -> dict[str, str]:
    """The server's slow-log settings as they are (to put back at the end), then its log's
    length set to ``max_len``; a server that refuses ``CONFIG`` ends the run with a message
    (the client closed)."""
    try:
        kept = {str(name): str(value)
                for setting in ("slowlog-log-slower-than", "slowlog-max-len")
                for name, value in client.config_get(setting).items()}
        client.config_set("slowlog-max-len", max_len)
    except redis.ResponseError as exc:
        client.close()
        raise SystemExit(f"this benchmark sets Valkey's slow log (CONFIG SET), which this "
                         f"server refuses: {exc}") from exc
    return kept


def slowlog_reset(client: redis.Redis) -> None:
    client.execute_command("SLOWLOG", "RESET")


def read_slowlog(client: redis.Redis, names: dict[str, str], phase: str) -> Slowest:
    """The slowest command logged since the last reset, then a reset."""
    entries = client.execute_command("SLOWLOG", "GET", -1)
    slowlog_reset(client)

    # (the bench's own SLOWLOG RESET is logged too, freeing the last phase's entries: not
    # the engine's)
    entries = [e for e in entries if e[3] and e[3][0].upper() != b"SLOWLOG"]
    worst: Any = None
    for entry in entries:
        if worst is None or int(entry[2]) > int(worst[2]):
            worst = entry
    if worst is None:
        return Slowest(phase, 0, 0, "-", "")
    args = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in worst[3]]
    name = args[0].upper()
    if name in ("EVALSHA", "EVAL") and len(args) > 1:
        name = f"EVALSHA {names.get(args[1], args[1][:12])}"
    return Slowest(phase, len(entries), int(worst[2]), name, " ".join(args[2:6])[:80])


CALIBRATION = ("for i = 1, 1000 do redis.call('HSETNX', KEYS[1], 'f' .. i, 'v') end "
               "redis.call('DEL', KEYS[1]) return 1")


def calibrate(client: redis.Redis) -> float:
    """The server's own time (ms, median of 5) for one script of 1,000 HSETNX on a scratch
    key: how fast this server runs script work now (a loaded machine's Valkey is slower),
    the yardstick to read the phases' figures against."""
    took = []
    for _ in range(5):
        slowlog_reset(client)
        client.eval(CALIBRATION, 1, "tq:{bench}:calibration")
        entries = client.execute_command("SLOWLOG", "GET", -1)
        took.append(max(int(e[2]) for e in entries if e[3][0].upper() == b"EVAL") / 1000)
    slowlog_reset(client)
    return sorted(took)[len(took) // 2]


def script_names(tq: Any) -> dict[str, str]:
    """sha -> file name of every script the engine loads."""
    warm = tq.ctx.warm
    names = {script.sha: name for name, script in warm.scripts.items()}
    names[warm.throughput.add_script.sha] = "rate_add"
    names[warm.throughput.note_script.sha] = "rate_tenants"
    return names


def payloads(n: int, size: int, start: int, **fields: Any) -> list[dict[str, Any]]:
    pad = "x" * max(0, size - 40)
    return [{"payload": {"i": start + i, "pad": pad}, **fields} for i in range(n)]


def build(tq: Any, leases: int, task_bytes: int, extra: int) -> list[Any]:
    """The pair: ``leases`` leased tasks (claims of CLAIM), ``extra`` ready; returns the
    claimed tasks."""
    started = time.perf_counter()
    total = leases + extra
    for at in range(0, total, ENQUEUE):
        tq.enqueue(QUEUE, payloads(min(ENQUEUE, total - at), task_bytes, at))
        if (at // ENQUEUE) % max(1, total // ENQUEUE // 10) == 0:
            say(f"  enqueued {at + ENQUEUE:,}/{total:,} ({time.perf_counter() - started:.0f} s)")
    held: list[Any] = []
    while len(held) < leases:
        got = tq.claim(QUEUE, max=min(CLAIM, leases - len(held)), lease_seconds=3600,
                       worker=f"bench-{len(held) // CLAIM}")
        if not got:
            raise RuntimeError(f"the claim found nothing after {len(held):,} leases")
        held += got
        if (len(held) // CLAIM) % max(1, leases // CLAIM // 10) == 0:
            say(f"  leased {len(held):,}/{leases:,} ({time.perf_counter() - started:.0f} s)")
    return held


def lease_memory(client: redis.Redis, leases: int) -> dict[str, float]:
    """Bytes per lease of each of the pair's lease keys (MEMORY USAGE, all samples)."""
    from tierq.dal.warm_tier import PairKeys

    keys = PairKeys.of(QUEUE, TENANT)
    out = {}
    for name in ("leased", "lease_of", "claims"):
        used = client.execute_command("MEMORY", "USAGE", getattr(keys, name), "SAMPLES", 0)
        out[name] = (used or 0) / max(1, leases)
    return out


def exercise(tq: Any, client: redis.Redis, names: dict[str, str], held: list[Any],
             repeat: int) -> list[Slowest]:
    """Each operation ``repeat`` times on the large pair, one slow-log phase each."""
    from tierq.dal.warm_tier import LEASE_INDEX_SLICE, LEASE_INDEX_SLICES_PER_VISIT
    from tierq.maintenance import reaper

    results: list[Slowest] = []
    spare = iter(held)

    def take(n: int) -> list[Any]:
        return [next(spare) for _ in range(n)]

    def phase(name: str, action: Callable[[], Any]) -> None:
        slowlog_reset(client)
        started = time.perf_counter()
        for _ in range(repeat):
            action()
        result = read_slowlog(client, names, name)
        results.append(result)
        say(f"  {name:<28} {repeat} x in {time.perf_counter() - started:.2f} s; slowest "
            f"{result.slowest_us / 1000:.2f} ms ({result.name}) of {result.commands:,}")

    def claim_and_keep() -> None:
        got = tq.claim(QUEUE, max=CLAIM, lease_seconds=3600)
        if len(got) != CLAIM:
            raise RuntimeError(f"a claim got {len(got)} tasks, expected {CLAIM}")

    phase("claim 100", claim_and_keep)
    phase("ack 100", lambda: tq.ack(QUEUE, take(CLAIM)))
    phase("nack 100", lambda: tq.nack(QUEUE, [
        {"id": t.id, "lease_token": t.lease_token, "retry_in_seconds": 3600}
        for t in take(CLAIM)]))
    beating = held[-CLAIM:]
    phase("heartbeat 100", lambda: tq.heartbeat(QUEUE, [
        {"id": t.id, "lease_token": t.lease_token} for t in beating]))
    phase("release 100", lambda: tq.release(QUEUE, [
        {"id": t.id, "lease_token": t.lease_token} for t in take(CLAIM)]))
    viewed = held[len(held) // 2]
    phase("task view (leased)", lambda: tq.get_task(QUEUE, viewed.id))
    phase("cancel (leased)", lambda: tq.cancel_task(QUEUE, take(1)[0].id))

    expiring: list[Any] = []  # (leases the reaper phase finds expired)
    while len(expiring) < EXPIRING:
        more = tq.claim(QUEUE, max=CLAIM, lease_seconds=30)
        if not more:
            raise RuntimeError(f"only {len(expiring)} tasks were left to lease for 30 s")
        expiring += more

    keyed = iter([f"k{i}" for i in range(KEYED)])
    tq.enqueue(QUEUE, [{"payload": {"k": f"k{i}"}, "key": f"k{i}"} for i in range(KEYED)])
    got = 0
    while got < KEYED:  # (the build's ready tasks come first)
        claimed = tq.claim(QUEUE, max=CLAIM, lease_seconds=3600)
        if not claimed:
            raise RuntimeError("the keyed tasks were not all leased")
        got += sum(1 for t in claimed if isinstance(t.payload, dict) and "k" in t.payload)

    def replace() -> None:
        key = next(keyed)
        tq.enqueue(QUEUE, [{"payload": {"k": key, "again": True}, "key": key,
                            "on_conflict": "replace", "delay_seconds": 3600}])
    phase("replace into the future", replace)

    tq.ctx.clock.advance(120)  # past those leases and the reconciler's grace (60 s)
    # the pair's lease index is checked through first (slices of LEASE_INDEX_SLICE), then
    # every warm row, a slice per pass
    passes = (len(held) // (LEASE_INDEX_SLICE * LEASE_INDEX_SLICES_PER_VISIT)
              + len(held) // reaper.ReaperConfig().reconcile_batch + 3)
    slowlog_reset(client)
    started = time.perf_counter()
    expired = restored = 0
    for _ in range(passes):
        summary = reaper.run(tq.ctx)
        expired += summary.expired
        restored += summary.restored
    result = read_slowlog(client, names, "reaper + reconciler")
    results.append(result)
    say(f"  {'reaper + reconciler':<28} {passes} passes in {time.perf_counter() - started:.2f}"
        f" s ({expired:,} expired, {restored} restored); slowest "
        f"{result.slowest_us / 1000:.2f} ms ({result.name}) of {result.commands:,}")
    if expired < len(expiring) or restored:
        raise RuntimeError(f"the reaper passes expired {expired} of {len(expiring)} leases "
                           f"and restored {restored} (none was lost)")
    return results


def run(stores: Stores, leases: int, task_bytes: int, extra: int,
        repeat: int) -> dict[str, Any]:
    from tierq.config import Settings
    from tierq.engine import Tierq
    from tierq.logic.context import OffsetClock

    url = stores.fresh_tierq("bench_valkey_cmds")  # (before the slow log is set: see below)
    client = redis.Redis.from_url(stores.valkey_url)
    kept = take_slowlog(client, 1_000_000)
    try:
        client.config_set("slowlog-log-slower-than", 0)
        total = leases + extra + KEYED + EXPIRING + CLAIM * repeat
        settings = Settings(database_url=url, valkey_url=stores.valkey_url,
                            warm_max=2 * total, warm_max_bytes=4 * total * (task_bytes + 200),
                            lease_seconds=3600)
        tq = Tierq(settings=settings, clock=OffsetClock())
        try:
            names = script_names(tq)
            calibration_ms = calibrate(client)
            say(f"-- calibration: a script of 1,000 HSETNX takes {calibration_ms:.2f} ms on "
                "this server now (the phases' figures scale with it)")
            say(f"-- build: {leases:,} leases of {task_bytes:,}-byte tasks in one pair, "
                f"{extra:,} more ready")
            slowlog_reset(client)
            started = time.perf_counter()
            held = build(tq, leases, task_bytes, extra + EXPIRING + CLAIM * repeat)
            built = read_slowlog(client, names, "build (enqueue, claim)")
            say(f"  built in {time.perf_counter() - started:.0f} s; slowest "
                f"{built.slowest_us / 1000:.2f} ms ({built.name}) of {built.commands:,}")
            memory = lease_memory(client, leases)
            say("  per lease: " + ", ".join(f"{k} {v:.0f} B" for k, v in memory.items()))
            say(f"-- each operation on the pair, {repeat} times")
            phases = exercise(tq, client, names, held, repeat)
        finally:
            tq.close()
    finally:
        try:
            for name, value in kept.items():
                if value is not None:
                    client.config_set(name, value)
            slowlog_reset(client)
        finally:
            client.close()
            stores.drop_database(url)
    return {"leases": leases, "task_bytes": task_bytes, "repeat": repeat, "build": built,
            "phases": phases, "lease_memory": memory, "calibration_ms": calibration_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.valkey_commands",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leases", type=int, default=None, help="leases in the pair (100000)")
    parser.add_argument("--task-bytes", type=int, default=1024, help="bytes per task (1024)")
    parser.add_argument("--extra", type=int, default=2000,
                        help="tasks left ready beside the leases (2000)")
    parser.add_argument("--repeat", type=int, default=20, help="runs of each operation (20)")
    parser.add_argument("--quick", action="store_true", help="10,000 leases")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    leases = args.leases or (10_000 if args.quick else 100_000)
    if leases < CLAIM * args.repeat * 4 or args.repeat < 1 or args.task_bytes < 64:
        parser.error("--leases must be at least 400 x --repeat, --task-bytes at least 64")

    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        say(f"valkey commands bench: {leases:,} leases, claims of {CLAIM}, {args.repeat} runs "
            f"of each operation; every command in the slow log (target: none over "
            f"{TARGET_MS:.0f} ms)")
        result = run(stores, leases, args.task_bytes, args.extra, args.repeat)
        rows: list[Slowest] = [result["build"], *result["phases"]]
        say("")
        say("slowest command per phase (the server's own timing)")
        print_table(["phase", "commands", "slowest ms", "command", "its arguments"],
                    [[r.phase, f"{r.commands:,}", f"{r.slowest_us / 1000:.2f}", r.name, r.args]
                     for r in rows])
        write_json(args.json, {"machine": info, **result,
                               "build": asdict(result["build"]),
                               "phases": [asdict(r) for r in result["phases"]]})
        worst = max(result["phases"], key=lambda r: r.slowest_us)
        print_figures(f"valkey_calibration_ms={result['calibration_ms']:.2f}",
                      f"slowest_valkey_command={worst.name} ({worst.phase})",
                      f"slowest_valkey_command_ms={worst.slowest_us / 1000:.2f}")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
