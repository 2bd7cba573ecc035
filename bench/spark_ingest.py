"""Bulk ingest benchmark: N rows from parquet into a queue through the Spark feeder
(spark_glue/jobs/feed_queue.py), beside a raw COPY of the same rows into a plain table,
in the same run, on the same PostgreSQL.

    .venv/bin/python bench/spark_ingest.py              # 1,000,000 rows
    .venv/bin/python bench/spark_ingest.py --quick      # 20,000 rows (smoke run)

The raw COPY is the floor of what PostgreSQL can take: one psycopg ``COPY`` of
(key, priority, payload jsonb) into a table without indexes. The feeder does everything a
real feed does: reads the parquet files, places and ranks every row, dedups keys, checks
the backlog before each round, reserves places in line, COPYs into staging tables and
``INSERT … SELECT … ON CONFLICT`` into ``tierq_tasks`` (primary key, live-key unique index,
cold-line index), records offsets, warms the first batch. Spark's start-up is not counted.
Between the two, the feeder's write path alone (its COPY → staging → ``INSERT … ON
CONFLICT``, one connection per core, the COPY text built before the clock starts) shows the
most any feeder can reach on this machine.
The last line is ``ratio=X.XX`` (feeder rows/s ÷ raw COPY rows/s; the target is ≥ 0.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "spark_glue"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

import orjson  # noqa: E402
import psycopg  # noqa: E402

from bench.measure import cpu_now, process_tree_cpu  # noqa: E402
from bench.report import print_machine, say  # noqa: E402
from bench.stores import add_store_arguments, machine_info, open_stores  # noqa: E402
from tierq.dal.migrate import migrate  # noqa: E402

QUEUE = "bench_ingest"
PRIORITIES = 10
STATE_DIR = Path(f"/tmp/tierq-bench-spark-{os.getuid()}")


def row_values(i: int) -> tuple[str, int, str, float, int]:
    """Row ``i`` of the data set: (key, priority, name, amount, batch) — the same formulas
    as ``spark_rows``."""
    return (f"k{i:09d}", i % PRIORITIES, f"customer-{i % 100_000}", (i * 7919 % 100_000) / 100.0,
            i // 1000)


def write_parquet(spark: object, folder: Path, rows: int, files: int) -> None:
    from pyspark.sql import functions as F

    frame = (spark.range(rows)  # type: ignore[attr-defined]
             .select(F.format_string("k%09d", "id").alias("key"),
                     (F.col("id") % PRIORITIES).cast("int").alias("priority"),
                     F.format_string("customer-%d", F.col("id") % 100_000).alias("name"),
                     ((F.col("id") * 7919 % 100_000) / 100.0).alias("amount"),
                     (F.col("id") / 1000).cast("long").alias("batch")))
    frame.repartitionByRange(files, "key").sortWithinPartitions("key") \
        .write.mode("overwrite").parquet(str(folder))


def raw_copy(database_url: str, rows: int) -> float:
    """Seconds to COPY the same rows (key, priority, payload) into a plain table."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_plain")
        conn.execute("CREATE TABLE bench_plain (key text, priority smallint, payload jsonb)")
        started = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, \
                cur.copy("COPY bench_plain (key, priority, payload) FROM STDIN") as copy:
            for i in range(rows):
                key, priority, name, amount, batch = row_values(i)
                payload = orjson.dumps({"key": key, "priority": priority, "name": name,
                                        "amount": amount, "batch": batch}).decode()
                copy.write_row((key, priority, payload))
        seconds = time.perf_counter() - started
        count = conn.execute("SELECT count(*) FROM bench_plain").fetchone()
        if count is None or count[0] != rows:
            raise SystemExit(f"raw COPY wrote {count} rows, expected {rows}")
        conn.execute("DROP TABLE bench_plain")
    return seconds


def write_path_alone(database_url: str, rows: int, writers: int, chunk_rows: int) -> float:
    """The feeder's write path without Spark: ``writers`` connections in parallel, each
    COPYing its share into the staging table and moving it with the feeder's own
    ``INSERT … SELECT … ON CONFLICT``, one transaction per chunk of ``chunk_rows``. The COPY
    text is built before the clock starts. The ceiling of any feeder on this machine.
    Returns seconds."""
    from datetime import UTC, datetime

    from tierq.core.ids import uuid7_strings
    from tierq.dal.sql_files import query

    ids = uuid7_strings(rows)
    chunks: list[list[bytes]] = [[] for _ in range(writers)]
    for start in range(0, rows, chunk_rows):
        lines = []
        for i in range(start, min(start + chunk_rows, rows)):
            key, priority, name, amount, batch = row_values(i)
            payload = orjson.dumps({"key": key, "priority": priority, "name": name,
                                    "amount": amount, "batch": batch}).decode()
            payload = payload.replace("\\", "\\\\")  # COPY text escapes its backslashes
            lines.append(f"{ids[i]}\t{i + 1}\t_\t{key}\t{priority}\t{payload}\tcold\t\\N\n")
        chunks[(start // chunk_rows) % writers].append("".join(lines).encode())
    connections = [psycopg.connect(database_url, autocommit=True) for _ in range(writers)]
    for conn in connections:
        conn.execute(query("feeder_create_stage"))
    errors: list[BaseException] = []

    def write(conn: psycopg.Connection[Any], texts: list[bytes]) -> None:
        try:
            for text in texts:
                with conn.transaction():
                    with conn.cursor() as cur, cur.copy(query("feeder_copy_stage")) as copy:
                        copy.write(text)
                    conn.execute(query("feeder_insert_from_stage"), {
                        "queue": QUEUE, "now": datetime.now(UTC), "max_attempts": 5})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(conn, texts))
               for conn, texts in zip(connections, chunks, strict=True)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    for conn in connections:
        conn.close()
    if errors:
        raise errors[0]
    with psycopg.connect(database_url, autocommit=True) as conn:
        count = conn.execute("SELECT count(*) FROM tierq_tasks").fetchone()
    if count is None or count[0] != rows:
        raise SystemExit(f"the write path alone wrote {count} rows, expected {rows}")
    return seconds


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def spark_session() -> object:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[*]"))
               .appName("tierq-bench-spark-ingest")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "2g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20,000 rows: a smoke run")
    parser.add_argument("--files", type=int, default=8, help="parquet files to spread rows over")
    parser.add_argument("--batch-rows", type=int, default=None,
                        help="feeder rows per round (default: the job's, 250,000)")
    parser.add_argument("--chunk-rows", type=int, default=None,
                        help="feeder rows per writer transaction (default: the job's, 50,000)")
    parser.add_argument("--write-partitions", type=int, default=None,
                        help="parallel writers (default: Spark's parallelism)")
    add_store_arguments(parser)
    # servers of its own: other benchmarks' load stays out of its CPU figures
    parser.set_defaults(state_dir=STATE_DIR)
    args = parser.parse_args(argv)
    rows = 20_000 if args.quick else args.rows

    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    from tierq_feeder.config import config_from_args
    from tierq_feeder.feeder import run_feed
    from tierq_feeder.writer import StoreConfig

    stores = open_stores(args)
    scratch = Path(tempfile.mkdtemp(prefix="tierq-bench-ingest-"))
    try:
        print_machine(machine_info(stores))
        database_url = stores.fresh_database("tierq_bench_ingest")
        migrate(database_url)
        stores.clear_valkey()
        spark = spark_session()
        say(f"writing {rows:,} rows as {args.files} parquet file(s) …")
        write_parquet(spark, scratch / "rows", rows, args.files)

        say(f"raw COPY of {rows:,} rows into a plain table …")
        before = cpu_now(stores)
        raw_seconds = raw_copy(database_url, rows)
        raw_cpu = cpu_now(stores) - before
        raw_rate = rows / raw_seconds
        say(f"raw COPY: {raw_seconds:.2f} s, {raw_rate:,.0f} rows/s")

        writers = args.write_partitions or os.cpu_count() or 2
        chunk = args.chunk_rows or 50_000
        say(f"the write path alone (no Spark): {rows:,} rows, {writers} connection(s), "
            f"chunks of {chunk:,} …")
        ceiling_url = stores.fresh_database("tierq_bench_ingest_ceiling")
        migrate(ceiling_url)
        before = cpu_now(stores)
        alone_seconds = write_path_alone(ceiling_url, rows, writers, chunk)
        alone_cpu = cpu_now(stores) - before
        alone_rate = rows / alone_seconds
        say(f"write path alone: {alone_seconds:.2f} s, {alone_rate:,.0f} rows/s")

        say(f"feeder: {rows:,} rows into queue {QUEUE!r} …")
        feed_args = ["--queue", QUEUE, "--source", f"rows={scratch / 'rows'}:parquet",
                     "--key-column", "key", "--priority-column", "priority",
                     "--max-backlog", str(rows * 2)]
        for option in ("batch_rows", "chunk_rows", "write_partitions"):
            if getattr(args, option):
                feed_args += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
        jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[attr-defined]
        before, spark_before = cpu_now(stores), process_tree_cpu(jvm)
        result = run_feed(spark, config_from_args(feed_args),  # type: ignore[arg-type]
                          StoreConfig(database_url, stores.valkey_url),
                          rejects_path=str(scratch / "rejects"))
        feed_cpu, spark_cpu = cpu_now(stores) - before, process_tree_cpu(jvm) - spark_before
        if result.created != rows:
            raise SystemExit(f"feeder created {result.created} tasks, expected {rows}")
        feed_rate = rows / result.seconds
        say(f"feeder: {result.seconds:.2f} s, {feed_rate:,.0f} rows/s ({result.line()})")
        say("")
        say(f"{'':<10}{'seconds':>9}{'rows/s':>10}   CPU seconds: "
            f"{'postgres':>8}{'client':>8}{'spark':>8}")
        say(f"{'raw COPY':<10}{raw_seconds:>9.2f}{raw_rate:>10,.0f}   {'':>13}"
            f"{fmt(raw_cpu.postgres):>8}{raw_cpu.client:>8.1f}{'-':>8}")
        say(f"{'alone':<10}{alone_seconds:>9.2f}{alone_rate:>10,.0f}   {'':>13}"
            f"{fmt(alone_cpu.postgres):>8}{alone_cpu.client:>8.1f}{'-':>8}")
        say(f"{'feeder':<10}{result.seconds:>9.2f}{feed_rate:>10,.0f}   {'':>13}"
            f"{fmt(feed_cpu.postgres):>8}{feed_cpu.client:>8.1f}{spark_cpu:>8.1f}")
        say("(client: this process — the COPY loop, or Spark's driver; spark: the JVM and "
            "its Python workers; alone: the feeder's COPY -> staging -> INSERT … ON CONFLICT "
            "without Spark, its text built beforehand)")
        say(f"write path alone / raw COPY = {alone_rate / raw_rate:.2f} (the most any feeder "
            f"can reach here); feeder / write path alone = {feed_rate / alone_rate:.2f}")
        say(f"ratio={feed_rate / raw_rate:.2f}")
        spark.stop()  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        stores.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
