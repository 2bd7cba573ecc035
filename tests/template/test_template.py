"""template.yaml: lint it with the real AWS tools and check the wiring the team relies on.

The linters run from the separate tools venv (`.local/tools-venv`, created by
`infra/tools/install-aws-tools.sh`); those two tests skip when it is absent. The structural
checks only need PyYAML and always run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from tests.support.template import (  # noqa: E402
    FUNCTIONS,
    REPO,
    TEMPLATE,
    load_template,
    logical_id,
)
from tierq.maintenance.registry import jobs  # noqa: E402

TOOLS_BIN = REPO / ".local" / "tools-venv" / "bin"
LAYER_IDS = ("TierqLayerArm64", "TierqLayerX8664")

# (method, path) -> function logical id. Every route, exactly once.
ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/v1/queues/{queue}/tasks"): "EnqueueFunction",
    ("POST", "/v1/flows"): "EnqueueFunction",
    ("POST", "/v1/queues/{queue}/payloads"): "EnqueueFunction",
    ("POST", "/v1/queues/{queue}/claims"): "ClaimFunction",
    ("POST", "/v1/queues/{queue}/payloads/fetch"): "ClaimFunction",
    ("POST", "/v1/queues/{queue}/acks"): "AckFunction",
    ("POST", "/v1/queues/{queue}/nacks"): "AckFunction",
    ("POST", "/v1/queues/{queue}/releases"): "AckFunction",
    ("POST", "/v1/queues/{queue}/heartbeats"): "AckFunction",
    ("GET", "/v1/queues"): "AdminFunction",
    ("GET", "/v1/queues/{queue}"): "AdminFunction",
    ("PUT", "/v1/queues/{queue}"): "AdminFunction",
    ("GET", "/v1/queues/{queue}/tasks/{id}"): "AdminFunction",
    ("DELETE", "/v1/queues/{queue}/tasks/{id}"): "AdminFunction",
    ("POST", "/v1/queues/{queue}/tasks/{id}/cancel"): "AdminFunction",
    ("GET", "/v1/queues/{queue}/dlq"): "AdminFunction",
    ("POST", "/v1/queues/{queue}/dlq/replay"): "AdminFunction",
    ("POST", "/v1/queues/{queue}/dlq/purge"): "AdminFunction",
    ("GET", "/v1/metrics/queues/detailed"): "AdminFunction",
    ("GET", "/v1/metrics/queues/running"): "AdminFunction",
    ("GET", "/v1/metrics/consumers"): "AdminFunction",
    ("GET", "/v1/queues/{queue}/throughput"): "AdminFunction",
    ("GET", "/v1/schedules"): "AdminFunction",
    ("PUT", "/v1/schedules/{name}"): "AdminFunction",
    ("GET", "/v1/schedules/{name}"): "AdminFunction",
    ("DELETE", "/v1/schedules/{name}"): "AdminFunction",
    ("GET", "/v1/openapi.json"): "AdminFunction",
    ("GET", "/dashboard"): "AdminFunction",
}
PUBLIC_ROUTES = {("GET", "/v1/openapi.json"), ("GET", "/dashboard")}

SCHEDULED = [name for name, (_, tick) in FUNCTIONS.items() if tick]

SHARED_ENV = {
    "DB_SECRET_ARN",
    "DB_HOST",
    "DB_PORT",
    "DB_NAME",
    "VALKEY_URL",
    "TIERQ_WARM_MAX",
    "TIERQ_LEASE_SECONDS",
    "TIERQ_MAX_ATTEMPTS",
    "TIERQ_RECONCILE_GRACE_SECONDS",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
}




@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]


def functions(resources: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}


def http_events(resources: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    found = []
    for fn_id, fn in functions(resources).items():
        for event in (fn["Properties"].get("Events") or {}).values():
            if event["Type"] in ("HttpApi", "Api"):
                props = event["Properties"]
                found.append((props["Method"].upper(), props["Path"], fn_id, props))
    return found


# ---------------------------------------------------------------- the real linters
def _tools_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    env.setdefault("AWS_REGION", env["AWS_DEFAULT_REGION"])
    # sam validate builds a boto session; offline dummy credentials are enough.
    env.setdefault("AWS_ACCESS_KEY_ID", "testing")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    env["SAM_CLI_TELEMETRY"] = "0"
    return env


def _tool(name: str) -> Path:
    path = TOOLS_BIN / name
    if not path.exists():
        pytest.skip(
            f"{path} not found: run `bash infra/tools/install-aws-tools.sh` to create the AWS "
            "tools venv (.local/tools-venv) with aws-sam-cli and cfn-lint"
        )
    return path


def test_cfn_lint_passes_with_no_findings() -> None:
    proc = subprocess.run(
        [str(_tool("cfn-lint")), str(TEMPLATE)],
        cwd=REPO,
        env=_tools_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"cfn-lint found problems:\n{proc.stdout}\n{proc.stderr}"


def test_cfn_lint_passes_for_the_shard_stack_and_with_further_shards(tmp_path: Path) -> None:
    """infra/shard.yaml (one further shard's nested stack), and template.yaml with two
    further shards named (the loops expanded for real names, not cfn-lint's stand-ins)."""
    text = TEMPLATE.read_text()
    default = '  ExtraShardNames:\n    Type: CommaDelimitedList\n    Default: ""\n'
    assert default in text
    sharded = tmp_path / "template.yaml"
    sharded.write_text(text.replace(default, default.replace('""', '"b,c"')).replace(
        "Location: infra/shard.yaml", f"Location: {REPO / 'infra' / 'shard.yaml'}"))
    for path in (REPO / "infra" / "shard.yaml", sharded):
        proc = subprocess.run([str(_tool("cfn-lint")), str(path)], cwd=REPO, env=_tools_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"cfn-lint {path}:\n{proc.stdout}\n{proc.stderr}"


def test_sam_validate_lint_passes() -> None:
    proc = subprocess.run(
        [str(_tool("sam")), "validate", "--lint", "--template", str(TEMPLATE)],
        cwd=REPO,
        env=_tools_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"sam validate --lint failed:\n{proc.stdout}\n{proc.stderr}"


# ---------------------------------------------------------------- HTTP routes
def test_every_route_is_declared_exactly_once_on_the_right_function(resources: dict) -> None:
    events = http_events(resources)
    counts = Counter((method, path) for method, path, _, _ in events)
    duplicates = {route: n for route, n in counts.items() if n > 1}
    assert not duplicates, f"routes declared more than once: {duplicates}"
    declared = {(method, path): fn for method, path, fn, _ in events}
    assert declared == ROUTES


def test_routes_are_explicit_http_api_v2_routes(resources: dict) -> None:
    for method, path, fn, props in http_events(resources):
        assert "proxy+" not in path and method != "ANY", (fn, method, path)
        assert props.get("ApiId") == {"Ref": "HttpApi"}, (fn, method, path)
        assert str(props.get("PayloadFormatVersion", "2.0")) == "2.0", (fn, method, path)


def test_jwt_is_the_default_and_only_static_pages_are_public(resources: dict) -> None:
    api = resources["HttpApi"]
    assert api["Type"] == "AWS::Serverless::HttpApi"
    auth = api["Properties"]["Auth"]
    default = auth["DefaultAuthorizer"]
    assert "JwtConfiguration" in auth["Authorizers"][default]
    for method, path, _, props in http_events(resources):
        public = (props.get("Auth") or {}).get("Authorizer") == "NONE"
        assert public == ((method, path) in PUBLIC_ROUTES), (method, path)


# ---------------------------------------------------------------- functions
def test_functions_are_the_declared_set_with_their_code_folders(
    template: dict, resources: dict
) -> None:
    fns = functions(resources)
    assert set(fns) == set(FUNCTIONS)
    glob = template["Globals"]["Function"]
    assert glob["Runtime"] == "python3.13"
    assert glob["Handler"] == "app.lambda_handler"
    for fn_id, (folder, _) in FUNCTIONS.items():
        props = fns[fn_id]["Properties"]
        assert props["CodeUri"].rstrip("/") == f"functions/{folder}"
        assert props.get("Handler", glob["Handler"]) == "app.lambda_handler"
        assert props.get("Runtime", glob["Runtime"]) == "python3.13"


def test_every_function_gets_the_layer_for_its_architecture(
    template: dict, resources: dict
) -> None:
    expected = {"Fn::If": ["IsArm64", {"Ref": LAYER_IDS[0]}, {"Ref": LAYER_IDS[1]}]}
    global_layers = template["Globals"]["Function"].get("Layers", [])
    for fn_id, fn in functions(resources).items():
        layers = global_layers + fn["Properties"].get("Layers", [])
        assert expected in layers, fn_id
    assert template["Globals"]["Function"]["Architectures"] == [{"Ref": "Architecture"}]
    for layer_id, arch in zip(LAYER_IDS, ("arm64", "x86_64"), strict=True):
        layer = resources[layer_id]
        assert layer["Type"] == "AWS::Serverless::LayerVersion"
        assert layer["Properties"]["ContentUri"].rstrip("/") == "layers/tierq"
        assert layer["Properties"]["CompatibleArchitectures"] == [arch]
        assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
        assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": arch}


def test_makefile_has_a_target_per_layer() -> None:
    makefile = (REPO / "layers" / "tierq" / "Makefile").read_text()
    for layer_id in LAYER_IDS:
        assert re.search(rf"^build-{layer_id}:", makefile, re.M), layer_id


def test_shared_environment_lives_in_globals(template: dict, resources: dict) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert set(env) >= SHARED_ENV
    assert env["POWERTOOLS_SERVICE_NAME"] == "tierq"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Tierq"
    assert env["VALKEY_URL"]["Fn::Sub"].startswith("rediss://")
    fns = functions(resources)
    for fn_id, (_, tick) in FUNCTIONS.items():
        own = fns[fn_id]["Properties"].get("Environment", {}).get("Variables", {})
        if tick:
            assert tick in own, fn_id


# ---------------------------------------------------------------- scheduled functions
# The dispatcher's invocations overlap on purpose (see its own test below).
@pytest.mark.parametrize("fn_id", [f for f in SCHEDULED if f != "DispatcherFunction"])
def test_scheduled_function_runs_alone_without_retries(
    template: dict, resources: dict, fn_id: str
) -> None:
    props = resources[fn_id]["Properties"]
    assert props["ReservedConcurrentExecutions"] == 1
    timeout = props["Timeout"]
    if isinstance(timeout, dict):  # a parameter: check its default
        timeout = template["Parameters"][timeout["Ref"]]["Default"]
    assert 60 < int(timeout) <= 120
    invoke = props["EventInvokeConfig"]
    assert invoke["MaximumRetryAttempts"] == 0
    on_failure = invoke["DestinationConfig"]["OnFailure"]
    assert on_failure["Type"] == "SQS"
    assert on_failure["Destination"] == {"Fn::GetAtt": ["ScheduledFailureQueue", "Arn"]}
    assert not props.get("Events"), "scheduled by an AWS::Scheduler::Schedule, not an event"


def test_the_dispatcher_waits_for_its_consumers_and_never_wakes_itself(
    template: dict, resources: dict
) -> None:
    """It may run long enough to wait for the invocations it started (up to Lambda's 900 s),
    so the next minute's invocation may overlap it (no reserved concurrency of 1: its cap
    is DispatcherReservedConcurrency, tests/template/test_template_hardening.py); it makes
    no retries, has no wake of its own, and may invoke exactly the allow-list's functions;
    every other function that makes tasks ready may wake it, and nothing else."""
    props = resources["DispatcherFunction"]["Properties"]
    assert props["ReservedConcurrentExecutions"]["Fn::If"][1] == {
        "Ref": "DispatcherReservedConcurrency"}
    timeout = template["Parameters"][props["Timeout"]["Ref"]]
    assert 120 <= int(timeout["Default"]) <= int(timeout["MaxValue"]) <= 900
    assert props["EventInvokeConfig"]["MaximumRetryAttempts"] == 0
    env = props["Environment"]["Variables"]
    assert env["TIERQ_DISPATCHER_FUNCTION"] == ""
    glob = template["Globals"]["Function"]["Environment"]["Variables"]
    assert glob["TIERQ_DISPATCHER_FUNCTION"] == {"Fn::Sub": "${AWS::StackName}-dispatcher"}
    assert glob["TIERQ_CONSUMER_FUNCTIONS"] == {"Fn::Join": [",", {"Ref": "ConsumerFunctionArns"}]}
    assert props["FunctionName"] == {"Fn::Sub": "${AWS::StackName}-dispatcher"}
    [consumers] = [p for p in props["Policies"] if isinstance(p, dict) and "Fn::If" in p
                   and p["Fn::If"][0] == "HasConsumerFunctions"]
    condition, statement, otherwise = consumers["Fn::If"]
    assert condition == "HasConsumerFunctions" and otherwise == {"Ref": "AWS::NoValue"}
    [allow] = statement["Statement"]
    assert allow["Resource"] == {"Ref": "ConsumerFunctionArns"}
    assert set(allow["Action"]) == {"lambda:InvokeFunction", "lambda:GetFunctionConfiguration"}
    wake = resources["DispatcherWakePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert wake == [{"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": {
        "Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}"
                   ":function:${AWS::StackName}-dispatcher"}}]
    waking = {fn_id for fn_id, fn in functions(resources).items()
              if {"Ref": "DispatcherWakePolicy"} in fn["Properties"].get("Policies", [])}
    assert waking == set(FUNCTIONS) - {"DispatcherFunction", "MigrateFunction"}


def test_each_scheduled_function_has_one_schedule(resources: dict) -> None:
    schedules = {k: v for k, v in resources.items() if v["Type"] == "AWS::Scheduler::Schedule"}
    targets: Counter[str] = Counter()
    for sched in schedules.values():
        props = sched["Properties"]
        assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
        target = props["Target"]
        assert target["RoleArn"] == {"Fn::GetAtt": ["SchedulerRole", "Arn"]}
        assert target["RetryPolicy"]["MaximumRetryAttempts"] == 0
        fn_id, attr = target["Arn"]["Fn::GetAtt"]
        assert attr == "Arn"
        targets[fn_id] += 1
    assert targets == Counter({fn_id: 1 for fn_id in SCHEDULED})


def test_the_scheduled_functions_are_exactly_the_registered_maintenance_jobs(
    resources: dict,
) -> None:
    """Each registered job has its function (its folder, its tick variable, a one-line
    app.py deriving the handler from the registry) and one schedule whose input names it;
    each schedule of the template runs a registered job on that job's function."""
    fns = functions(resources)
    schedules = [r["Properties"]["Target"] for r in resources.values()
                 if r["Type"] == "AWS::Scheduler::Schedule"]
    scheduled = {json.loads(t["Input"])["job"]: t["Arn"]["Fn::GetAtt"][0] for t in schedules}
    assert len(scheduled) == len(schedules), "two schedules run one job"
    assert scheduled == {name: logical_id(name) for name in jobs()}
    for name, job in jobs().items():
        props = fns[logical_id(name)]["Properties"]
        assert props["CodeUri"].rstrip("/") == f"functions/{name}"
        assert job.schedule_env in props["Environment"]["Variables"], name
        app = (REPO / "functions" / name / "app.py").read_text()
        assert f'lambda_handler = scheduled_handler("{name}")' in app, name


def test_scheduler_role_invokes_exactly_the_scheduled_functions(resources: dict) -> None:
    statements = [
        st
        for policy in resources["SchedulerRole"]["Properties"]["Policies"]
        for st in policy["PolicyDocument"]["Statement"]
    ]
    invoke = [st for st in statements if st["Action"] == "lambda:InvokeFunction"]
    assert len(invoke) == 1
    arns = invoke[0]["Resource"]
    assert sorted(a["Fn::GetAtt"][0] for a in arns) == sorted(SCHEDULED)


# ---------------------------------------------------------------- the rest
def test_migrations_custom_resource_reruns_on_version_change(resources: dict) -> None:
    res = resources["DbMigrations"]
    assert res["Type"].startswith("Custom::")
    props = res["Properties"]
    assert props["ServiceToken"] == {"Fn::GetAtt": ["MigrateFunction", "Arn"]}
    assert props["MigrationsVersion"] == {"Ref": "MigrationsVersion"}
    # (a new layer, whose tierq holds the migrations, re-runs it too)
    assert props["Layer"] == {"Fn::If": ["IsArm64", {"Ref": "TierqLayerArm64"},
                                         {"Ref": "TierqLayerX8664"}]}


def test_no_wildcard_resources_in_inline_policies(resources: dict) -> None:
    for res_id, res in resources.items():
        props = res.get("Properties", {})
        docs = [p["PolicyDocument"] for p in props.get("Policies", []) if "PolicyDocument" in p]
        docs += [p for p in props.get("Policies", []) if isinstance(p, dict) and "Statement" in p]
        for doc in docs:
            for st in doc["Statement"]:
                if st["Effect"] == "Allow":
                    assert st["Resource"] != "*", (res_id, st)


def test_dashboard_body_matches_infra_dashboard_json(resources: dict) -> None:
    body = resources["TierqDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    reference = (REPO / "infra" / "dashboard.json").read_text()
    assert json.loads(body) == json.loads(reference), (
        "TierqDashboard's body and infra/dashboard.json differ: edit both"
    )


def test_outputs_the_team_documents(template: dict) -> None:
    assert {"ApiUrl", "CacheEndpoint", "ProxyEndpoint", "DbSecretArn"} <= set(template["Outputs"])
