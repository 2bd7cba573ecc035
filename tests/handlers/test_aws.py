"""The AWS side of the functions, with moto standing in for AWS (never for the stores):
database credentials from Secrets Manager, and the EMF metrics as CloudWatch would ingest
them, checked against what the template's alarms select."""

from __future__ import annotations

import json
import re
import time
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from tests.handlers.support import ApiEvent, Context, function_module, reply_of
from tierq.aws.runtime import engine, reset_engine
from tierq.local.gateway.template import expand_language_extensions, load_yaml

REGION = "us-east-1"


@pytest.fixture
def aws(aws_credentials: None) -> None:
    """moto's AWS, under the name these tests use."""


def test_database_credentials_come_from_secrets_manager(
        aws: None, monkeypatch: pytest.MonkeyPatch, database_url: str, valkey_url: str,
        clean_stores: None, api_event: ApiEvent) -> None:
    parts = urlsplit(database_url)
    secret = {"username": parts.username or "postgres", "password": "unused-locally",
              "engine": "postgres", "host": parts.hostname, "port": parts.port,
              "dbname": "ignored"}
    arn = boto3.client("secretsmanager").create_secret(
        Name=f"tierq/db-{time.time_ns()}", SecretString=json.dumps(secret))["ARN"]
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("DB_SECRET_ARN", arn)
    monkeypatch.setenv("DB_NAME", parts.path.lstrip("/"))
    monkeypatch.setenv("DB_SSLMODE", "disable")  # the local server has no TLS; AWS: require
    monkeypatch.setenv("VALKEY_URL", valkey_url)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    reset_engine()
    try:
        event = api_event("POST", "/v1/queues/secret-q/tasks", {"payload": "via secret"})
        reply = reply_of(function_module("enqueue").lambda_handler(event, Context()))
        assert reply.status == 200, reply.body
        url = engine().db.url
        assert url.startswith(f"postgresql://{secret['username']}:unused-locally@"
                              f"{parts.hostname}:{parts.port}/{parts.path.lstrip('/')}")
        assert url.endswith("?sslmode=disable")
        # a second request in the same execution environment reuses the engine
        first = engine()
        again = reply_of(function_module("enqueue").lambda_handler(
            api_event("POST", "/v1/queues/secret-q/tasks", {"payload": 2}), Context()))
        assert again.status == 200 and engine() is first
    finally:
        reset_engine()


# ----------------------------------------------------------------------- metrics


def emf_blobs(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()
            if line.startswith("{") and '"_aws"' in line]


def ingest(blobs: list[dict[str, Any]], cloudwatch: Any) -> None:
    """What CloudWatch does with EMF log lines: one datum per metric per dimension set."""
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dimensions = [{"Name": d, "Value": str(blob[d])} for d in dimension_set]
                data = []
                for metric in directive["Metrics"]:
                    values = blob[metric["Name"]]
                    for value in values if isinstance(values, list) else [values]:
                        data.append({"MetricName": metric["Name"], "Dimensions": dimensions,
                                     "Value": float(value), "Unit": metric.get("Unit", "None")})
                cloudwatch.put_metric_data(Namespace=directive["Namespace"], MetricData=data)


def alarm_selections() -> list[tuple[str, str, str]]:
    """(metric, namespace, group-by dimension) of the template's Metrics Insights alarms."""
    from tests.handlers.support import REPO

    # (as CloudFormation reads it: Fn::ForEach expanded)
    resources = expand_language_extensions(load_yaml(REPO / "template.yaml"))["Resources"]
    found = []
    for resource in resources.values():
        if resource.get("Type") != "AWS::CloudWatch::Alarm":
            continue
        for query in resource["Properties"].get("Metrics") or []:
            expression = query.get("Expression", "")
            if not isinstance(expression, str):  # a math expression built with Fn::Sub
                continue
            match = re.search(r"SELECT \w+\((\w+)\) FROM (\w+) (?:WHERE .+ )?GROUP BY (\w+)",
                              expression)
            if match:
                found.append((match[1], match[2], match[3]))
    return found


def test_emf_metrics_feed_what_the_alarms_select(aws: None, call: Any,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    selections = alarm_selections()
    assert {m for m, _, _ in selections} == {"OldestReadyAgeSeconds", "DeadLettered",
                                             "ShardDown", "TaskSeqUsedPercent"}
    selections = [s for s in selections if s[2] == "queue"]  # (by shard: the next tests)
    # a queue an admin configured has series of its own (the others count as ~other)
    assert call("PUT", "/v1/queues/alarmed", {}).status == 200
    call("POST", "/v1/queues/alarmed/tasks", {"tasks": [{"payload": 1, "max_attempts": 1},
                                                        {"payload": 2}]})
    [task] = call("POST", "/v1/queues/alarmed/claims", {"max": 1}).body["tasks"]
    call("POST", "/v1/queues/alarmed/nacks", {"nacks": [
        {"id": task["id"], "lease_token": task["lease_token"], "error": "x"}]})
    function_module("reaper").lambda_handler(
        {"source": "tierq.scheduler", "job": "reaper", "max_seconds": 0.2},
        Context(function_name="tierq-reaper", timeout_seconds=70))
    cloudwatch = boto3.client("cloudwatch")
    ingest(emf_blobs(capsys.readouterr().out), cloudwatch)

    listed = cloudwatch.list_metrics(Namespace="Tierq")["Metrics"]
    names = {m["MetricName"] for m in listed}
    assert {"Enqueued", "Claimed", "Nacked", "DeadLettered", "Warm", "Cold", "Delayed",
            "Leased", "Dead", "OldestReadyAgeSeconds"} <= names
    now = time.time()
    for metric, namespace, group_by in selections:
        series = [m for m in cloudwatch.list_metrics(Namespace=namespace,
                                                     MetricName=metric)["Metrics"]
                  if any(d["Name"] == group_by and d["Value"] == "alarmed"
                         for d in m["Dimensions"])]
        assert series, f"no {namespace}/{metric} with a {group_by} dimension"
        stats = cloudwatch.get_metric_statistics(
            Namespace=namespace, MetricName=metric, Dimensions=series[0]["Dimensions"],
            StartTime=now - 600, EndTime=now + 60, Period=60, Statistics=["Maximum", "Sum"])
        points = stats["Datapoints"]
        assert points, metric
        if metric == "DeadLettered":
            assert sum(p["Sum"] for p in points) == 1
        else:
            assert max(p["Maximum"] for p in points) >= 0


def test_a_shard_down_feeds_its_alarm_one_series_per_shard(
        aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    from tierq.aws import metrics

    [(metric, namespace, group_by)] = [s for s in alarm_selections() if s[0] == "ShardDown"]
    metrics.shard_down("reaper", ["blue", "green"])
    cloudwatch = boto3.client("cloudwatch")
    ingest(emf_blobs(capsys.readouterr().out), cloudwatch)
    listed = cloudwatch.list_metrics(Namespace=namespace, MetricName=metric)["Metrics"]
    shards = sorted(d["Value"] for m in listed for d in m["Dimensions"] if d["Name"] == group_by)
    assert shards == ["blue", "green"]


def test_the_reapers_gauge_round_feeds_the_task_sequence_alarm(
        aws: None, call: Any, task_seq: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """TaskSeqUsedPercent as the alarm selects it (by shard), from the reaper's gauge round;
    with the sequence past the alarm's threshold, the datum is past it too."""
    from tests.handlers.support import REPO
    from tierq.aws.runtime import default_shard
    from tierq.core.ordering import SEQ_MAX

    [(metric, namespace, group_by)] = [s for s in alarm_selections()
                                       if s[0] == "TaskSeqUsedPercent"]
    alarm = load_yaml(REPO / "template.yaml")["Resources"]["TaskSeqAlarm"]["Properties"]
    assert metric in alarm["Metrics"][0]["Expression"]
    threshold = alarm["Threshold"]
    task_seq(SEQ_MAX // 100 * (threshold + 1))
    call("POST", "/v1/queues/seq/tasks", {"tasks": [{"payload": 1}]})
    function_module("reaper").lambda_handler(
        {"source": "tierq.scheduler", "job": "reaper", "max_seconds": 0.2},
        Context(function_name="tierq-reaper", timeout_seconds=70))
    cloudwatch = boto3.client("cloudwatch")
    ingest(emf_blobs(capsys.readouterr().out), cloudwatch)
    [series] = cloudwatch.list_metrics(Namespace=namespace, MetricName=metric)["Metrics"]
    assert series["Dimensions"] == [{"Name": group_by, "Value": default_shard()},
                                    {"Name": "service", "Value": "tierq"}]
    now = time.time()
    points = cloudwatch.get_metric_statistics(
        Namespace=namespace, MetricName=metric, Dimensions=series["Dimensions"],
        StartTime=now - 600, EndTime=now + 60, Period=60, Statistics=["Maximum"])["Datapoints"]
    assert threshold + 1 <= max(p["Maximum"] for p in points) < threshold + 1.001
