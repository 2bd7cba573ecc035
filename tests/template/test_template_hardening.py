"""template.yaml and infra/shard.yaml, hardened for many tenants: every Aurora cluster refuses
connections without TLS, the migrate function checks a shard's request against that shard's
proxy. (The linters run in tests/template/test_template.py.)"""

from __future__ import annotations

import re
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


@pytest.mark.parametrize("which", ["template", "shard"])
def test_a_migrations_request_left_unanswered_fails_in_ten_minutes(which: str, single: dict,
                                                                  shard_stack: dict) -> None:
    """The migrate function does not answer a ResponseURL outside CloudFormation's bucket
    (it would post the stack's result to whoever named it): the stack's own request then
    fails at the resource's ServiceTimeout, 600 s, not CloudFormation's default hour."""
    resources = (single if which == "template" else shard_stack)["Resources"]
    migrations = resources["DbMigrations"]
    assert migrations["Type"] == "Custom::TierqMigrations"
    assert migrations["Properties"]["ServiceTimeout"] == 600


# ---------------------------------------------------------------- shared AWS limits


@pytest.mark.parametrize(("function", "parameter", "condition"), [
    ("ClaimFunction", "ClaimReservedConcurrency", "HasClaimConcurrencyCap"),
    ("DispatcherFunction", "DispatcherReservedConcurrency", "HasDispatcherConcurrencyCap"),
])
def test_reserved_concurrency_caps_the_claim_and_dispatcher_functions(
        function: str, parameter: str, condition: str, single: dict) -> None:
    props = single["Resources"][function]["Properties"]
    assert props["ReservedConcurrentExecutions"] == {"Fn::If": [
        condition, {"Ref": parameter}, {"Ref": "AWS::NoValue"}]}
    # 0 means no reservation (a reservation of 0 would stop the function)
    assert single["Conditions"][condition] == {"Fn::Not": [{"Fn::Equals": [
        {"Ref": parameter}, 0]}]}
    declared = single["Parameters"][parameter]
    assert declared["Default"] > 0 and declared["MinValue"] == 0
    # the description says where it comes from and what must stay free
    assert "at least 100 must stay unreserved" in " ".join(declared["Description"].split())


def test_the_defaults_leave_the_accounts_pool_its_unreserved_hundred(single: dict) -> None:
    params, resources = single["Parameters"], single["Resources"]
    reserved = params["ClaimReservedConcurrency"]["Default"] + params[
        "DispatcherReservedConcurrency"]["Default"]
    reserved += sum(r["Properties"]["ReservedConcurrentExecutions"]
                    for r in resources.values()
                    if r["Type"] == "AWS::Serverless::Function"
                    and isinstance(r["Properties"].get("ReservedConcurrentExecutions"), int))
    assert reserved <= 1000 - 100  # Lambda's default concurrency per region, less 100
    # one tenant's long polls alone never fill the claim function, nor do all callers'
    assert params["TenantLongPolls"]["Default"] < params["ClaimReservedConcurrency"]["Default"]
    assert params["LongPollsPercent"]["Default"] < 100


def test_the_tenant_limits_reach_every_function(single: dict) -> None:
    env = single["Globals"]["Function"]["Environment"]["Variables"]
    assert env["TIERQ_TENANT_REQUESTS_PER_SECOND"] == {"Ref": "TenantRequestsPerSecond"}
    assert env["TIERQ_TENANT_REQUESTS_BURST"] == {"Ref": "TenantRequestsBurst"}
    assert env["TIERQ_TENANT_LONG_POLLS"] == {"Ref": "TenantLongPolls"}
    # the cap over all callers' long polls follows the claim function's reservation
    assert env["TIERQ_CLAIM_RESERVED_CONCURRENCY"] == {"Ref": "ClaimReservedConcurrency"}
    assert env["TIERQ_LONG_POLLS_PERCENT"] == {"Ref": "LongPollsPercent"}
    from tierq.config import Settings

    defaults = Settings()
    params = single["Parameters"]
    assert float(params["TenantRequestsPerSecond"]["Default"]) == \
        defaults.tenant_requests_per_second
    assert params["TenantRequestsBurst"]["Default"] == defaults.tenant_requests_burst
    assert params["TenantLongPolls"]["Default"] == defaults.tenant_long_polls
    assert params["LongPollsPercent"]["Default"] == defaults.long_polls_percent
    deployed = Settings(claim_reserved_concurrency=params["ClaimReservedConcurrency"]["Default"],
                        long_polls_percent=params["LongPollsPercent"]["Default"])
    assert 0 < deployed.long_polls_cap < params["ClaimReservedConcurrency"]["Default"]


def test_the_glue_job_has_the_tenants_warm_share_as_the_functions(single: dict) -> None:
    """ElastiCache refuses INFO: without the capacity a bulk warm-up would have no bound."""
    env = single["Globals"]["Function"]["Environment"]["Variables"]
    job = single["Resources"]["FeedQueueJob"]["Properties"]["DefaultArguments"]
    for name in ("TIERQ_WARM_CAPACITY_BYTES", "TIERQ_TENANT_WARM_MAX_BYTES"):
        assert job[f"--{name}"] == env[name]


def rate_parameter_accepts(template: dict, value: str) -> bool:
    declared = template["Parameters"]["TenantRequestsPerSecond"]
    assert declared["Type"] == "String" and "MinValue" not in declared  # (a String's rule)
    # CloudFormation matches the whole value (Java's regex; this one reads the same in Python)
    return re.fullmatch(declared["AllowedPattern"], value) is not None


def settings_accept_rate(value: str) -> bool:
    from tierq.config import Settings, SettingsError

    try:
        Settings.from_environ({"TIERQ_TENANT_REQUESTS_PER_SECOND": value})
    except SettingsError:
        return False
    return True


@pytest.mark.parametrize("value", [
    "0", "0.0", "0.000", "0.001", "0.005", "0.0099", "0.01", "0.010", "0.05", "0.5", "1", "1.5",
    "100", "999999.999", "1000000", "1000000.0", "1000000.01", "1000001", "10000000",
])
def test_the_request_rate_parameter_takes_what_the_settings_take(single: dict,
                                                                 value: str) -> None:
    """CloudFormation accepts a TenantRequestsPerSecond exactly when Settings does: a stack
    never deploys functions that refuse their own settings."""
    assert rate_parameter_accepts(single, value) == settings_accept_rate(value)


@pytest.mark.parametrize("value", ["", "abc", "-1", "-0.01", ".5", "1.", "00.5", "1e3", " 1"])
def test_the_request_rate_parameter_takes_decimal_notation_only(single: dict,
                                                                value: str) -> None:
    assert not rate_parameter_accepts(single, value)


def test_the_tenant_limit_parameters_stay_within_the_settings_bounds(single: dict) -> None:
    from tierq.config import Settings

    params = single["Parameters"]
    for parameter, field in (("TenantRequestsBurst", "tenant_requests_burst"),
                             ("TenantLongPolls", "tenant_long_polls"),
                             ("ClaimReservedConcurrency", "claim_reserved_concurrency"),
                             ("LongPollsPercent", "long_polls_percent")):
        bounds = Settings.fields[field]
        assert bounds.ge is not None and bounds.le is not None, field
        assert params[parameter]["MinValue"] >= bounds.ge, parameter
        assert params[parameter]["MaxValue"] <= bounds.le, parameter


# ---------------------------------------------------------------- the cache's users


def test_the_cache_authenticates_every_client(single: dict) -> None:
    from tierq.dal.valkey_auth import ACCESS_STRING

    resources = single["Resources"]
    cache = resources["ValkeyCache"]["Properties"]
    assert cache["UserGroupId"] == {"Ref": "CacheUserGroup"}
    group = resources["CacheUserGroup"]["Properties"]
    assert group["UserIds"] == [{"Ref": "CacheDefaultUser"}, {"Ref": "CacheAppUser"}]
    default = resources["CacheDefaultUser"]["Properties"]
    assert default["UserName"] == "default" and default["AccessString"].startswith("off ")
    app = resources["CacheAppUser"]["Properties"]
    assert app["AuthenticationMode"] == {"Type": "iam"}
    assert app["UserName"] == app["UserId"]  # IAM authentication needs them equal
    assert app["AccessString"] == ACCESS_STRING
    env = single["Globals"]["Function"]["Environment"]["Variables"]
    assert env["VALKEY_IAM_USER"] == {"Ref": "CacheAppUser"}
    assert env["VALKEY_CACHE_NAME"] == {"Ref": "ValkeyCache"}
    job = resources["FeedQueueJob"]["Properties"]["DefaultArguments"]
    assert job["--VALKEY_IAM_USER"] == {"Ref": "CacheAppUser"}
    assert job["--VALKEY_CACHE_NAME"] == {"Ref": "ValkeyCache"}
    # every function and the job may connect as that user, to that cache only
    [statement] = resources["CacheConnectPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "elasticache:Connect"
    assert statement["Resource"] == [{"Fn::GetAtt": ["ValkeyCache", "ARN"]},
                                     {"Fn::GetAtt": ["CacheAppUser", "Arn"]}]
    functions = [r for r in resources.values() if r["Type"] == "AWS::Serverless::Function"]
    assert functions and all({"Ref": "CacheConnectPolicy"} in r["Properties"]["Policies"]
                             for r in functions)
    role = resources["GlueJobRole"]["Properties"]
    assert {"Ref": "CacheConnectPolicy"} in role["ManagedPolicyArns"]
