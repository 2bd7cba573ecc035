"""template.yaml, database side: who logs in with which secret, both secrets rotated by
functions that can reach the cluster and Secrets Manager, the proxy knowing both logins,
its borrow timeout below the functions' timeout, and TLS that verifies the proxy.
(The linters run in tests/template/test_template.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.template import FUNCTIONS, load_template

yaml = pytest.importorskip("yaml")


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]


def ref(name: str) -> dict[str, str]:
    return {"Ref": name}


def secrets_read(resource: dict[str, Any]) -> list[Any]:
    found = []
    for policy in resource["Properties"]["Policies"]:
        # (a managed policy's !Ref, or the dispatcher's !If on the consumer allow-list)
        for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
            if statement["Action"] == "secretsmanager:GetSecretValue":
                res = statement["Resource"]
                found.extend(res if isinstance(res, list) else [res])
    return found


def test_the_transform_for_hosted_rotation_runs_before_sam(template: dict) -> None:
    transforms = template["Transform"]
    assert transforms[-1] == "AWS::Serverless-2016-10-31"
    assert transforms.index("AWS::SecretsManager-2024-09-16") < len(transforms) - 1
    # Fn::ForEach first, so that what it generates goes through the others
    assert transforms[0] == "AWS::LanguageExtensions"


def test_every_function_but_migrate_logs_in_as_the_application(template: dict,
                                                                resources: dict) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["DB_SECRET_ARN"] == ref("DbAppSecret")
    assert env["DB_SSLMODE"] == "verify-full"  # with DB_SSLROOTCERT's default, system
    for fn_id in FUNCTIONS:
        fn = resources[fn_id]
        own = fn["Properties"].get("Environment", {}).get("Variables", {})
        if fn_id == "MigrateFunction":
            assert own["DB_SECRET_ARN"] == ref("DbSecret")
            assert own["DB_APP_SECRET_ARN"] == ref("DbAppSecret")
            # (and, with further shards, their owners' secrets: tests/template/test_shards.py)
            assert secrets_read(fn)[:2] == [ref("DbSecret"), ref("DbAppSecret")]
            assert [r["Fn::If"][0] for r in secrets_read(fn)[2:]] == ["HasExtraShards"]
        else:
            assert "DB_SECRET_ARN" not in own, fn_id
            assert secrets_read(fn) == [ref("DbAppSecret")], fn_id


def test_the_glue_job_logs_in_as_the_application(resources: dict) -> None:
    job = resources["FeedQueueJob"]["Properties"]["DefaultArguments"]
    assert job["--DB_SECRET_ARN"] == ref("DbAppSecret")
    role = resources["GlueJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]
    read = [s for s in role["Statement"] if s["Action"] == "secretsmanager:GetSecretValue"]
    assert [s["Resource"] for s in read] == [ref("DbAppSecret")]


def test_the_application_secret_names_its_master_for_alternating_users(
        resources: dict) -> None:
    template = resources["DbAppSecret"]["Properties"]["GenerateSecretString"][
        "SecretStringTemplate"]["Fn::Sub"]
    assert '"masterarn": "${DbSecret}"' in template and "${DbAppUsername}" in template
    attached = {r["Properties"]["SecretId"]["Ref"] for r in resources.values()
                if r["Type"] == "AWS::SecretsManager::SecretTargetAttachment"}
    assert attached == {"DbSecret", "DbAppSecret"}  # host, port, engine for the rotations


@pytest.mark.parametrize(("schedule", "secret", "kind"), [
    ("DbSecretRotation", "DbSecret", "PostgreSQLSingleUser"),
    ("DbAppSecretRotation", "DbAppSecret", "PostgreSQLMultiUser"),
])
def test_both_secrets_rotate_from_inside_the_vpc_after_the_migrations(
        resources: dict, schedule: str, secret: str, kind: str) -> None:
    rotation = resources[schedule]
    props = rotation["Properties"]
    assert rotation["Type"] == "AWS::SecretsManager::RotationSchedule"
    assert props["SecretId"] == ref(secret)
    hosted = props["HostedRotationLambda"]
    assert hosted["RotationType"] == kind
    assert hosted["VpcSubnetIds"] == {"Fn::Join": [",", [ref("PrivateSubnet1"),
                                                         ref("PrivateSubnet2")]]}
    assert hosted["VpcSecurityGroupIds"] == ref("RotationSecurityGroup")
    if kind == "PostgreSQLMultiUser":
        assert hosted["MasterSecretArn"] == ref("DbSecret")
    # the first (immediate) rotation clones the login the migrate function creates
    assert "DbMigrations" in rotation["DependsOn"]
    assert props["RotationRules"]["AutomaticallyAfterDays"] == ref("SecretRotationDays")


def test_the_rotation_functions_reach_the_cluster_and_secrets_manager(resources: dict) -> None:
    group = resources["RotationSecurityGroup"]["Properties"]
    assert [(r["FromPort"], r.get("CidrIp")) for r in group["SecurityGroupEgress"]] == [
        (443, "0.0.0.0/0")]  # Secrets Manager through the NAT
    egress = resources["RotationToDbEgress"]["Properties"]
    assert egress["DestinationSecurityGroupId"] == ref("DbSecurityGroup")
    ingress = resources["DbFromRotationIngress"]["Properties"]
    assert ingress["GroupId"] == ref("DbSecurityGroup")
    assert ingress["SourceSecurityGroupId"] == ref("RotationSecurityGroup")
    assert ingress["FromPort"] == ingress["ToPort"] == 5432


def test_the_proxy_knows_both_logins(resources: dict) -> None:
    auth = resources["DbProxy"]["Properties"]["Auth"]
    assert [a["SecretArn"] for a in auth] == [ref("DbSecret"), ref("DbAppSecret")]
    assert all(a["IAMAuth"] == "DISABLED" and a["AuthScheme"] == "SECRETS" for a in auth)
    assert resources["DbProxy"]["Properties"]["RequireTLS"] is True
    read = secrets_read_role(resources["DbProxyRole"])
    assert read[:2] == [ref("DbSecret"), ref("DbAppSecret")]
    # the further shards' proxies share the role (tests/template/test_shards.py)
    assert [r["Fn::If"][0] for r in read[2:]] == ["HasExtraShards"]


def secrets_read_role(role: dict[str, Any]) -> list[Any]:
    found = []
    for policy in role["Properties"]["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            res = statement["Resource"]
            found.extend(res if isinstance(res, list) else [res])
    return found


def test_the_proxy_borrow_timeout_is_below_the_function_timeout(template: dict,
                                                                resources: dict) -> None:
    pool = resources["DbProxyTargetGroup"]["Properties"]["ConnectionPoolConfigurationInfo"]
    assert pool["ConnectionBorrowTimeout"] == ref("ProxyBorrowTimeoutSeconds")
    parameter = template["Parameters"]["ProxyBorrowTimeoutSeconds"]
    http_timeout = template["Globals"]["Function"]["Timeout"]
    assert parameter["Default"] <= parameter["MaxValue"] < http_timeout
    scheduled_min = template["Parameters"]["ScheduledTimeoutSeconds"]["MinValue"]
    assert parameter["MaxValue"] < scheduled_min
