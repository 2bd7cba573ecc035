"""template.yaml and infra/shard.yaml, hardened for many tenants: every Aurora cluster refuses
connections without TLS, the migrate function checks a shard's request against that shard's
proxy. (The linters run in tests/template/test_template.py.)"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.template import REPO, CfnLoader, load_template

SHARD_TEMPLATE = REPO / "infra" / "shard.yaml"


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def sharded() -> dict[str, Any]:
    return load_template({"ExtraShardNames": "b,c"})


@pytest.fixture(scope="module")
def shard_stack() -> dict[str, Any]:
    return yaml.load(SHARD_TEMPLATE.read_text(), Loader=CfnLoader)


# ---------------------------------------------------------------- TLS to Aurora


@pytest.mark.parametrize("which", ["template", "shard"])
def test_every_cluster_refuses_connections_without_tls(which: str, single: dict,
                                                       shard_stack: dict) -> None:
    resources = (single if which == "template" else shard_stack)["Resources"]
    clusters = {name: r for name, r in resources.items() if r["Type"] == "AWS::RDS::DBCluster"}
    assert list(clusters) == ["DbCluster"]
    group = clusters["DbCluster"]["Properties"]["DBClusterParameterGroupName"]
    assert group == {"Ref": "DbClusterParameterGroup"}
    props = resources["DbClusterParameterGroup"]["Properties"]
    assert resources["DbClusterParameterGroup"]["Type"] == "AWS::RDS::DBClusterParameterGroup"
    assert props["Parameters"] == {"rds.force_ssl": "1"}
    # the family of the cluster's engine: aurora-postgresql<major of AuroraEngineVersion>
    assert props["Family"] == {"Fn::Join": ["", ["aurora-postgresql", {"Fn::Select": [
        0, {"Fn::Split": [".", {"Ref": "AuroraEngineVersion"}]}]}]]}


# ---------------------------------------------------------------- the migrate function


def test_the_migrate_function_knows_the_shards_proxies_by_the_name_their_stack_gives(
        sharded: dict, shard_stack: dict) -> None:
    env = sharded["Resources"]["MigrateFunction"]["Properties"]["Environment"]["Variables"]
    assert env["TIERQ_SHARD_PROXY_PREFIX"] == {"Fn::Sub": "${AWS::StackName}-proxy-"}
    proxy_name = shard_stack["Resources"]["DbProxy"]["Properties"]["DBProxyName"]
    assert proxy_name == {"Fn::Sub": "${ParentStackName}-proxy-${ShardName}"}
    nested = sharded["Resources"]["DbShardb"]["Properties"]["Parameters"]
    assert nested["ParentStackName"] == {"Ref": "AWS::StackName"}
    # the default shard: DB_HOST (Globals), the proxy the function was deployed with
    globals_env = sharded["Globals"]["Function"]["Environment"]["Variables"]
    assert globals_env["DB_HOST"] == {"Fn::GetAtt": ["DbProxy", "Endpoint"]}
    # (a proxy's ARN carries a generated id, not its name), and only with further shards
    [guarded] = [policy["Fn::If"] for policy in
                 sharded["Resources"]["MigrateFunction"]["Properties"]["Policies"]
                 if "rds:DescribeDBProxies" in str(policy)]
    condition, granted, otherwise = guarded
    assert condition == "HasExtraShards" and otherwise == {"Ref": "AWS::NoValue"}
    [describe] = granted["Statement"]
    assert describe["Action"] == "rds:DescribeDBProxies"
    assert describe["Resource"]["Fn::Sub"].endswith(":db-proxy:*")
