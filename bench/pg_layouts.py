"""What other table layouts would cost per write, beside today's statements (issue 29; the
figures of docs/design-rotating-tables.md, section 2).

    .venv/bin/python -m bench.pg_layouts                 # 16 rounds
    .venv/bin/python -m bench.pg_layouts --rounds 4      # quicker, coarser

Scratch tables beside tierq's in one fresh database: a narrow table of the tasks admitted
warm (``tierq_hot``'s columns) with its primary key and without any index, an ack table of
one row per ack (ids as ``uuid[]``), one of a row per id with a primary key, and the bare
table. Each variant runs on a connection of its own; all take turns in every round, and
each is measured by its backend's CPU (``/proc/<pid>/schedstat``). Every figure is printed
per task and relative to today's statement for the same step (today's insert, today's
``ack_delete`` of 400 or of 10, today's ``ack_delete_by_attempt`` of 100 over ten tenants
beside two cheaper forms of it). After the rounds: what a rotation would cost per row of a
slot (a distinct count of the finished ids, an anti-join, ``TRUNCATE``).

Last line: ``log_insert_vs_today=X.XX`` (the narrow table without an index).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg

from bench.measure import schedstat_ns
from bench.pg_writes import TierqSide, make_tasks
from bench.report import print_figures, print_machine, print_table, say, write_json
from bench.stores import add_store_arguments, machine_info, opened_stores
from bench.systems import bare_table

QUEUE = "bench"
SCRATCH = """
CREATE TABLE hot (id uuid PRIMARY KEY, queue text NOT NULL, tenant text NOT NULL,
  priority smallint NOT NULL, seq bigint NOT NULL, attempts int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL)
  WITH (fillfactor = 100, autovacuum_enabled = false);
CREATE TABLE slot (LIKE hot INCLUDING DEFAULTS) WITH (fillfactor = 100, autovacuum_enabled = false);
CREATE TABLE slot_acks (at timestamptz NOT NULL DEFAULT now(), ids uuid[] NOT NULL)
  WITH (autovacuum_enabled = false);
CREATE TABLE slot_done (id uuid PRIMARY KEY) WITH (autovacuum_enabled = false);
"""
NARROW_INSERT = """
INSERT INTO {table} (id, queue, tenant, priority, seq, max_attempts, payload, created_at)
SELECT v.id, %(queue)s, v.tenant, v.priority, b.seq + v.n - 1, v.max_attempts, v.payload,
       %(now)s
FROM (SELECT nextval('tierq_task_seq') AS seq) AS b,
     ROWS FROM (unnest(%(ids)s::uuid[]), jsonb_array_elements_text(%(tenants)s::jsonb),
                unnest(%(priorities)s::smallint[]), jsonb_array_elements(%(payloads)s::jsonb),
                unnest(%(max_attempts)s::int[]))
     WITH ORDINALITY AS v(id, tenant, priority, payload, max_attempts, n)"""
HOT_DELETE = ("DELETE FROM hot WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::uuid[]))) "
              "RETURNING id::text")
ACK_ARRAY = "INSERT INTO slot_acks (ids) VALUES (%(ids)s::uuid[])"
ACK_ROWS = "INSERT INTO slot_done SELECT unnest(%(ids)s::uuid[]) ON CONFLICT DO NOTHING"

# (variant, the step it stands for): each step's first variant is today's statement
VARIANTS = [
    ("today: insert_tasks_keyless", "insert"),
    ("today: insert_tasks_uniform", "insert"),
    ("general: insert_tasks, 1 in 10 keyed", "keyed insert"),
    ("today: insert_tasks_uniform_keyed", "keyed insert"),
    ("bare table: PRODUCE", "insert"),
    ("narrow table, primary key", "insert"),
    ("narrow table, no index", "insert"),
    ("today: ack_delete of 400", "ack 400"),
    ("narrow table: DELETE of 400", "ack 400"),
    ("append 400: a row per id, primary key", "ack 400"),
    ("append 400: one row, uuid[]", "ack 400"),
    ("today: ack_delete of 10", "ack 10"),
    ("append 10: one row, uuid[]", "ack 10"),
    ("today: ack_delete_by_attempt of 100, 10 tenants", "mixed ack 100"),
    ("ack_delete of 100, its tenants as a set", "mixed ack 100"),
    ("DELETE of 100 by id alone", "mixed ack 100"),
]
# The mixed shape's ack in three forms: today's (each row paired with its lease's tenant and
# attempt), the one-tenant form given the ten tenants as a set, and the bare table's.
MIXED_ACKS = [name for name, step in VARIANTS if step == "mixed ack 100"]
DELETE_BY_ID = "DELETE FROM tierq_tasks WHERE id = ANY(%(ids)s::uuid[])"


class Layouts:
    """One connection per variant on one database; CPU and tasks summed per variant."""

    def __init__(self, url: str) -> None:
        from tierq.dal.migrate import migrate
        from tierq.dal.sql_files import queries

        migrate(url)
        self.helper = TierqSide(url)
        self.setup = psycopg.connect(url, autocommit=True)
        self.setup.execute("ALTER TABLE tierq_tasks SET (autovacuum_enabled = false)")
        self.setup.execute(SCRATCH)
        self.setup.execute(bare_table.DDL)
        self.setup.execute("ALTER TABLE q SET (autovacuum_enabled = false)")
        self.conns = {name: psycopg.connect(url, autocommit=True) for name, _ in VARIANTS}
        self.pids = {name: c.info.backend_pid for name, c in self.conns.items()}
        self.ns = dict.fromkeys(self.conns, 0)
        self.tasks = dict.fromkeys(self.conns, 0)
        self.insert = queries()["insert_tasks_keyless"]
        self.uniform = queries()["insert_tasks_uniform"]
        self.keyed = queries()["insert_tasks"]
        self.uniform_keyed = queries()["insert_tasks_uniform_keyed"]
        self.ack = queries()["ack_delete"]
        self.ack_by_attempt = queries()["ack_delete_by_attempt"]
        self.now = datetime.now(UTC)

    def run(self, name: str, tasks: int, statement: Any, params: Any,
            fetch: bool = False) -> int:
        """One statement on the variant's connection, its backend's CPU counted; the rows
        it wrote."""
        before = schedstat_ns(self.pids[name])
        cursor = self.conns[name].execute(statement, params)
        if fetch:
            cursor.fetchall()
        self.ns[name] += schedstat_ns(self.pids[name]) - before
        self.tasks[name] += tasks
        return cursor.rowcount

    def params(self, batch: Any) -> dict[str, Any]:
        return {"queue": QUEUE, "now": self.now,
                **self.helper.columns(batch, "warm", keyed=False)}

    def round(self, seed: int) -> None:
        from tierq.dal.postgres import uuid_array

        batches = make_tasks(4000, mixed=False, seed=seed)
        # today's table: 1,000 tasks in, 800 acked by 400, 200 by 10
        ids: list[str] = []
        for batch in batches[:2]:
            self.run("today: insert_tasks_keyless", 500, self.insert, self.params(batch),
                     fetch=True)
            ids += batch.ids
        for lo in (0, 400):
            self.run("today: ack_delete of 400", 400, self.ack, {
                "ids": uuid_array(ids[lo:lo + 400]), "queue": QUEUE, "tenant_set": ["_"],
                "attempt": 1}, fetch=True)
        for lo in range(800, 1000, 10):
            self.run("today: ack_delete of 10", 10, self.ack, {
                "ids": uuid_array(ids[lo:lo + 10]), "queue": QUEUE, "tenant_set": ["_"],
                "attempt": 1}, fetch=True)
        # the same rows by the statement of a uniform batch, then deleted (not measured)
        uniform: list[str] = []
        for batch in batches[6:8]:
            self.run("today: insert_tasks_uniform", 500, self.uniform,
                     {"queue": QUEUE, "now": self.now, **self.helper.uniform(batch, "warm")},
                     fetch=True)
            uniform += batch.ids
        self.setup.execute("DELETE FROM tierq_tasks WHERE id = ANY(%s::uuid[])",
                           (uuid_array(uniform),))
        # batches of 10 tenants, priorities and a key on one task in ten (the mixed shape's),
        # by the general keyed statement and by the uniform one, then deleted (not measured)
        mixed = make_tasks(1000, mixed=True, seed=seed)
        keyed_ids: list[str] = []
        for name, statement, batch in (
                ("general: insert_tasks, 1 in 10 keyed", self.keyed, mixed[seed % 2]),
                ("today: insert_tasks_uniform_keyed", self.uniform_keyed,
                 mixed[1 - seed % 2])):
            columns = (self.helper.columns(batch, "warm", keyed=True)
                       if statement is self.keyed
                       else self.helper.uniform(batch, "warm", keyed=True))
            self.run(name, 500, statement, {"queue": QUEUE, "now": self.now, **columns},
                     fetch=True)
            keyed_ids += batch.ids
        self.mixed_acks(mixed, seed)
        self.setup.execute("DELETE FROM tierq_tasks WHERE id = ANY(%s::uuid[])",
                           (uuid_array(keyed_ids),))
        # the bare table's insert (its claims and acks: bench.pg_writes)
        for _ in range(2):
            payloads = [orjson.dumps({"i": i}).decode() for i in range(500)]
            self.run("bare table: PRODUCE", 500, bare_table.PRODUCE, (payloads,))
        self.setup.execute("DELETE FROM q")
        # the narrow table with its primary key: in, then deleted by 400
        ids = []
        for batch in batches[2:4]:
            self.run("narrow table, primary key", 500, NARROW_INSERT.format(table="hot"),
                     self.params(batch))
            ids += batch.ids
        for lo in range(0, 1000, 400):
            part = ids[lo:lo + 400]
            self.run("narrow table: DELETE of 400", len(part), HOT_DELETE,
                     {"ids": uuid_array(part)}, fetch=True)
        # a slot without an index; its acks appended
        ids = []
        for batch in batches[4:6]:
            self.run("narrow table, no index", 500, NARROW_INSERT.format(table="slot"),
                     self.params(batch))
            ids += batch.ids
        for lo in (0, 400):
            part_ids = {"ids": uuid_array(ids[lo:lo + 400])}
            self.run("append 400: one row, uuid[]", 400, ACK_ARRAY, part_ids)
            self.run("append 400: a row per id, primary key", 400, ACK_ROWS, part_ids)
        for lo in range(800, 1000, 10):
            self.run("append 10: one row, uuid[]", 10, ACK_ARRAY,
                     {"ids": uuid_array(ids[lo:lo + 10])})
        if seed % 4 == 3:
            for table in ("tierq_tasks", "hot", "q"):
                self.setup.execute(f"VACUUM {table}")

    def mixed_acks(self, batches: Any, seed: int) -> None:
        """The mixed batches' rows acked 100 at a time in the order claims over their ten
        tenants take them (ten of a tenant, then the next tenant's), the acks taking the
        three forms of ``MIXED_ACKS`` in turn."""
        from tierq.dal.postgres import int_array, text_array, uuid_array

        lines: dict[str, list[str]] = {}
        for batch in batches:
            for task_id, tenant in zip(batch.ids, batch.tenants, strict=True):
                lines.setdefault(tenant, []).append(task_id)
        tenant_of = {task_id: tenant for tenant, ids in lines.items() for task_id in ids}
        order: list[str] = []
        while any(lines.values()):
            for tenant in sorted(lines):
                order += lines[tenant][:10]
                del lines[tenant][:10]
        for i, lo in enumerate(range(0, len(order), 100)):
            ids = order[lo:lo + 100]
            tenants = [tenant_of[task_id] for task_id in ids]
            name = MIXED_ACKS[(i + seed) % len(MIXED_ACKS)]
            if name == MIXED_ACKS[0]:
                params: dict[str, Any] = {
                    "ids": uuid_array(ids), "queue": QUEUE, "tenants": text_array(tenants),
                    "attempts": int_array([1] * len(ids))}
                statement = self.ack_by_attempt
            elif name == MIXED_ACKS[1]:
                params = {"ids": uuid_array(ids), "queue": QUEUE, "attempt": 1,
                          "tenant_set": text_array(sorted(set(tenants)))}
                statement = self.ack
            else:
                params, statement = {"ids": uuid_array(ids)}, DELETE_BY_ID
            deleted = self.run(name, len(ids), statement, params,
                               fetch=statement is not DELETE_BY_ID)
            if deleted != len(ids):  # (a form that deleted less would only look cheaper)
                raise RuntimeError(f"{name} deleted {deleted} of {len(ids)} rows")

    def rotation(self) -> dict[str, float]:
        """What emptying the slot costs per row (its acks are all there)."""
        conn, pid = self.setup, self.setup.info.backend_pid
        row = conn.execute("SELECT count(*) FROM slot").fetchone()
        rows = int(row[0]) if row else 0
        out: dict[str, float] = {"rows": float(rows)}
        for name, statement in (
                ("distinct count of finished ids", "SELECT count(DISTINCT i) FROM slot_acks, "
                 "unnest(ids) AS i"),
                ("anti-join: survivors", "SELECT count(*) FROM slot s WHERE NOT EXISTS ("
                 "SELECT 1 FROM slot_acks a, unnest(a.ids) AS i WHERE i = s.id)"),
                ("TRUNCATE of the slot and its acks", "TRUNCATE slot, slot_acks")):
            before = schedstat_ns(pid)
            conn.execute(statement)
            out[name] = (schedstat_ns(pid) - before) / 1e3 / max(rows, 1)
        return out

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.setup.close()
        self.helper.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_layouts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=16, help="rounds (16)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    add_store_arguments(parser)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be positive")
    with opened_stores(args) as stores:
        info = machine_info(stores)
        print_machine(info)
        layouts = Layouts(stores.fresh_database("layouts"))
        try:
            for r in range(args.rounds):
                layouts.round(r)
            rotation = layouts.rotation()
        finally:
            layouts.close()
    per_task = {name: layouts.ns[name] / 1e3 / max(layouts.tasks[name], 1)
                for name, _ in VARIANTS}
    today = {step: per_task[name] for name, step in reversed(VARIANTS)}  # each step's first
    say("")
    say(f"backend CPU per task, {args.rounds} rounds, the variants taking turns")
    print_table(["variant", "step", "tasks", "us/task", "vs today"],
                [[name, step, f"{layouts.tasks[name]:,}", f"{per_task[name]:.2f}",
                  f"{per_task[name] / today[step]:.2f}"] for name, step in VARIANTS])
    say(f"rotation of a slot of {rotation['rows']:,.0f} rows, per row: " + ", ".join(
        f"{name} {us:.2f} us ({us / today['insert']:.3f} of today's insert)"
        for name, us in rotation.items() if name != "rows"))
    write_json(args.json, {"machine": info, "rounds": args.rounds, "per_task": per_task,
                           "rotation": rotation})
    print_figures(f"log_insert_vs_today="
                  f"{per_task['narrow table, no index'] / today['insert']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
