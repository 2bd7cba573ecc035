"""Valkey round trips per enqueue batch: what the warm tier's hot path costs in requests,
counted on the wire (every request a connection sends to the real server), not estimated.

    .venv/bin/python -m bench.enqueue_round_trips              # 8 batches of 500 per case
    .venv/bin/python -m bench.enqueue_round_trips --batches 2  # a smoke run

Cases, each on a fresh database and an empty Valkey, batches of ``--batch`` tasks of a
60-byte payload enqueued one after the other into one queue, after one batch not counted
(it loads the scripts and opens the connections):

* ``backlog``: nothing claims, so every batch after the first lands in a line that holds
  work (the enqueue phase of bench/vs_bare.py);
* ``drained``: every batch is claimed and acked before the next (not counted), so every
  batch lands in an empty line (its end-to-end phase at its worst);

each with one tenant and with the batch spread over 10 tenants, without a tenant bound and
with one (``TIERQ_TENANT_WARM_MAX_BYTES`` of ``--bound-mib``). Printed per case: the round
trips per batch (mean, and min-max) and the requests per batch by what they ran (a script
by its file name, lua/), then ``enqueue_round_trips_<case>=<mean>`` lines.
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.report import print_table, say
from bench.stores import Stores, add_store_arguments, opened_stores

QUEUE = "rt-bench"


class Wire:
    """Counts the requests every connection of this process sends (one send of a packed
    command or pipeline is one round trip), and what each ran."""

    def __init__(self) -> None:
        self.sends = 0
        self.commands: Counter[str] = Counter()
        self.names: dict[bytes, str] = {}
        self.on = False

    @contextmanager
    def installed(self) -> Iterator[None]:
        from redis.connection import AbstractConnection

        original = AbstractConnection.send_packed_command
        wire = self

        def send(conn: Any, command: Any, check_health: bool = True) -> None:
            if wire.on:
                wire.count(command)
            original(conn, command, check_health)

        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        try:
            yield
        finally:
            AbstractConnection.send_packed_command = original  # type: ignore[method-assign]

    def count(self, command: Any) -> None:
        self.sends += 1
        data = command if isinstance(command, (bytes, bytearray)) else b"".join(
            bytes(part) for part in command)
        # RESP: *<n>\r\n$<len>\r\n<name>\r\n$<len>\r\n<arg>... per command of the send
        for chunk in data.split(b"\r\n*")[0:]:
            parts = chunk.split(b"\r\n")
            if len(parts) < 3:
                continue
            name = parts[2].upper()
            if name == b"EVALSHA" and len(parts) >= 5:
                self.commands[self.names.get(bytes(parts[4]), "EVALSHA ?")] += 1
            elif name.isalpha():
                self.commands[name.decode()] += 1


def one_case(stores: Stores, wire: Wire, *, tenants: int, bound_mib: int, drained: bool,
             batches: int, batch: int) -> tuple[list[int], Counter[str]]:
    from tierq.config import Settings
    from tierq.engine import Tierq

    url = stores.fresh_tierq("bench_rt")
    try:
        settings = Settings(database_url=url, valkey_url=stores.valkey_url,
                            tenant_warm_max_bytes=bound_mib << 20)
        with Tierq(settings=settings) as tq:
            wire.names = {script.sha.encode(): name
                          for name, script in tq.ctx.warm.scripts.items()}
            tq.put_queue(QUEUE, {})
            per_batch: list[int] = []
            wire.commands = Counter()
            for b in range(batches + 1):
                tasks = [{"payload": {"n": n, "pad": "x" * 40},
                          "tenant": f"t{n % tenants}"} for n in range(b * batch,
                                                                      (b + 1) * batch)]
                wire.sends, wire.on = 0, b > 0  # (the first batch loads the scripts)
                tq.enqueue(QUEUE, tasks)
                wire.on = False
                if b > 0:
                    per_batch.append(wire.sends)
                if drained:
                    left = batch
                    while left:
                        got = tq.claim(QUEUE, max=batch)
                        if not got:
                            break
                        tq.ack(QUEUE, got)
                        left -= len(got)
            return per_batch, wire.commands
    finally:
        stores.drop_database(url)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8,
                        help="counted batches per case (the default stays under a queue's "
                             "warm_max: the line stays warm)")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--bound-mib", type=int, default=16,
                        help="the tenant bound of the bounded cases, MiB")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    wire = Wire()
    rows: list[list[str]] = []
    figures: list[tuple[str, float]] = []
    with opened_stores(args) as stores, wire.installed():
        for drained in (False, True):
            for tenants in (1, 10):
                for bound_mib in (0, args.bound_mib):
                    case = (f"{'drained' if drained else 'backlog'}_{tenants}t_"
                            f"{'bound' if bound_mib else 'nobound'}")
                    say(f"-- {case}")
                    per_batch, commands = one_case(
                        stores, wire, tenants=tenants, bound_mib=bound_mib, drained=drained,
                        batches=args.batches, batch=args.batch)
                    mean = statistics.fmean(per_batch)
                    what = ", ".join(f"{name} {n / len(per_batch):.1f}"
                                     for name, n in commands.most_common())
                    rows.append([case, f"{mean:.1f}", f"{min(per_batch)}-{max(per_batch)}",
                                 what])
                    figures.append((case, mean))
    print_table(["case", "round trips/batch", "min-max", "requests per batch"], rows)
    for case, mean in figures:
        print(f"enqueue_round_trips_{case}={mean:.1f}")


if __name__ == "__main__":
    main()
