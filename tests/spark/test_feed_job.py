"""The job's surface: the command line (its last line, its errors), Glue's job parameters,
bad arguments that write nothing, one run per feed at a time, metrics."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws
from tierq_feeder.config import FeedConfigError, config_from_args, config_from_glue_options
from tierq_feeder.feeder import run_feed
from tierq_feeder.glue import present_options, stores_from_options
from tierq_feeder.metrics import CloudWatchMetrics, FeedResult
from tierq_feeder.offsets import FeedBusy, feed_lock
from tierq_feeder.writer import StoreConfig

from tests.spark.data import write_csv
from tests.support.spark import SPARK_GLUE

pytestmark = pytest.mark.spark


def entry_point() -> ModuleType:
    spec = importlib.util.spec_from_file_location("feed_queue",
                                                  SPARK_GLUE / "jobs" / "feed_queue.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nothing_written(database_url: str) -> bool:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT (SELECT count(*) FROM tierq_tasks) + "
                            "(SELECT count(*) FROM tierq_feeder_offsets)").fetchone() == (0,)


def test_command_line_prints_the_counts_last(spark: Any, stores: StoreConfig, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", stores.database_url)
    monkeypatch.setenv("VALKEY_URL", stores.valkey_url)
    monkeypatch.chdir(tmp_path)
    path = write_csv(tmp_path / "in.csv", [{"id": "a", "p": "1"}, {"id": "b", "p": "x"},
                                           {"id": "a", "p": "2"}])
    code = entry_point().main(["--queue", "cli", "--source", f"in={path}:csv",
                               "--key-column", "id", "--priority-column", "p"])
    assert code == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "created=1 ignored=1 deferred=0 rejected=1"
    assert list((tmp_path / "tierq-rejects" / "cli").glob("part-*.json"))  # default place


def test_command_line_rejects_bad_arguments_and_writes_nothing(
        spark: Any, stores: StoreConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABASE_URL", stores.database_url)
    monkeypatch.setenv("VALKEY_URL", stores.valkey_url)
    path = write_csv(tmp_path / "in.csv", [{"id": "a"}])
    job = entry_point()
    assert job.main(["--queue", "q", "--source", f"in={path}", "--key-column", "id",
                     "--max-backlog", "0"]) == 2
    assert "error: --max-backlog: must be at least 1, got 0" in capsys.readouterr().err
    assert job.main(["--queue", "q", "--source", f"in={path}", "--key-column", "nope"]) == 2
    assert "error: --key-column: source 'in' has no column 'nope' (columns: id)" in \
        capsys.readouterr().err
    assert job.main(["--queue", "q", "--source", f"in={tmp_path}/missing.csv",
                     "--key-column", "id"]) == 2
    assert "error: --source: in: cannot read" in capsys.readouterr().err
    assert nothing_written(stores.database_url)


@pytest.mark.parametrize(("argv", "argument", "message"), [
    ([], "arguments", "required: --queue, --source, --key-column"),
    (["--queue", "bad queue"], "--queue", "not a valid queue name"),
    (["--source", "a"], "--source", "expected NAME=VALUE"),
    (["--source", "a=x.txt"], "--source", "cannot tell the format"),
    (["--strategy", "prefer:zz"], "--strategy", "not a source (sources: a)"),
    (["--strategy", "random"], "--strategy", "expected 'fair' or 'prefer:<source>'"),
    (["--batch-rows", "many"], "--batch-rows", "not an integer"),
    (["--max-wait-seconds", "-1"], "--max-wait-seconds", "seconds >= 0"),
    (["--source", "j=jdbc:postgresql://h/db", "--order-column", "j=id"], "--jdbc-table",
     "give --jdbc-table or --jdbc-query"),
    (["--source", "j=jdbc:postgresql://h/db", "--jdbc-table", "j=t"], "--order-column",
     "needs a unique, increasing order column"),
    (["--jdbc-table", "a=t"], "--source", "apply to JDBC sources only"),
    (["--read-option", "zz.sep=;"], "--read-option", "'zz' is not a source"),
    (["--payload-columns", " , "], "--payload-columns", "names no column"),
    (["--group-column", "order_id"], "--group-column", "does not load tasks with a group"),
])
def test_argument_errors_name_the_argument(argv: list[str], argument: str,
                                           message: str) -> None:
    base = {"--queue": "q", "--source": "a=data.parquet", "--key-column": "id"}
    given = dict(zip(argv[::2], argv[1::2], strict=True))
    args = [] if not argv else [x for k, v in {**base, **given}.items() for x in (k, v)]
    if argv and argv[0] == "--source" and given["--source"].startswith("j="):
        args += ["--source", "a=data.parquet"]
    with pytest.raises(FeedConfigError) as caught:
        config_from_args(args)
    assert caught.value.argument == argument
    assert message in str(caught.value)


def test_source_specs() -> None:
    config = config_from_args([
        "--queue", "q", "--key-column", "id", "--strategy", "prefer:c",
        "--source", "a=s3://bucket/in/", "--source", "b=s3://bucket/b.csv",
        "--source", "c=/data/c:json", "--source", "d=jdbc:postgresql://db:5432/app?user=u",
        "--jdbc-query", "d=SELECT * FROM t", "--order-column", "d=id",
        "--read-option", "b.sep=;", "--payload-columns", "x, y"])
    assert [(s.name, s.format, s.path) for s in config.sources[:3]] == [
        ("a", "parquet", "s3://bucket/in/"), ("b", "csv", "s3://bucket/b.csv"),
        ("c", "json", "/data/c")]
    d = config.sources[3]
    assert (d.format, d.url, d.query, d.order_column) == (
        "jdbc", "jdbc:postgresql://db:5432/app?user=u", "SELECT * FROM t", "id")
    assert config.sources[1].options == {"sep": ";"}
    assert config.mapping.payload == ("x", "y")
    assert (str(config.strategy), config.feed_name) == ("prefer:c", "q")


def test_glue_job_parameters() -> None:
    argv = ["script.py", "--JOB_NAME", "feed", "--feed_args", "--queue q", "--DB_HOST", "h"]
    assert present_options(argv, ["DB_HOST", "DB_SECRET_ARN", "VALKEY_URL"]) == ["DB_HOST"]
    config = config_from_glue_options({
        "feed_args": "--queue emails --source 'in=s3://b/in put/:json' --key-column id "
                     "--max-backlog 500"})
    assert (config.queue, config.sources[0].path, config.max_backlog) == (
        "emails", "s3://b/in put/", 500)
    with pytest.raises(FeedConfigError, match="--feed_args: missing"):
        config_from_glue_options({"JOB_NAME": "feed"})
    stores = stores_from_options({"DATABASE_URL": "postgresql://u@db/x",
                                  "VALKEY_URL": "rediss://cache:6379/0",
                                  "VALKEY_CLUSTER": "true"})
    assert stores == StoreConfig("postgresql://u@db/x", "rediss://cache:6379/0", True)


def test_one_run_per_feed_at_a_time(spark: Any, stores: StoreConfig, tmp_path: Path,
                                    make_tq: Any) -> None:
    path = write_csv(tmp_path / "in.csv", [{"id": "a"}])
    config = config_from_args(["--queue", "q", "--source", f"in={path}", "--key-column", "id"])
    holder = make_tq()
    with feed_lock(holder.ctx, "q"), pytest.raises(FeedBusy, match="feed 'q' is in progress"):
        run_feed(spark, config, stores)
    assert nothing_written(stores.database_url)
    assert run_feed(spark, config, stores, rejects_path=str(tmp_path / "r")).created == 1


def test_cloudwatch_metrics() -> None:
    result = FeedResult(queue="emails", feed="emails", created=5, ignored=2, rejected=1,
                        deferred=7, consumed=8, seconds=2.0)
    with mock_aws():
        client = boto3.client("cloudwatch", region_name="us-east-1")
        CloudWatchMetrics(client).emit(result)
        listed = client.list_metrics(Namespace="Tierq")["Metrics"]
        assert {m["MetricName"] for m in listed} == {
            "FeederCreated", "FeederIgnored", "FeederDeferred", "FeederRejected",
            "FeederRowsPerSecond"}
        assert all(m["Dimensions"] == [{"Name": "queue", "Value": "emails"}] for m in listed)
        stats = client.get_metric_statistics(
            Namespace="Tierq", MetricName="FeederRowsPerSecond",
            Dimensions=[{"Name": "queue", "Value": "emails"}], Statistics=["Maximum"],
            Period=60, StartTime="2000-01-01T00:00:00Z", EndTime="2100-01-01T00:00:00Z")
        assert stats["Datapoints"][0]["Maximum"] == 4.0
