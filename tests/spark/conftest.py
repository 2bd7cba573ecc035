"""One local[2] Spark session for the whole test run, plus helpers to feed a queue with the
real stores of tests/support/stores.py (private PostgreSQL and Valkey/Redis per session)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.spark import JDBC_JAR, SPARK_GLUE

os.environ["PYSPARK_PYTHON"] = sys.executable  # executors must run this interpreter
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
if str(SPARK_GLUE) not in sys.path:
    sys.path.insert(0, str(SPARK_GLUE))

from pyspark.sql import SparkSession
from tierq_feeder.config import FeedConfig, config_from_args
from tierq_feeder.feeder import run_feed
from tierq_feeder.metrics import FeedResult
from tierq_feeder.writer import StoreConfig

from tierq.engine import Tierq


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    builder = (SparkSession.builder.master("local[2]").appName("tierq-spark-tests")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g"))
    if os.path.exists(JDBC_JAR):
        builder = builder.config("spark.jars", JDBC_JAR)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def stores(database_url: str, valkey_url: str, clean_stores: None) -> StoreConfig:
    """The session's stores, emptied (tasks, queues, offsets, warm tier) for each test."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE tierq_feeder_offsets")
    return StoreConfig(database_url=database_url, valkey_url=valkey_url)


Feed = Callable[..., FeedResult]


@pytest.fixture
def feed(spark: SparkSession, stores: StoreConfig, tmp_path: Path) -> Feed:
    """``feed("--queue", "q", "--source", …)``: one run of the job with these arguments
    (rejects go under the test's tmp_path unless --rejects is given)."""

    def run(*argv: str, **kwargs: Any) -> FeedResult:
        config: FeedConfig = config_from_args(list(argv))
        kwargs.setdefault("rejects_path", str(tmp_path / "rejects"))
        return run_feed(spark, config, stores, **kwargs)

    return run


@pytest.fixture
def engine(make_tq: Callable[..., Tierq]) -> Tierq:
    return make_tq()
