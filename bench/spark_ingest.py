"""Bulk ingest benchmark: the Glue feeder (spark_glue/jobs/feed_queue.py) beside what a Glue
user would otherwise write — Spark's own JDBC append — on the same rows, the same
PostgreSQL, in the same run.

    .venv/bin/python bench/spark_ingest.py              # 1,000,000 rows, 3 runs, + 10M feed
    .venv/bin/python bench/spark_ingest.py --quick      # 20,000 rows, 1 run (smoke run)

The rows: parquet, 4 files, columns key, name, amount (the payload) and priority. Each leg
is a job of its own: a fresh process (Spark started inside it), timed from the process's
start to its last commit, with the same master (``local[*]``), driver memory, partitions
and database connections:

* ``spark_jdbc``: ``DataFrame.write.jdbc(mode="append")`` (``batchsize=10000``,
  ``reWriteBatchedInserts=true``, ``stringtype=unspecified``) of the rows as tierq task
  rows into a table created ``LIKE tierq_tasks INCLUDING ALL`` (the same indexes; no
  dedup, no order, no back pressure, no admission);
* ``feeder``: the job itself into a queue (back pressure, dedup, rounds, offsets, the
  engine's bulk path, warming the first batch);
* ``alone``: the feeder's write path without Spark: the engine's bulk API (staging, the
  insert, admission) on the same connections, its COPY text built before the clock starts.
  The ceiling of any feeder here; timed from the first write to the last commit.

Legs alternate (jdbc, feeder, alone, jdbc, …) and the figures are medians. Beside the
feeder's whole job, its rounds alone are timed (``FeedResult.rounds_seconds``: each round
from its look at the backlog to its saved offsets; Spark's start and the reading of the
sources left out), to tell Spark's fixed start from the cost per row. Each leg starts
from empty tables and a checkpoint. The feeder's driver (the Python process) reports its
peak RSS; after the runs the feeder feeds ``--big-rows`` rows (default 10,000,000; 0: skip)
with the same 1g of driver memory, and its peak RSS is printed beside the 1M one. The last
line is ``feeder_vs_spark_jdbc=X.XX`` (the feeder's rows/s ÷ the JDBC append's; target
≥ 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "spark_glue"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

import psycopg  # noqa: E402

from bench.report import print_figures, print_machine, say, write_json  # noqa: E402
from bench.stores import add_store_arguments, machine_info, open_stores  # noqa: E402
from tierq.dal.migrate import migrate  # noqa: E402

QUEUE = "bench_ingest"
JDBC_TABLE = "bench_jdbc_tasks"
JDBC_JAR = "/usr/share/java/postgresql.jar"
PRIORITIES = 10
FILES = 4
STATE_DIR = Path(f"/tmp/tierq-bench-spark-{os.getuid()}")
LEGS = ("spark_jdbc", "feeder", "alone")


# -- the data -------------------------------------------------------------------------------

def write_rows(folder: Path, rows: int, files: int = FILES) -> None:
    """``rows`` rows as ``files`` parquet files (one row group each, as Spark writes them):
    key, name, amount, priority."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    for k in range(files):
        ids = np.arange(k * per_file, min(rows, (k + 1) * per_file), dtype=np.int64)
        if not len(ids):
            break
        keys = pa.array(np.char.add("k", np.char.zfill(ids.astype(str), 9)))
        names = pa.array(np.char.add("customer-", (ids % 100_000).astype(str)))
        table = pa.table({"key": keys, "name": names,
                          "amount": pa.array((ids * 7919 % 100_000) / 100.0),
                          "priority": pa.array((ids % PRIORITIES).astype(np.int32))})
        pq.write_table(table, folder / f"part-{k:05d}.parquet", row_group_size=len(ids))


# -- the legs, each in a process of its own ------------------------------------------------

def peak_rss_mb() -> float:
    """This process's peak resident set since it started its program (VmHWM: ru_maxrss
    would include the pages of the forked benchmark process before exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def leg_spark_jdbc(args: argparse.Namespace) -> dict[str, Any]:
    """Spark's own JDBC append of the rows, as tierq task rows."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[*]"))
             .appName("bench-spark-jdbc-append")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.jars", JDBC_JAR)
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    url = psycopg.conninfo.conninfo_to_dict(args.database_url)
    jdbc_url = (f"jdbc:postgresql://{url.get('host', 'localhost')}:{url.get('port', 5432)}/"
                f"{url['dbname']}")
    now = F.current_timestamp()
    rows = spark.read.parquet(args.data).select(
        F.expr("uuid()").alias("id"), F.lit(QUEUE).alias("queue"), F.lit("_").alias("tenant"),
        F.col("key"), F.col("priority").cast("short").alias("priority"),
        F.to_json(F.struct("name", "amount")).alias("payload"), F.lit("cold").alias("state"),
        now.alias("run_at"), now.alias("run_at_initially"), F.lit(5).alias("max_attempts"),
        F.monotonically_increasing_id().alias("seq"), now.alias("created_at"),
        now.alias("ready_since"), now.alias("state_since"))
    properties = {"driver": "org.postgresql.Driver", "user": str(url.get("user", "postgres")),
                  "password": str(url.get("password", "")), "batchsize": "10000",
                  "reWriteBatchedInserts": "true", "stringtype": "unspecified",
                  "numPartitions": str(args.partitions)}
    rows.write.jdbc(jdbc_url, JDBC_TABLE, mode="append", properties=properties)
    committed = time.monotonic()
    spark.stop()
    return {"committed_at": committed, "peak_rss_mb": peak_rss_mb()}


def leg_feeder(args: argparse.Namespace) -> dict[str, Any]:
    """The job, as its command line runs it."""
    os.environ["DATABASE_URL"] = args.database_url
    os.environ["VALKEY_URL"] = args.valkey_url
    sys.path.insert(0, str(ROOT / "spark_glue" / "jobs"))
    import feed_queue

    argv = ["--queue", QUEUE, "--source", f"rows={args.data}:parquet", "--key-column", "key",
            "--priority-column", "priority", "--payload-columns", "name,amount",
            "--max-backlog", str(args.rows * 2), "--write-partitions", str(args.partitions),
            "--rejects", str(Path(args.data).parent / "rejects")]
    if args.batch_rows:
        argv += ["--batch-rows", str(args.batch_rows)]
    # the run's result, as the job's log metrics see it (its seconds in rounds)
    from tierq_feeder.metrics import FeedResult, LogMetrics

    results: list[FeedResult] = []
    log_emit = LogMetrics.emit

    def emit(self: LogMetrics, result: FeedResult) -> None:
        results.append(result)
        log_emit(self, result)

    with patch.object(LogMetrics, "emit", emit):
        if feed_queue.main_local(argv) != 0:
            raise SystemExit("the feeder failed")
    return {"committed_at": time.monotonic(), "peak_rss_mb": peak_rss_mb(),
            "rounds_seconds": results[-1].rounds_seconds}


def leg_alone(args: argparse.Namespace) -> dict[str, Any]:
    """The feeder's write path without Spark: the engine's bulk API, ``partitions``
    connections in parallel, chunks of the job's default size."""
    import orjson
    import pyarrow.parquet as pq
    from tierq_feeder.config import DEFAULT_CHUNK_ROWS

    from tierq.config import Settings
    from tierq.engine import Tierq

    table = pq.read_table(args.data)
    keys, names = table.column("key").to_pylist(), table.column("name").to_pylist()
    amounts, priorities = table.column("amount").to_pylist(), table.column("priority").to_pylist()
    del table
    from tierq.logic.bulk import copy_text

    chunks: list[list[bytes]] = [[] for _ in range(args.partitions)]
    for n, start in enumerate(range(0, len(keys), DEFAULT_CHUNK_ROWS)):
        rows = [(i, "_", keys[i], priorities[i],
                 orjson.dumps({"name": names[i], "amount": amounts[i]}).decode(), None)
                for i in range(start, min(start + DEFAULT_CHUNK_ROWS, len(keys)))]
        chunks[n % args.partitions].append(copy_text(rows))
    settings = Settings(database_url=args.database_url, valkey_url=args.valkey_url,
                        db_pool_max=args.partitions + 1)
    errors: list[BaseException] = []
    with Tierq(settings=settings) as tq:
        started = time.monotonic()
        with tq.bulk_load(QUEUE, rows=len(keys), tenants=["_"]) as load:
            def write(texts: list[bytes]) -> None:
                try:
                    with tq.bulk_writer(load) as writer:
                        for text in texts:
                            writer.write(text, tenants=["_"])
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(texts,)) for texts in chunks]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        committed = time.monotonic()
    if errors:
        raise errors[0]
    return {"started_at": started, "committed_at": committed, "peak_rss_mb": peak_rss_mb()}


def run_leg(leg: str, args: argparse.Namespace, database_url: str, valkey_url: str,
            data: Path, rows: int, driver_memory: str) -> dict[str, Any]:
    """One leg in a fresh process; its seconds from the process's start (``alone``: from
    its first write) to its last commit."""
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-memory {driver_memory} pyspark-shell",
           "SPARK_MASTER": args.master}
    command = [sys.executable, str(Path(__file__).resolve()), "--leg", leg,
               "--database-url", database_url, "--valkey-url", valkey_url,
               "--data", str(data), "--rows", str(rows), "--partitions", str(args.partitions)]
    if args.batch_rows:
        command += ["--batch-rows", str(args.batch_rows)]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if args.leg_logs is not None:  # the leg's log (the feeder's phase timings) to read later
        args.leg_logs.mkdir(parents=True, exist_ok=True)
        runs = len(list(args.leg_logs.glob(f"{leg}-{rows}-*.log")))
        (args.leg_logs / f"{leg}-{rows}-{runs + 1}.log").write_text(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"leg {leg} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    seconds = report["committed_at"] - report.get("started_at", started)
    with psycopg.connect(database_url) as conn:
        table = JDBC_TABLE if leg == "spark_jdbc" else "tierq_tasks"
        count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    if count is None or count[0] != rows:
        raise SystemExit(f"leg {leg} wrote {count} rows, expected {rows}")
    measured = {"leg": leg, "rows": rows, "seconds": seconds, "rate": rows / seconds,
                "peak_rss_mb": report["peak_rss_mb"]}
    if report.get("rounds_seconds"):  # the feeder: its rounds, without Spark's start
        measured["rounds_seconds"] = report["rounds_seconds"]
        measured["rounds_rate"] = rows / report["rounds_seconds"]
    return measured


def reset(database_url: str, valkey: Any) -> None:
    """Empty tables, a checkpoint (no leg pays for another's dirty pages), empty warm tier."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {JDBC_TABLE}")
        conn.execute(f"CREATE TABLE {JDBC_TABLE} (LIKE tierq_tasks INCLUDING ALL)")
        conn.execute("TRUNCATE tierq_tasks, tierq_feeder_offsets")
        conn.execute("CHECKPOINT")
    valkey()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true",
                        help="20,000 rows, one run, no big feed: a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="alternating runs of each leg")
    parser.add_argument("--big-rows", type=int, default=10_000_000,
                        help="rows of the feed whose driver RSS is compared (0: none)")
    parser.add_argument("--partitions", type=int, default=os.cpu_count() or 2,
                        help="write partitions = database connections, every leg")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--batch-rows", type=int, default=None,
                        help="the feeder's rows per round (default: the job's, 1,000,000)")
    parser.add_argument("--legs", nargs="+", choices=LEGS, default=list(LEGS),
                        help="the legs to run (the last line needs spark_jdbc and feeder)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--leg-logs", type=Path, default=None, metavar="DIR",
                        help="save each leg's log (stderr) as DIR/LEG-ROWS-N.log")
    parser.add_argument("--leg", choices=LEGS, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    add_store_arguments(parser)
    parser.set_defaults(state_dir=STATE_DIR)  # servers of its own
    args = parser.parse_args(argv)
    if args.leg:
        leg = {"spark_jdbc": leg_spark_jdbc, "feeder": leg_feeder, "alone": leg_alone}
        print(json.dumps(leg[args.leg](args)), flush=True)
        return 0
    if args.quick:
        args.rows, args.runs, args.big_rows = 20_000, 1, 0
    if "spark_jdbc" in args.legs and not Path(JDBC_JAR).is_file():
        parser.error(f"the spark_jdbc leg needs PostgreSQL's JDBC driver at {JDBC_JAR}: "
                     "run infra/tools/install-test-deps.sh (as root; Debian's "
                     "libpostgresql-jdbc-java), or leave the leg out with --legs")

    stores = open_stores(args)
    scratch = Path(tempfile.mkdtemp(prefix="tierq-bench-ingest-"))
    results: dict[str, Any] = {"rows": args.rows, "partitions": args.partitions,
                               "driver_memory": args.driver_memory, "runs": []}
    try:
        print_machine(machine_info(stores))
        database_url = stores.fresh_database("tierq_bench_ingest")
        migrate(database_url)
        say(f"writing {args.rows:,} rows as {FILES} parquet files …")
        write_rows(scratch / "rows", args.rows)
        say(f"legs: {', '.join(LEGS)}; {args.runs} alternating run(s); master {args.master}, "
            f"driver memory {args.driver_memory}, {args.partitions} partitions = connections")
        for run in range(args.runs):
            for leg in args.legs:
                reset(database_url, stores.clear_valkey)
                measured = run_leg(leg, args, database_url, stores.valkey_url,
                                   scratch / "rows", args.rows, args.driver_memory)
                measured["run"] = run + 1
                results["runs"].append(measured)
                rounds = (f" ({measured['rounds_seconds']:.2f} s in rounds)"
                          if "rounds_seconds" in measured else "")
                say(f"run {run + 1} {leg:<10} {measured['seconds']:7.2f} s "
                    f"{measured['rate']:>10,.0f} rows/s  driver peak RSS "
                    f"{measured['peak_rss_mb']:.0f} MB{rounds}")
        median = {leg: statistics.median(r["rate"] for r in results["runs"] if r["leg"] == leg)
                  for leg in args.legs}
        if "feeder" not in args.legs:
            raise SystemExit("--legs: the feeder is the leg measured")
        rss = statistics.median(r["peak_rss_mb"] for r in results["runs"]
                                if r["leg"] == "feeder")
        results["median_rate"] = median
        results["feeder_peak_rss_mb"] = {str(args.rows): rss}
        big_line = "driver peak RSS at a bigger feed: not measured (--big-rows 0)"
        if args.big_rows:
            say(f"writing {args.big_rows:,} rows for the big feed …")
            shutil.rmtree(scratch / "rows")
            write_rows(scratch / "big", args.big_rows)
            reset(database_url, stores.clear_valkey)
            big = run_leg("feeder", args, database_url, stores.valkey_url, scratch / "big",
                          args.big_rows, args.driver_memory)
            results["big_feed"] = big
            results["feeder_peak_rss_mb"][str(args.big_rows)] = big["peak_rss_mb"]
            say(f"big feed: {big['seconds']:.2f} s, {big['rate']:,.0f} rows/s, driver peak "
                f"RSS {big['peak_rss_mb']:.0f} MB")
            big_line = (f"driver peak RSS: {rss:.0f} MB at {args.rows:,} rows, "
                        f"{big['peak_rss_mb']:.0f} MB at {args.big_rows:,} rows "
                        f"(x{big['peak_rss_mb'] / rss:.2f}; spark.driver.memory "
                        f"{args.driver_memory})")
        figures = [f"median {leg:<10} {median[leg]:>10,.0f} rows/s" for leg in args.legs]
        rounds_rate = statistics.median(r["rounds_rate"] for r in results["runs"]
                                        if r["leg"] == "feeder")
        results["median_feeder_rounds_rate"] = rounds_rate
        figures.append(f"median feeder's rounds only {rounds_rate:>10,.0f} rows/s (Spark's "
                       "start and the reading of the sources left out)")
        if "alone" in median:
            results["feeder_vs_alone"] = median["feeder"] / median["alone"]
            results["feeder_rounds_vs_alone"] = rounds_rate / median["alone"]
            figures.append(f"feeder / write path alone = {results['feeder_vs_alone']:.2f} "
                           f"(whole job; its rounds only: "
                           f"{results['feeder_rounds_vs_alone']:.2f})")
        figures += [f"driver_peak_rss_mb={rss:.0f} (feeder, {args.rows:,} rows)", big_line]
        if "spark_jdbc" in median:
            results["feeder_vs_spark_jdbc"] = median["feeder"] / median["spark_jdbc"]
            figures.append(f"feeder_vs_spark_jdbc={results['feeder_vs_spark_jdbc']:.2f}")
        write_json(args.json, results)
        print_figures(*figures)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        stores.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
