"""What a plain ack of batch members costs PostgreSQL, by the form of its function: each
member checked alone (``tierq_end_batch_members_v2``, migration 0031) against the ack's
long runs of one batch, tenant and attempt checked whole and the rest alone (``_v3``,
migration 0033), as the engine calls them: an ack without a run of ``GROUP_MIN`` goes to
``_v2``.

    .venv/bin/python -m bench.batch_acks                 # 8 rounds
    .venv/bin/python -m bench.batch_acks --rounds 3      # quicker, coarser

One fresh database and Valkey; an engine with ``TIERQ_BATCH_ROWS`` on enqueues the batch
rows each round, and each form acks its own, on a connection of its own, the forms taking
turns (the first one changing each round). Measured by the backend's CPU
(``/proc/<pid>/schedstat``), per member acked. Two orders of acks:

| order                    | batch rows                   | an ack                                 |
| ------------------------ | ---------------------------- | -------------------------------------- |
| ``one tenant``           | 400 members of one tenant    | one batch row's members, whole (as     |
|                          |                              | 4 x 400)                               |
| ``ten tenants``          | 500 members over ten tenants | six members of each of 16 batch rows,  |
|                          | by turns                     | their tenants as they come (the mixed  |
|                          |                              | shape's)                               |
| ``a batch row a tenant`` | 50 members of one tenant,    | ten members of each of the ten (what   |
|                          | ten such, a tenant each      | the mixed shape's acks would be with a |
|                          |                              | batch row per tenant of an enqueue)    |

Every ack must end every member it names (checked). Last line:
``grouped_vs_alone_one_tenant=X.XX`` (``_v3``'s CPU a member over ``_v2``'s), after
``grouped_vs_alone_ten_tenants=`` and ``grouped_vs_alone_a_batch_row_a_tenant=``; before them
``tenant_rows_vs_mixed_rows=`` (the engine's form, ``_v3``: a member of a batch row a tenant
over one of ten tenants by turns).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from bench.measure import schedstat_ns
from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import add_store_arguments, machine_info, opened_stores

QUEUE = "acks"
FORMS = ("v2", "v3")
# (order: batch rows a round, members a batch row, tenants, members of a batch row an ack,
# whether a batch row holds one tenant's members, the tenants taking turns by batch row,
# rather than every tenant's by turns)
ORDERS: dict[str, tuple[int, int, int, int, bool]] = {
    "one tenant": (10, 400, 1, 400, True),
    "ten tenants": (16, 500, 10, 6, False),
    "a batch row a tenant": (10, 50, 10, 10, True),
}


def acks_of(batches: Sequence[Sequence[tuple[str, str]]], per_ack: int
            ) -> list[list[tuple[str, str]]]:
    """The acks of an order: ``per_ack`` members of each batch row in turn, until every
    member is named once."""
    acks: list[list[tuple[str, str]]] = []
    longest = max(len(b) for b in batches)
    for start in range(0, longest, per_ack):
        acks.append([m for b in batches for m in b[start:start + per_ack]])
    return acks


def run_order(name: str, tq: Any, conns: dict[str, psycopg.Connection[Any]],
              pids: dict[str, int], rounds: int) -> dict[str, list[float]]:
    """Each form's backend CPU a member, a figure a round."""
    from tierq.dal.store.batches import ALL_ALONE, _grouped_acks

    n_batches, size, n_tenants, per_ack, row_a_tenant = ORDERS[name]
    tenants = [f"t{n}" for n in range(n_tenants)]
    store = tq.ctx.store
    per: dict[str, list[float]] = {form: [] for form in FORMS}

    def call(form: str, ack: list[tuple[str, str]]) -> int:
        ids = [i for i, _ in ack]
        owners = [t for _, t in ack]
        attempts = [1] * len(ack)
        if form == "v3":
            params, _ = _grouped_acks(ids, owners, attempts)
            query = "end_batch_members" if params["groups"] else "end_batch_members_v2"
        else:
            params, _ = _grouped_acks(ids, owners, attempts, ALL_ALONE)
            query = "end_batch_members_v2"
        if query == "end_batch_members_v2":
            del params["groups"], params["places"]
        params["queue"] = QUEUE
        [(_, _, unended)] = [r for r in store._fetch(query, params, tuple_row, conns[form])
                             if r[0] is None]
        if unended:
            raise AssertionError(f"{form} left {len(unended)} member(s) unended")
        return len(ack)

    for r in range(rounds):
        made: dict[str, list[list[tuple[str, str]]]] = {}
        for form in FORMS:
            batches = []
            for b in range(n_batches):
                owners = [tenants[b % n_tenants] if row_a_tenant else tenants[i % n_tenants]
                          for i in range(size)]
                out = tq.enqueue(QUEUE, [{"payload": {"i": i}, "tenant": owners[i]}
                                         for i in range(size)])
                batches.append([(str(o.id), owners[i]) for i, o in enumerate(out)])
            made[form] = acks_of(batches, per_ack)
        order = FORMS if r % 2 == 0 else tuple(reversed(FORMS))
        for form in order:
            before = schedstat_ns(pids[form])
            members = sum(call(form, ack) for ack in made[form])
            per[form].append((schedstat_ns(pids[form]) - before) / 1e3 / members)
        say(f"  {name}, round {r + 1}/{rounds}: " + ", ".join(
            f"{form} {per[form][-1]:.2f} us a member" for form in FORMS))
    return per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_acks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="rounds (8)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be positive")
    from tierq import Tierq
    from tierq.config import Settings

    results: dict[str, dict[str, float]] = {}
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        url = stores.fresh_tierq("batch_acks")
        tq = Tierq(settings=Settings(database_url=url, valkey_url=stores.valkey_url,
                                     batch_rows=True, warm_max=1_000_000))
        conns = {form: psycopg.connect(url, autocommit=True) for form in FORMS}
        try:
            pids = {form: _pid(c) for form, c in conns.items()}
            for order in ORDERS:
                per = run_order(order, tq, conns, pids, args.rounds)
                results[order] = {form: statistics.median(v) for form, v in per.items()}
        finally:
            for c in conns.values():
                c.close()
            tq.close()
    say("")
    say(f"backend CPU a member acked, medians of {args.rounds} rounds, the forms taking turns")
    print_table(["order", "v2: each member alone", "v3: long runs whole", "v3 / v2"],
                [[order, f"{r['v2']:.2f}", f"{r['v3']:.2f}", f"{r['v3'] / r['v2']:.2f}"]
                 for order, r in results.items()])
    write_json(args.json, {"machine": info, "rounds": args.rounds, "per_member": results})

    def ratio(order: str) -> str:
        return f"{results[order]['v3'] / results[order]['v2']:.2f}"

    tenant_rows = results["a batch row a tenant"]["v3"] / results["ten tenants"]["v3"]
    print_figures(f"tenant_rows_vs_mixed_rows={tenant_rows:.2f}",
                  f"grouped_vs_alone_a_batch_row_a_tenant={ratio('a batch row a tenant')}",
                  f"grouped_vs_alone_ten_tenants={ratio('ten tenants')}",
                  f"grouped_vs_alone_one_tenant={ratio('one tenant')}")
    return 0


def _pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


if __name__ == "__main__":
    raise SystemExit(main())
