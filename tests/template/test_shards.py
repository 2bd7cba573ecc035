"""template.yaml's PostgreSQL shards: the default shard keeps the resources (and logical ids)
a stack without shards had; each name of ExtraShardNames gets a nested stack
(infra/shard.yaml) with its own cluster, proxy, rotated secrets and migrations, and an entry
in Parameter Store under the names the functions' policies and tierq.dal.shards expect; the
functions learn the shard names from the migration step's answer. (The linters run in
tests/template/test_template.py.)"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import pytest
import yaml

from tests.support.template import FUNCTIONS, REPO, CfnLoader, load_template
from tierq.dal.shards import SHARD_NAME, DirectoryEntry

SHARD_TEMPLATE = REPO / "infra" / "shard.yaml"
# what a single-shard stack has had since before shards: these must stay as they are, or an
# update would replace the cluster (and its data) or disable the secrets' rotation
DEFAULT_SHARD = {
    "DbSecret": "AWS::SecretsManager::Secret",
    "DbAppSecret": "AWS::SecretsManager::Secret",
    "DbCluster": "AWS::RDS::DBCluster",
    "DbInstance1": "AWS::RDS::DBInstance",
    "DbInstance2": "AWS::RDS::DBInstance",
    "DbSecretAttachment": "AWS::SecretsManager::SecretTargetAttachment",
    "DbAppSecretAttachment": "AWS::SecretsManager::SecretTargetAttachment",
    "DbSecretRotation": "AWS::SecretsManager::RotationSchedule",
    "DbAppSecretRotation": "AWS::SecretsManager::RotationSchedule",
    "DbProxy": "AWS::RDS::DBProxy",
    "DbProxyTargetGroup": "AWS::RDS::DBProxyTargetGroup",
    "DbMigrations": "Custom::TierqMigrations",
}


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def sharded() -> dict[str, Any]:
    return load_template({"ExtraShardNames": "b,c"})


@pytest.fixture(scope="module")
def shard_stack() -> dict[str, Any]:
    return yaml.load(SHARD_TEMPLATE.read_text(), Loader=CfnLoader)


def names_in(text: str, **values: str) -> str:
    """A !Sub string with its variables set (``AWS::StackName`` as ``stack``)."""
    return re.sub(r"\$\{([^}]+)\}", lambda m: values[m[1].replace("AWS::", "")], text)


def test_a_single_shard_stack_keeps_its_resources_and_has_no_nested_shard(
        single: dict, sharded: dict) -> None:
    for template in (single, sharded):
        resources = template["Resources"]
        assert {name: resources[name]["Type"] for name in DEFAULT_SHARD} == DEFAULT_SHARD
        assert resources["DbCluster"]["DeletionPolicy"] == "Snapshot"
    assert not [name for name in single["Resources"] if name.startswith("DbShard")]
    assert [name for name in sharded["Resources"] if name.startswith("DbShard")] == [
        "DbShardb", "DbShardc"]
    assert single["Parameters"]["DefaultShardName"]["Default"] == "default"
    assert single["Parameters"]["ExtraShardNames"]["Default"] == ""


def test_each_further_shard_is_a_nested_stack_given_every_parameter_it_declares(
        sharded: dict, shard_stack: dict) -> None:
    for name in ("b", "c"):
        stack = sharded["Resources"][f"DbShard{name}"]
        assert stack["Type"] == "AWS::Serverless::Application"
        props = stack["Properties"]
        assert props["Location"] == "infra/shard.yaml"
        given = props["Parameters"]
        assert set(given) == set(shard_stack["Parameters"])
        assert given["ShardName"] == name
        assert given["ParentStackName"] == {"Ref": "AWS::StackName"}
        assert given["MigrateFunctionArn"] == {"Fn::GetAtt": ["MigrateFunction", "Arn"]}
        assert given["ProxyRoleArn"] == {"Fn::GetAtt": ["DbProxyRole", "Arn"]}
        # the same settings as the default shard's, from the same parameters
        for setting in ("DbName", "AuroraMaxCapacity", "DbDeletionProtection",
                        "ProxyBorrowTimeoutSeconds", "SecretRotationDays"):
            assert given[setting] == {"Ref": setting}
        # its migrations need the migrate function's egress, as DbMigrations
        assert set(stack["DependsOn"]) <= set(sharded["Resources"]["DbMigrations"]["DependsOn"])


def test_a_shard_stack_has_what_the_default_shard_has(shard_stack: dict,
                                                       single: dict) -> None:
    resources = shard_stack["Resources"]
    mine = {name: resources[name]["Type"] for name in DEFAULT_SHARD}
    assert mine == DEFAULT_SHARD
    assert resources["DbCluster"]["DeletionPolicy"] == "Snapshot"
    assert resources["DbCluster"]["Properties"]["DeletionProtection"] == {
        "Ref": "DbDeletionProtection"}
    assert shard_stack["Transform"] == "AWS::SecretsManager-2024-09-16"
    for rotation, kind in (("DbSecretRotation", "PostgreSQLSingleUser"),
                           ("DbAppSecretRotation", "PostgreSQLMultiUser")):
        assert resources[rotation]["Properties"]["HostedRotationLambda"]["RotationType"] == kind
        # the first rotation clones the login this shard's migrations make
        assert "DbMigrations" in resources[rotation]["DependsOn"]
        assert rotation == "DbAppSecretRotation" or (
            "DbAppSecretRotation" in resources[rotation]["DependsOn"])
    assert resources["DbProxyTargetGroup"]["DependsOn"] == "DbInstance1"
    pool = resources["DbProxyTargetGroup"]["Properties"]["ConnectionPoolConfigurationInfo"]
    default = single["Resources"]["DbProxyTargetGroup"]["Properties"][
        "ConnectionPoolConfigurationInfo"]
    assert pool == default


def test_a_shards_own_migrations_name_it_as_the_migrate_function_reads_them(
        shard_stack: dict) -> None:
    migrations = shard_stack["Resources"]["DbMigrations"]
    assert migrations["Type"] == "Custom::TierqMigrations"
    props = migrations["Properties"]
    assert props["ServiceToken"] == {"Ref": "MigrateFunctionArn"}
    # tierq.aws.custom_resource.migrate_shards: one shard when OwnerSecretArn is given
    assert {key: props[key] for key in ("Shard", "Host", "DbName", "OwnerSecretArn",
                                        "AppSecretArn")} == {
        "Shard": {"Ref": "ShardName"}, "Host": {"Fn::GetAtt": ["DbProxy", "Endpoint"]},
        "DbName": {"Ref": "DbName"}, "OwnerSecretArn": {"Ref": "DbSecret"},
        "AppSecretArn": {"Ref": "DbAppSecret"}}
    assert migrations["DependsOn"] == "DbProxyTargetGroup"


def test_the_entry_is_written_once_migrated_where_the_functions_look_and_parses(
        shard_stack: dict, single: dict, sharded: dict) -> None:
    entry = shard_stack["Resources"]["ShardEntry"]
    assert entry["Type"] == "AWS::SSM::Parameter"
    assert entry["DependsOn"] == "DbMigrations"
    name = names_in(entry["Properties"]["Name"]["Fn::Sub"], ParentStackName="stack",
                    ShardName="b")
    directory = single["Globals"]["Function"]["Environment"]["Variables"][
        "TIERQ_SHARD_DIRECTORY"]
    assert name == names_in(directory["Fn::Sub"], StackName="stack") + "/b"
    value = names_in(entry["Properties"]["Value"]["Fn::Sub"], **{
        "DbProxy.Endpoint": "b.proxy", "DbName": "tierq", "DbAppSecret": "arn:app",
        "DbSecret": "arn:owner"})
    assert DirectoryEntry.parse(name, value) == DirectoryEntry("b.proxy", "tierq", "arn:app",
                                                               "arn:owner")
    # and DbMigrations waits for each entry (so the shard is migrated and findable)
    migrations = sharded["Resources"]["DbMigrations"]["Properties"]
    assert {key: value for key, value in migrations.items() if key.startswith("Shard")
            and key != "ShardNames"} == {
        f"Shard{s}": {"Fn::GetAtt": [{"Fn::Sub": f"DbShard{s}"}, "Outputs.Entry"]}
        for s in ("b", "c")}
    assert shard_stack["Outputs"]["Entry"]["Value"] == {"Ref": "ShardEntry"}


def test_the_functions_may_read_what_the_naming_convention_names(
        shard_stack: dict, sharded: dict) -> None:
    resources = sharded["Resources"]
    secret = {kind: names_in(resources_name, ParentStackName="stack", ShardName="b")
              for kind, resources_name in (
                  ("owner", shard_stack["Resources"]["DbSecret"]["Properties"]["Name"][
                      "Fn::Sub"]),
                  ("app", shard_stack["Resources"]["DbAppSecret"]["Properties"]["Name"][
                      "Fn::Sub"]))}
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:{}-AbCdEf"
    entry = names_in(shard_stack["Resources"]["ShardEntry"]["Properties"]["Name"]["Fn::Sub"],
                     ParentStackName="stack", ShardName="b")
    pseudo = {"Partition": "aws", "Region": "eu-west-1", "AccountId": "123456789012",
              "StackName": "stack"}

    def granted(statement: dict[str, Any]) -> list[str]:
        listed = statement["Resource"]
        listed = listed if isinstance(listed, list) else [listed]
        out = []
        for item in listed:
            if "Fn::If" in item:
                condition, item, otherwise = item["Fn::If"]
                assert condition == "HasExtraShards" and otherwise == {"Ref": "AWS::NoValue"}
            if "Fn::Sub" in item:
                out.append(names_in(item["Fn::Sub"], **pseudo))
        return out

    policy = resources["ShardDirectoryPolicy"]
    assert policy["Condition"] == "HasExtraShards"
    ssm, secrets = policy["Properties"]["PolicyDocument"]["Statement"]
    assert "ssm:GetParametersByPath" in ssm["Action"]
    assert any(fnmatch.fnmatchcase(f"arn:aws:ssm:eu-west-1:123456789012:parameter{entry}", g)
               for g in granted(ssm))
    [app_secrets] = granted(secrets)
    assert fnmatch.fnmatchcase(arn.format(secret["app"]), app_secrets)
    assert not fnmatch.fnmatchcase(arn.format(secret["owner"]), app_secrets)
    shard_policy = {"Fn::If": ["HasExtraShards", {"Ref": "ShardDirectoryPolicy"},
                               {"Ref": "AWS::NoValue"}]}
    for fn_id in FUNCTIONS:
        assert shard_policy in resources[fn_id]["Properties"]["Policies"], fn_id
    migrate = resources["MigrateFunction"]["Properties"]["Policies"][0]["Statement"][0]
    assert any(fnmatch.fnmatchcase(arn.format(secret["owner"]), g) for g in granted(migrate))
    proxy = resources["DbProxyRole"]["Properties"]["Policies"][0]["PolicyDocument"][
        "Statement"][0]
    assert all(any(fnmatch.fnmatchcase(arn.format(s), g) for g in granted(proxy))
               for s in secret.values())


def test_functions_learn_the_shards_from_the_migration_step_and_migrate_from_parameters(
        single: dict, sharded: dict) -> None:
    env = single["Globals"]["Function"]["Environment"]["Variables"]
    assert env["TIERQ_SHARD_NAMES"] == {"Fn::GetAtt": ["DbMigrations", "Shards"]}
    for template in (single, sharded):
        own = template["Resources"]["MigrateFunction"]["Properties"]["Environment"][
            "Variables"]
        names = template["Resources"]["DbMigrations"]["Properties"]["ShardNames"]
        assert own["TIERQ_SHARD_NAMES"] == names  # (else a cycle through DbMigrations)
        assert names["Fn::If"][0] == "HasExtraShards"
    assert sharded["Outputs"]["ShardNames"]["Value"] == {"Fn::GetAtt": ["DbMigrations",
                                                                        "Shards"]}
    assert {k for k in sharded["Outputs"] if k.startswith("ProxyEndpoint")} == {
        "ProxyEndpoint", "ProxyEndpointb", "ProxyEndpointc"}


def test_shard_names_are_checked_where_they_are_given(single: dict,
                                                      shard_stack: dict) -> None:
    extra = single["Parameters"]["ExtraShardNames"]["AllowedPattern"]
    assert extra == "^([a-z][a-z0-9]{0,15})?$"
    assert shard_stack["Parameters"]["ShardName"]["AllowedPattern"] == extra.replace(
        "([", "[").replace("})?$", "}$")
    for name in ("b", "shard2", "a" * 16):  # a template's names are the runtime's too
        assert SHARD_NAME.fullmatch(name) and re.fullmatch(extra, name)
    assert single["Parameters"]["DefaultShardName"]["AllowedPattern"] == SHARD_NAME.pattern
    [assertion] = single["Rules"]["DistinctShardNames"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Not": [{"Fn::Contains": [
        {"Ref": "ExtraShardNames"}, {"Ref": "DefaultShardName"}]}]}
