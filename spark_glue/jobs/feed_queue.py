"""Feed a tierq queue from files (S3 or disk: parquet, csv, json) or JDBC sources, with back
pressure, dedup by key and a source strategy. See spark_glue/README.md.

Locally (plain PySpark 3.5; DATABASE_URL and VALKEY_URL from the environment)::

    python spark_glue/jobs/feed_queue.py --queue emails \\
        --source new=data/new.parquet --source old=s3://bucket/old/:csv \\
        --key-column id --priority-column prio --strategy prefer:new --max-backlog 100000

Under AWS Glue 5 the same arguments come as one job parameter, ``--feed_args "…"``; the
stores come from ``--DB_SECRET_ARN``/``--DB_HOST``/… and ``--VALKEY_URL`` (template.yaml).

This file is only the entry point: everything else is in ``tierq_feeder`` beside it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from tierq_feeder.config import FeedConfig
    from tierq_feeder.writer import StoreConfig

_HERE = Path(__file__).resolve().parent.parent
if (_HERE / "tierq_feeder").is_dir() and str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))  # running from a checkout: the package sits beside jobs/

JDBC_JAR = "/usr/share/java/postgresql.jar"


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)


def local_session() -> SparkSession:
    """The active Spark session, or a new local one (executors run this interpreter)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = (SparkSession.builder.appName("tierq-feed-queue")
               .master(os.environ.get("SPARK_MASTER", "local[*]"))
               .config("spark.pyspark.python", sys.executable)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "true"))
    if os.path.exists(JDBC_JAR):
        builder = builder.config("spark.jars", JDBC_JAR)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def main_local(argv: Sequence[str]) -> int:
    from tierq_feeder.config import FeedConfigError, config_from_args
    from tierq_feeder.glue import stores_from_options

    _logging()
    try:
        config = config_from_args(argv)
        stores = stores_from_options(dict(os.environ))
    except FeedConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Spark's JVM starts in a thread while this one imports the engine and connects to the
    # stores (seconds each: side by side, not one after the other)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-start") as pool:
        session = pool.submit(local_session)
        try:
            return _run_local(config, stores, session)
        finally:
            if not session.done():
                session.cancel()


def _run_local(config: FeedConfig, stores: StoreConfig,
               session: Future[SparkSession]) -> int:
    from tierq_feeder.config import FeedConfigError
    from tierq_feeder.feeder import run_feed
    from tierq_feeder.metrics import LogMetrics
    from tierq_feeder.offsets import FeedBusy

    try:
        with stores.engine(pool_size=4) as engine:  # its pool connects in the background
            result = run_feed(session.result(), config, stores, engine=engine,
                              metrics=[LogMetrics()])
    except (FeedConfigError, FeedBusy, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.line(), flush=True)
    return 0


def main_glue(argv: Sequence[str]) -> int:
    """AWS Glue 5: GlueContext, job parameters (``argv``: the script's name, then what Glue
    passes), bookmarks, CloudWatch metrics."""
    from awsglue.context import GlueContext
    from awsglue.job import Job
    from awsglue.utils import getResolvedOptions
    from pyspark.context import SparkContext
    from tierq_feeder.config import FeedConfigError, config_from_glue_options
    from tierq_feeder.feeder import run_feed
    from tierq_feeder.glue import (
        STORE_PARAMETERS,
        GlueBookmarkLoader,
        present_options,
        stores_from_options,
    )
    from tierq_feeder.metrics import CloudWatchMetrics, LogMetrics
    from tierq_feeder.offsets import FeedBusy
    from tierq_feeder.sources import SparkLoader

    _logging()
    # getResolvedOptions requires every name it is given; --TempDir and
    # --job-bookmark-option it always resolves itself (the latter as job_bookmark_option)
    optional = present_options(argv, STORE_PARAMETERS)
    options = getResolvedOptions(list(argv), ["JOB_NAME", "feed_args", *optional])
    glue_context = GlueContext(SparkContext.getOrCreate())
    spark = glue_context.spark_session
    job = Job(glue_context)
    job.init(options["JOB_NAME"], options)
    try:
        config = config_from_glue_options(options)
        bookmarks = options.get("job_bookmark_option") == "job-bookmark-enable"
        rejects = config.rejects_path
        if rejects is None and options.get("TempDir"):
            rejects = f"{options['TempDir'].rstrip('/')}/tierq-rejects/{config.feed_name}"
        result = run_feed(spark, config, stores_from_options(options),
                          loader=GlueBookmarkLoader(glue_context) if bookmarks
                          else SparkLoader(),
                          rejects_path=rejects, metrics=[LogMetrics(), CloudWatchMetrics()])
    except (FeedConfigError, FeedBusy) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.line(), flush=True)
    if result.deferred == 0:
        job.commit()  # everything read was fed: the bookmark may move past it
    else:
        logging.getLogger("tierq.feeder").info(
            "bookmark not committed: %d row(s) wait for a later run", result.deferred)
    return 0


def under_glue(argv: Sequence[str]) -> bool:
    """A Glue job run: Glue passes --JOB_NAME (and its awsglue library is there). A local
    run may have the awsglue-dev interfaces installed; without --JOB_NAME it stays local."""
    if "--JOB_NAME" not in argv:
        return False
    try:
        import awsglue  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``argv``: the arguments after the script's name (default: the command line's)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if under_glue(args):
        return main_glue([sys.argv[0], *args])
    return main_local(args)


if __name__ == "__main__":
    sys.exit(main())
