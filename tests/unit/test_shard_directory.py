"""The shards of an AWS deployment, found by the template's naming convention
(tierq.dal.shards.shards_from_settings): TIERQ_SHARD_NAMES, the default shard at DB_HOST
with DB_SECRET_ARN's login, each further one at its Parameter Store entry. moto stands in for
Secrets Manager and Parameter Store."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import boto3
import pytest

from tierq.config import Settings, SettingsError
from tierq.dal.shards import ShardConfigError, shards_from_settings

REGION = "us-east-1"


@dataclass
class Aws:
    secrets: object
    ssm: object
    run: str  # unique per test: Powertools caches parameters and secrets per process

    def login(self, user: str, password: str) -> str:
        return self.secrets.create_secret(  # type: ignore[attr-defined,no-any-return]
            Name=f"tierq/{self.run}/{user}",
            SecretString=json.dumps({"username": user, "password": password,
                                     "host": "cluster.example", "port": 5432}))["ARN"]

    def entry(self, path: str, name: str, value: object) -> None:
        self.ssm.put_parameter(  # type: ignore[attr-defined]
            Name=f"{path}/{name}", Type="String",
            Value=value if isinstance(value, str) else json.dumps(value))


@pytest.fixture
def aws(aws_credentials: None) -> Iterator[Aws]:
    yield Aws(boto3.client("secretsmanager", region_name=REGION),
              boto3.client("ssm", region_name=REGION), f"r{time.time_ns()}")


def settings(arn: str, environ: dict[str, str]) -> Settings:
    return Settings.from_environ(environ, DB_SECRET_ARN=arn, DB_HOST="proxy.example",
                                 DB_NAME="tierq", DB_SSLMODE="disable")


def one(environ: dict[str, str]) -> Settings:
    """One database's settings with ``environ``'s shard variables (nothing of the process)."""
    return Settings.from_environ({"DATABASE_URL": "postgresql://h/one", **environ})


def shard(aws: Aws, path: str, name: str) -> tuple[str, str]:
    app, owner = aws.login(f"app_{name}", f"pw-{name}"), aws.login(f"own_{name}", f"ow-{name}")
    aws.entry(path, name, {"host": f"{name}.proxy.example", "dbname": f"tierq_{name}",
                           "app_secret": app, "owner_secret": owner})
    return app, owner


@pytest.mark.slow
def test_the_default_shard_is_where_db_host_says_and_the_others_where_their_entries_say(
        aws: Aws) -> None:
    path = f"/tierq/{aws.run}/shards"
    default_arn = aws.login("app_default", "pw-default")
    shard(aws, path, "b")
    shard(aws, path, "c")
    aws.entry(path, "gone", {"host": "x"})  # an entry of a name no longer listed: unread
    env = {"TIERQ_SHARD_NAMES": "default, b,c", "TIERQ_SHARD_DIRECTORY": path + "/"}
    specs = shards_from_settings(settings(default_arn, env))
    assert [s.name for s in specs] == ["default", "b", "c"]
    where = [(u.hostname, u.port, u.path, u.username, u.password)
             for u in (urlsplit(s.url) for s in specs)]
    assert where == [("proxy.example", 5432, "/tierq", "app_default", "pw-default"),
                     ("b.proxy.example", 5432, "/tierq_b", "app_b", "pw-b"),
                     ("c.proxy.example", 5432, "/tierq_c", "app_c", "pw-c")]
    owners = shards_from_settings(settings(default_arn, env), login="owner")
    assert [urlsplit(s.url).username for s in owners] == ["app_default", "own_b", "own_c"]


def test_each_new_connection_reads_a_rotated_secret(aws: Aws) -> None:
    path = f"/tierq/{aws.run}/shards"
    app, _ = shard(aws, path, "b")
    specs = shards_from_settings(
        settings(aws.login("app_default", "p"),
                 {"TIERQ_SHARD_NAMES": "default,b", "TIERQ_SHARD_DIRECTORY": path}))
    resolve = specs[1].resolve_url
    assert resolve is not None
    aws.secrets.put_secret_value(  # type: ignore[attr-defined]
        SecretId=app, SecretString=json.dumps({"username": "app_b_clone", "password": "new"}))
    assert urlsplit(resolve(False)).username == "app_b"  # cached, as the pool's first try
    assert (urlsplit(resolve(True)).username, urlsplit(resolve(True)).password) == (
        "app_b_clone", "new")


def test_urls_win_and_without_names_there_is_one_default_shard(aws: Aws) -> None:
    specs = shards_from_settings(one(
        {"TIERQ_SHARD_URLS": "a=postgresql://h/a,b=postgresql://h/b",
         "TIERQ_SHARD_NAMES": "x,y"}))
    assert [(s.name, s.url) for s in specs] == [("a", "postgresql://h/a"),
                                               ("b", "postgresql://h/b")]
    only = shards_from_settings(one({}))
    assert [(s.name, s.url, s.resolve_url) for s in only] == [
        ("default", "postgresql://h/one", None)]
    named = shards_from_settings(one({"TIERQ_SHARD_NAMES": "blue"}))
    assert [(s.name, s.url) for s in named] == [("blue", "postgresql://h/one")]


def test_further_shards_without_a_directory_are_refused_by_name() -> None:
    with pytest.raises(ShardConfigError, match="TIERQ_SHARD_DIRECTORY"):
        shards_from_settings(one({"TIERQ_SHARD_NAMES": "default,b"}),
                             directory=lambda path: {})


@pytest.mark.parametrize(("env", "says"), [
    ({"TIERQ_SHARD_NAMES": "default,,b"}, "TIERQ_SHARD_NAMES: item 2 is empty"),
    ({"TIERQ_SHARD_NAMES": " , "}, "TIERQ_SHARD_NAMES is empty"),
    ({"TIERQ_SHARD_NAMES": "default,B"}, "lower-case"),
    ({"TIERQ_SHARD_NAMES": "default,default"}, "are the same"),
    ({"TIERQ_SHARD_URLS": "a=postgresql://h/a,,"}, "TIERQ_SHARD_URLS: item 2 is empty"),
    ({"TIERQ_SHARD_URLS": "postgresql://h/"}, "names no database"),
])
def test_bad_names_or_urls_are_refused_by_the_settings_naming_the_variable(
        env: dict[str, str], says: str) -> None:
    with pytest.raises(SettingsError, match=says) as refused:
        one(env)
    assert next(iter(env)) in str(refused.value)  # the variable, named in the message


def test_a_missing_or_broken_entry_is_refused_naming_the_parameter(aws: Aws) -> None:
    path = f"/tierq/{aws.run}/shards"
    env = {"TIERQ_SHARD_NAMES": "default,b,c", "TIERQ_SHARD_DIRECTORY": path}
    base = one(env)
    shard(aws, path, "b")
    with pytest.raises(ShardConfigError, match=f"no entry {path}/c"):
        shards_from_settings(base)
    for value, says in (("not json", "is not JSON"), ({"host": "h"}, "lacks app_secret"),
                        ([1], "not a JSON object")):
        with pytest.raises(ShardConfigError, match=says):
            shards_from_settings(base, directory=lambda p, v=value: {  # type: ignore[misc]
                "b": json.dumps({"host": "h", "app_secret": "a", "owner_secret": "o"}),
                "c": v if isinstance(v, str) else json.dumps(v)})


def test_the_default_shard_needs_its_own_variables() -> None:
    with pytest.raises(RuntimeError, match="DATABASE_URL"):
        shards_from_settings(Settings.from_environ({"TIERQ_SHARD_NAMES": "default"}))


def test_the_functions_serve_every_shard_the_convention_names(aws: Aws) -> None:
    from tierq.aws import runtime

    path = f"/tierq/{aws.run}/shards"
    shard(aws, path, "b")
    arn = aws.login("app_default", "p")
    # a stack without further shards is served as without shards
    assert runtime.shard_specs(settings(arn, {"TIERQ_SHARD_NAMES": "default"})) is None
    specs = runtime.shard_specs(settings(arn, {"TIERQ_SHARD_NAMES": "default,b",
                                               "TIERQ_SHARD_DIRECTORY": path}))
    assert specs is not None
    assert [(s.name, urlsplit(s.url).hostname) for s in specs] == [
        ("default", "proxy.example"), ("b", "b.proxy.example")]
