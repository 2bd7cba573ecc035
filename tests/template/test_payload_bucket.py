"""The payload bucket of big payloads (tierq.logic.payloads): SSE-KMS with the stack's key,
public access blocked, TLS only, a lifecycle backstop longer than the longest delay plus
the default retention; the enqueue function may presign uploads, the claim function
downloads, the reaper deletes, and no other function touches it."""

from __future__ import annotations

from typing import Any

from tests.support.template import load_template
from tierq.config import Settings
from tierq.models.tasks import MAX_DELAY_SECONDS

DAY = 86_400
PAYLOAD_POLICIES = {"PayloadUploadPolicy": "EnqueueFunction",
                    "PayloadReadPolicy": "ClaimFunction",
                    "PayloadDeletePolicy": "ReaperFunction"}


def _resources() -> dict[str, Any]:
    resources: dict[str, Any] = load_template()["Resources"]
    return resources


def test_the_bucket_is_encrypted_with_its_key_private_and_tls_only() -> None:
    resources = _resources()
    bucket = resources["PayloadBucket"]["Properties"]
    [rule] = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": ["PayloadKey", "Arn"]}}
    assert rule["BucketKeyEnabled"] is True
    assert resources["PayloadKey"]["Properties"]["EnableKeyRotation"] is True
    assert all(bucket["PublicAccessBlockConfiguration"].values())
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    [deny] = resources["PayloadBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Action"] == "s3:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert {"Fn::Sub": "${PayloadBucket.Arn}/*"} in deny["Resource"]


def test_the_lifecycle_backstop_outlasts_the_longest_delay_plus_retention() -> None:
    template = load_template()
    rules = template["Resources"]["PayloadBucket"]["Properties"][
        "LifecycleConfiguration"]["Rules"]
    [backstop] = [r for r in rules if r.get("ExpirationInDays")]
    assert backstop["Prefix"] == "tenants/"
    assert backstop["ExpirationInDays"] == {"Ref": "PayloadExpirationDays"}
    days = template["Parameters"]["PayloadExpirationDays"]
    retention = Settings().retention_seconds
    assert int(days["MinValue"]) * DAY > MAX_DELAY_SECONDS + retention
    assert int(days["Default"]) >= int(days["MinValue"])


def test_each_function_gets_only_its_own_payload_permissions() -> None:
    resources = _resources()
    for policy, function in PAYLOAD_POLICIES.items():
        users = [name for name, r in resources.items()
                 if r["Type"] == "AWS::Serverless::Function"
                 and {"Ref": policy} in r["Properties"].get("Policies", [])]
        assert users == [function], policy
        for statement in resources[policy]["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Resource"] in (
                {"Fn::Sub": "${PayloadBucket.Arn}/tenants/*"},
                {"Fn::GetAtt": ["PayloadKey", "Arn"]}), policy
    actions = {policy: {s["Action"] for s in resources[policy]["Properties"][
        "PolicyDocument"]["Statement"]} for policy in PAYLOAD_POLICIES}
    assert actions == {"PayloadUploadPolicy": {"s3:PutObject", "kms:GenerateDataKey"},
                       "PayloadReadPolicy": {"s3:GetObject", "kms:Decrypt"},
                       "PayloadDeletePolicy": {"s3:DeleteObject"}}


def test_every_function_knows_the_bucket() -> None:
    env = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    assert env["TIERQ_PAYLOAD_BUCKET"] == {"Ref": "PayloadBucket"}
