"""SnapStart in template.yaml: a parameter, on by default for the HTTP functions where the
region offers it; published versions behind the alias ``live``, which the HTTP API's
integrations and invoke permissions name (checked on SAM's own translation when the tools
venv is there); a build stamp so that every deploy's layer reaches the alias."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("yaml")

from tests.support.template import REPO, TEMPLATE, load_template

HTTP_FUNCTIONS = ("EnqueueFunction", "ClaimFunction", "AckFunction", "AdminFunction")
# Lambda SnapStart: every commercial region but these two (AWS Lambda developer guide,
# "Supported Regions"; codes from the AWS Region billing codes table)
WITHOUT_SNAPSTART = ("ap-southeast-6", "ap-east-2")  # Asia Pacific (New Zealand), (Taipei)
TOOLS_PYTHON = REPO / ".local" / "tools-venv" / "bin" / "python"


def _condition(template: dict[str, Any], name: str, params: dict[str, str]) -> bool:
    """Condition ``name`` of the template for these parameter values (the few intrinsics
    conditions use here)."""

    def value(node: Any) -> Any:
        if isinstance(node, dict) and "Ref" in node:
            return params[node["Ref"]]
        return node

    def holds(node: Any) -> bool:
        (key, args), = node.items()
        if key == "Condition":
            return holds(template["Conditions"][args])
        if key == "Fn::Equals":
            return bool(value(args[0]) == value(args[1]))
        if key == "Fn::Not":
            return not holds(args[0])
        if key == "Fn::Or":
            return any(holds(a) for a in args)
        if key == "Fn::And":
            return all(holds(a) for a in args)
        raise AssertionError(f"unexpected {key} in condition {name}")

    return holds(template["Conditions"][name])


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def test_snapstart_is_a_parameter_on_by_default(template: dict[str, Any]) -> None:
    param = template["Parameters"]["SnapStart"]
    assert param["Default"] == "Enabled"
    assert param["AllowedValues"] == ["Enabled", "Disabled"]


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-1", "ap-southeast-2",
                                    "ap-east-1", *WITHOUT_SNAPSTART])
@pytest.mark.parametrize("setting", ["Enabled", "Disabled"])
def test_snapstart_is_on_where_the_region_offers_it_unless_turned_off(
        template: dict[str, Any], region: str, setting: str) -> None:
    on = _condition(template, "UseSnapStart", {"AWS::Region": region, "SnapStart": setting})
    assert on == (setting == "Enabled" and region not in WITHOUT_SNAPSTART)


def test_http_functions_publish_versions_behind_an_alias_with_snapstart(
        template: dict[str, Any]) -> None:
    runtime = template["Globals"]["Function"]["Runtime"]
    assert runtime.startswith("python3.") and int(runtime.split(".")[1]) >= 12  # SnapStart
    for logical_id in HTTP_FUNCTIONS:
        props = template["Resources"][logical_id]["Properties"]
        assert props["AutoPublishAlias"] == "live", logical_id
        assert props["AutoPublishAliasAllProperties"] is True, logical_id
        assert props["SnapStart"] == {
            "ApplyOn": {"Fn::If": ["UseSnapStart", "PublishedVersions", "None"]}}, logical_id
        # the stamp that makes each build's function new (see functions/http.mk)
        assert template["Resources"][logical_id]["Metadata"] == {"BuildMethod": "makefile"}


def test_scheduled_functions_keep_no_snapshot(template: dict[str, Any]) -> None:
    for logical_id, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function" or logical_id in HTTP_FUNCTIONS:
            continue
        assert "SnapStart" not in resource["Properties"], logical_id
        assert "AutoPublishAlias" not in resource["Properties"], logical_id


def _build(function: str, out: Path) -> dict[str, str]:
    out.mkdir()
    logical_id = {"enqueue": "EnqueueFunction", "claim": "ClaimFunction", "ack": "AckFunction",
                  "admin": "AdminFunction"}[function]
    makefile = REPO / "functions" / function / "Makefile"
    # as sam build runs it: a scratch working directory, the Makefile by absolute path
    subprocess.run(["make", "--makefile", str(makefile), f"ARTIFACTS_DIR={out}",
                    f"build-{logical_id}"], cwd=out.parent, check=True, capture_output=True,
                   env={**os.environ, "PYTHON": sys.executable})
    return {path.name: path.read_text() for path in out.iterdir()}


@pytest.mark.parametrize("function", ["enqueue", "claim", "ack", "admin"])
def test_each_build_of_an_http_function_is_new(function: str, tmp_path: Path) -> None:
    first = _build(function, tmp_path / "first")
    second = _build(function, tmp_path / "second")
    app = (REPO / "functions" / function / "app.py").read_text()
    assert set(first) == set(second) == {"app.py", "build_stamp.txt"}
    assert first["app.py"] == second["app.py"] == app
    assert first["build_stamp.txt"] != second["build_stamp.txt"]


def test_integrations_and_permissions_name_the_alias(tmp_path: Path) -> None:
    """SAM's own translation (the tools venv's samtranslator): every HTTP route's
    integration invokes the alias, and every invoke permission is the alias's."""
    if not TOOLS_PYTHON.exists():
        pytest.skip(f"{TOOLS_PYTHON} not found: run `bash infra/tools/install-aws-tools.sh`")
    script = tmp_path / "translate.py"
    script.write_text(_TRANSLATE)
    done = subprocess.run([str(TOOLS_PYTHON), str(script), str(TEMPLATE)], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"})
    assert done.returncode == 0, done.stderr[-3000:]
    resources = json.loads(done.stdout)["Resources"]
    aliases = {logical_id: f"{logical_id}Aliaslive" for logical_id in HTTP_FUNCTIONS}
    for alias in aliases.values():
        assert resources[alias]["Type"] == "AWS::Lambda::Alias"
        assert resources[alias]["Properties"]["Name"] == "live"
    permissions = [r["Properties"] for r in resources.values()
                   if r["Type"] == "AWS::Lambda::Permission"
                   and r["Properties"].get("Principal") == "apigateway.amazonaws.com"]
    assert permissions
    assert {json.dumps(p["FunctionName"]) for p in permissions} == {
        json.dumps({"Ref": alias}) for alias in aliases.values()}
    body = resources["HttpApi"]["Properties"]["Body"]
    uris = [operation["x-amazon-apigateway-integration"]["uri"]["Fn::Sub"]
            for operations in body["paths"].values() for operation in operations.values()
            if isinstance(operation, dict) and "x-amazon-apigateway-integration" in operation]
    # every route of the four HTTP functions (each HttpApi event they have)
    declared = [event for f in HTTP_FUNCTIONS
                for event in load_template()["Resources"][f]["Properties"]["Events"].values()
                if event["Type"] == "HttpApi"]
    assert len(uris) == len(declared) >= 28
    assert all(any(f"${{{alias}}}" in uri for alias in aliases.values()) for uri in uris), uris


# SAM's translation of template.yaml as `sam package` leaves it (code in S3), without the
# transforms that run before it (Fn::ForEach: the further shards' nested stacks).
_TRANSLATE = '''
import json, sys
from cfnlint.decode import decode
from samtranslator.parser import parser
from samtranslator.translator.translator import Translator

template, errors = decode(sys.argv[1])
assert not errors, errors
template = json.loads(json.dumps(template))
template["Resources"] = {k: v for k, v in template["Resources"].items()
                         if not k.startswith("Fn::ForEach")}
template["Transform"] = "AWS::Serverless-2016-10-31"
for name, resource in template["Resources"].items():
    props = resource.get("Properties", {})
    for key in ("CodeUri", "ContentUri"):
        if isinstance(props.get(key), str):
            props[key] = f"s3://bucket/{name}.zip"
parameters = {"JwtIssuer": "https://issuer.example", "JwtAudience": "client",
              "AWS::Region": "us-east-1"}
out = Translator({}, parser.Parser()).translate(template, parameter_values=parameters,
                                               get_managed_policy_map=lambda: {})
print(json.dumps(out))
'''
