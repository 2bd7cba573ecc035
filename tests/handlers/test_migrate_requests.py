"""The migrate function refuses what is not its own stack's: a ResponseURL that is not
CloudFormation's response bucket of its region (nothing done, nothing sent: there is nowhere
safe to answer), and a further shard's request naming a host other than that shard's proxy,
another shard or another database (FAILED answered, nothing done). moto stands in for RDS;
the answer's PUT goes to a local server standing in for S3."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from tierq.aws import custom_resource
from tierq.aws.custom_resource import Migrated, handle, response_url_problem
from tierq.config import get_settings

REGION = "us-east-1"
BUCKET = "cloudformation-custom-resource-response-useast1"
GOOD_URL = f"https://{BUCKET}.s3.amazonaws.com/arn%3Aaws%3Acloudformation/r?X-Amz-Signature=a"
PREFIX = "tierq-dev-proxy-"


class Context:
    log_stream_name = "stream"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


@pytest.fixture
def puts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The PUTs the function sends (to a local server standing in for S3)."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append({"path": self.path, "body": json.loads(self.rfile.read(length))})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    def to_local(put: urllib.request.Request, timeout: float) -> int:
        parts = urlsplit(put.full_url)
        assert parts.hostname is not None and parts.hostname.startswith(BUCKET)
        put.full_url = f"http://127.0.0.1:{port}{parts.path}?{parts.query}"
        with urllib.request.urlopen(put, timeout=timeout) as response:
            return int(response.status)

    monkeypatch.setattr(custom_resource, "_put", to_local)
    yield received
    server.shutdown()
    server.server_close()


@pytest.fixture
def stack(aws_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A deployment with the further shards b and c whose proxies exist (moto's RDS), as
    the migrate function's environment names them."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24",
                                 AvailabilityZone=f"{REGION}{zone}")["Subnet"]["SubnetId"]
               for i, zone in ((1, "a"), (2, "b"))]
    rds = boto3.client("rds", region_name=REGION)
    endpoints = {}
    for shard in ("b", "c"):
        made = rds.create_db_proxy(
            DBProxyName=PREFIX + shard, EngineFamily="POSTGRESQL", VpcSubnetIds=subnets,
            Auth=[{"AuthScheme": "SECRETS", "IAMAuth": "DISABLED", "SecretArn":
                   f"arn:aws:secretsmanager:{REGION}:123456789012:secret:s-{shard}"}],
            RoleArn="arn:aws:iam::123456789012:role/proxy")
        endpoints[shard] = made["DBProxy"]["Endpoint"]
    for name, value in {"TIERQ_SHARD_NAMES": "default,b,c", "TIERQ_SHARD_PROXY_PREFIX": PREFIX,
                        "DB_NAME": "tierq", "DB_HOST": "tierq-dev-proxy.example.internal",
                        "POWERTOOLS_TRACE_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    yield endpoints
    get_settings.cache_clear()


def event(**properties: Any) -> dict[str, Any]:
    return {"RequestType": "Create", "ResponseURL": GOOD_URL,
            "StackId": f"arn:aws:cloudformation:{REGION}:123456789012:stack/tierq-dev/1",
            "RequestId": "r-1", "LogicalResourceId": "DbMigrations",
            "ResourceType": "Custom::TierqMigrations", "ResourceProperties": properties}


def shard_request(shard: str, host: str, **more: Any) -> dict[str, Any]:
    return event(**{"Shard": shard, "Host": host, "DbName": "tierq",
                     "OwnerSecretArn": f"arn:aws:secretsmanager:{REGION}:1:secret:o-{shard}",
                     "AppSecretArn": f"arn:aws:secretsmanager:{REGION}:1:secret:a-{shard}",
                     **more})


class Work:
    """Stands in for the migrations (the databases are beside the point here)."""

    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any]] = []

    def __call__(self, properties: Mapping[str, Any]) -> Migrated:
        self.calls.append(properties)
        return Migrated(["0001"], [str(properties.get("Shard") or "default")])


@pytest.mark.parametrize("url", [
    f"http://{BUCKET}.s3.amazonaws.com/r",  # not https
    "https://collector.example.com/r?X-Amz-Signature=a",  # anywhere else
    # the bucket name with dashes is not AWS's: anyone could own it
    "https://cloudformation-custom-resource-response-us-east-1.s3.amazonaws.com/r",
    "https://cloudformation-custom-resource-response-euwest1.s3.amazonaws.com/r",  # other region
    f"https://{BUCKET}.s3.amazonaws.com.example.com/r",  # a suffix of someone else's
    f"https://{BUCKET}.s3.amazonaws.com:8443/r",  # another port
    f"https://user:pw@{BUCKET}.s3.amazonaws.com/r",  # a user part
    f"https://{BUCKET}.s3.eu-west-1.amazonaws.com/r",  # the region in the host is another
    "",
])
def test_a_response_url_that_is_not_cloudformations_is_neither_acted_on_nor_answered(
        url: str, puts: list[dict[str, Any]], stack: dict[str, str]) -> None:
    work = Work()
    body = handle({**event(), "ResponseURL": url}, Context(), work=work)
    assert body["Status"] == "FAILED"
    assert work.calls == []  # nothing done
    assert puts == []  # nothing sent anywhere


@pytest.mark.parametrize("host", [
    f"{BUCKET}.s3.amazonaws.com", f"{BUCKET}.s3.us-east-1.amazonaws.com",
    f"{BUCKET}.s3-us-east-1.amazonaws.com", f"{BUCKET}.s3.dualstack.us-east-1.amazonaws.com",
    f"{BUCKET.upper()}.S3.AMAZONAWS.COM",
])
def test_cloudformations_response_hosts_are_accepted(host: str) -> None:
    assert response_url_problem(f"https://{host}/arn/r?X-Amz-Signature=a", REGION) is None
    assert response_url_problem(f"https://{host}:443/r", REGION) is None


def test_china_regions_use_their_own_suffix() -> None:
    bucket = "cloudformation-custom-resource-response-cnnorth1"
    assert response_url_problem(f"https://{bucket}.s3.cn-north-1.amazonaws.com.cn/r",
                                "cn-north-1") is None
    assert response_url_problem(f"https://{bucket}.s3.cn-north-1.amazonaws.com/r",
                                "cn-north-1") is not None


def test_a_request_for_every_shard_goes_ahead(puts: list[dict[str, Any]],
                                              stack: dict[str, str]) -> None:
    work = Work()
    body = handle(event(ShardNames="default,b,c", Host="ignored.example.com"), Context(),
                  work=work)
    assert body["Status"] == "SUCCESS" and len(work.calls) == 1
    assert [p["body"]["Status"] for p in puts] == ["SUCCESS"]


def test_a_shards_request_at_its_proxy_goes_ahead(puts: list[dict[str, Any]],
                                                  stack: dict[str, str]) -> None:
    work = Work()
    body = handle(shard_request("b", stack["b"]), Context(), work=work)
    assert body["Status"] == "SUCCESS", body.get("Reason")
    assert [c["Host"] for c in work.calls] == [stack["b"]]


@pytest.mark.parametrize(("shard", "host", "more", "why"), [
    ("b", "db.attacker.example", {}, "Host is not the endpoint of shard 'b'"),
    ("b", "<c>", {}, "Host is not the endpoint of shard 'b'"),  # another shard's proxy
    ("d", "db.attacker.example", {}, "Shard 'd' is not a further shard"),
    ("default", "<b>", {}, "Shard 'default' is not a further shard"),
    ("b", "<b>", {"DbName": "postgres"}, "DbName 'postgres' is not this stack's"),
])
def test_a_shards_request_naming_what_is_not_the_stacks_is_answered_failed(
        shard: str, host: str, more: dict[str, Any], why: str, puts: list[dict[str, Any]],
        stack: dict[str, str]) -> None:
    if host.startswith("<"):
        host = stack[host.strip("<>")]
    work = Work()
    body = handle(shard_request(shard, host, **more), Context(), work=work)
    assert work.calls == []  # the owner's login never went anywhere
    assert body["Status"] == "FAILED" and why in body["Reason"]
    assert [p["body"] for p in puts] == [body]  # answered, so the stack does not wait


def test_a_shard_whose_proxy_does_not_exist_is_refused(puts: list[dict[str, Any]],
                                                       stack: dict[str, str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_SHARD_NAMES", "default,b,c,e")
    work = Work()
    body = handle(shard_request("e", "tierq-dev-proxy-e.proxy-x.us-east-1.rds.amazonaws.com"),
                  Context(), work=work)
    assert body["Status"] == "FAILED" and work.calls == []
    assert "Host is not the endpoint of shard 'e'" in body["Reason"]


def test_deleting_a_removed_shards_resource_is_answered_success(
        puts: list[dict[str, Any]], stack: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard taken out of ExtraShardNames: the parent's update sets the migrate function's
    TIERQ_SHARD_NAMES without it first, then deletes the shard's nested stack, whose custom
    resource sends Delete (a rollback deleting a shard stack just created does the same).
    A Delete does nothing, so it is answered SUCCESS though it names no shard of the stack:
    FAILED would leave the nested stack DELETE_FAILED."""
    monkeypatch.setenv("TIERQ_SHARD_NAMES", "default,b")  # c was just removed
    work = Work()
    delete = {**shard_request("c", stack["c"]), "RequestType": "Delete",
              "PhysicalResourceId": "tierq-db-migrations"}
    body = handle(delete, Context(), work=work)
    assert work.calls == []
    assert body["Status"] == "SUCCESS", body.get("Reason")
    assert [p["body"] for p in puts] == [body]
    # a Delete's ResponseURL is still checked: nothing is sent anywhere else
    body = handle({**delete, "ResponseURL": "https://collector.example.com/r"}, Context(),
                  work=work)
    assert body["Status"] == "FAILED" and len(puts) == 1
